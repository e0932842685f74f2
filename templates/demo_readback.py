"""The demo's read-back: the topic consumed completely, and its numbers against the batch reports.

Part of ``make demo`` (templates/demo.py, which imports it from this folder).
"""

from __future__ import annotations

import json
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Mapping

from spark_recoverable_sink import (
    batch_prefix,
    batch_prefix_of,
)
from spark_recoverable_sink import (
    jobs as job,  # the templates' settings and building blocks
)

if TYPE_CHECKING:  # pragma: no cover
    from spark_recoverable_sink import BatchReport

__all__ = ["ID_HEADER", "ReadBack", "read_back", "expected_units", "summarize", "verdict"]

ID_HEADER = "rks-id"


@dataclass
class ReadBack:
    """What the topic holds: every record's id (with multiplicity), and each value with the ids it came under."""

    records: int = 0
    ids: Counter = field(default_factory=Counter)
    values: dict = field(default_factory=dict)  # value's n -> the first id it came with
    values_under_other_ids: int = 0  # records whose value came before under another id: not removable by id
    without_id: int = 0
    seconds: float = 0.0

    @property
    def duplicates(self) -> int:
        """Records whose id came before: copies a consumer drops by their ``rks-id``."""
        return sum(c - 1 for c in self.ids.values() if c > 1)

    def add(self, rid: bytes | None, value: bytes | None) -> None:
        """Count one record read back."""
        self.records += 1
        if rid is None:
            self.without_id += 1
        else:
            self.ids[rid] += 1
        try:
            n = json.loads(value)["n"]  # type: ignore[arg-type]
        except (ValueError, KeyError, TypeError):
            return
        first = self.values.setdefault(n, rid)
        if first != rid:
            self.values_under_other_ids += 1


def read_back(bootstrap: str, topic: str, expected: int, idle_s: float, timeout_s: float,
              conf: Mapping[str, Any] | None = None) -> ReadBack:
    """Consume ``topic`` from the beginning of every partition (``assign``, no group).

    Stops when ``expected`` records came and nothing more arrived for a
    second, when the topic was quiet ``idle_s`` (15 s at least while fewer
    than ``expected`` came), or after ``timeout_s`` (a count by consuming:
    offsets alone would not tell records from transaction markers).
    """
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    extra = {k: v for k, v in (conf or {}).items() if k.startswith(job.CLIENT_CONF_PREFIXES) and k != "client.id"}
    c = Consumer({**extra, "bootstrap.servers": bootstrap, "group.id": f"rks-demo-reader-{time.time_ns()}",
                  "enable.auto.commit": False, "auto.offset.reset": "earliest", "fetch.max.bytes": 52428800})
    out = ReadBack()
    t0 = time.monotonic()
    try:
        md = c.list_topics(topic, timeout=10)
        c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in md.topics[topic].partitions])
        last = time.monotonic()
        while time.monotonic() - t0 < timeout_s:
            msgs = c.consume(10000, 0.5)
            for m in msgs:
                if m.error():
                    continue
                out.add(next((v for k, v in (m.headers() or []) if k == ID_HEADER), None), m.value())
            now = time.monotonic()
            if msgs:
                last = now
            quiet = now - last
            if out.records >= expected and quiet >= min(1.0, idle_s):
                break
            if quiet >= (idle_s if out.records >= expected else max(idle_s, 15.0)):
                break
    finally:
        c.close()
    out.seconds = time.monotonic() - t0
    return out


def expected_units(sink_name: str, reports: list["BatchReport"]) -> dict[bytes, int]:
    """Records the reports say were written, per batch: ``{batch prefix of its ids: rows}``.

    Every id of a batch starts with its :func:`~spark_recoverable_sink.batch_prefix`, whatever the
    scope of the sink's ids (docs/guarantees.md, "Record ids"), so the demo counts distinct ids per batch
    against the reports. A batch reported twice (run again) counts once, with its last report.
    """
    return {batch_prefix(sink_name, r.run, r.batch_id): r.rows for r in reports}


def summarize(sink_name: str, reports: list["BatchReport"], got: ReadBack) -> dict[str, int]:
    """The demo's numbers.

    ``lost``: records a batch's report promises that the topic does not hold
    (fewer distinct ids of the batch than its rows); ``unexpected_ids``: ids
    of no reported batch, or more of a batch than its rows; ``values_under_other_ids``:
    records whose value came before under another id (a copy that de-duplicating
    by id cannot remove); ``duplicates``: copies of an id (removable by it).
    """
    expected = expected_units(sink_name, reports)
    rows_sent = sum(expected.values())
    per_batch: Counter = Counter()
    unexpected = 0
    for rid in got.ids:
        prefix = batch_prefix_of(rid)
        if prefix in expected:
            per_batch[prefix] += 1
        else:
            unexpected += 1
    return {
        "rows_sent": rows_sent,
        "records_received": got.records,
        "distinct_ids": len(got.ids),
        "distinct_values": len(got.values),
        "duplicates": got.duplicates,
        "lost": sum(max(0, n - per_batch[p]) for p, n in expected.items()),
        "unexpected_ids": unexpected + sum(max(0, per_batch[p] - n) for p, n in expected.items()),
        "values_under_other_ids": got.values_under_other_ids,
        "missing_values": len(set(range(rows_sent)) - set(got.values)),
        "records_without_id": got.without_id,
    }


def verdict(numbers: dict[str, int]) -> bool:
    """Whether the demo passed: every reported row arrived under its batch's ids, no record is an unremovable
    copy, and nothing came without an id (copies of one id are at-least-once's, removed by it)."""
    return numbers["rows_sent"] > 0 and all(numbers[k] == 0 for k in (
        "lost", "missing_values", "unexpected_ids", "values_under_other_ids", "records_without_id"))
