"""The demo's read-back: the topic consumed completely, and its numbers against the batch reports.

Part of ``make demo`` (jobs/demo.py, which imports it from this folder).
"""

from __future__ import annotations

import json
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Mapping

from spark_recoverable_sink import (
    jobs as job,  # the templates' settings and building blocks
)

if TYPE_CHECKING:  # pragma: no cover
    from spark_recoverable_sink import BatchReport

__all__ = ["ID_HEADER", "ReadBack", "read_back", "expected_units", "summarize"]

ID_HEADER = "rks-id"


@dataclass
class ReadBack:
    """What the topic holds: every record's id (with multiplicity) and distinct values."""

    records: int = 0
    ids: Counter = field(default_factory=Counter)
    values: set = field(default_factory=set)
    without_id: int = 0
    seconds: float = 0.0

    @property
    def duplicates(self) -> int:
        return sum(c - 1 for c in self.ids.values() if c > 1)


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
                out.records += 1
                rid = next((v for k, v in (m.headers() or []) if k == ID_HEADER), None)
                if rid is None:
                    out.without_id += 1
                else:
                    out.ids[rid.decode()] += 1
                try:
                    out.values.add(json.loads(m.value())["n"])
                except (ValueError, KeyError, TypeError):
                    pass
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


def expected_units(sink_name: str, reports: list["BatchReport"]) -> dict[str, int]:
    """Records the reports say were written, per id prefix ``sink:run:batch:partition:``.

    A record's id is that prefix plus its content's fingerprint and its
    occurrence among equal records (docs/guarantees.md, "Record ids"), so the demo
    counts distinct ids per prefix against the reports.
    """
    return {f"{sink_name}:{r.run}:{r.batch_id}:{p.partition}:" if r.run else
            f"{sink_name}:{r.batch_id}:{p.partition}:": p.rows for r in reports for p in r.partition_reports}


def summarize(sink_name: str, reports: list["BatchReport"], got: ReadBack) -> dict[str, int]:
    """The demo's numbers; ``lost`` = records the reports promise that the topic does not hold (per id prefix)."""
    expected = expected_units(sink_name, reports)
    rows_sent = sum(r.rows for r in reports)
    per_prefix: Counter = Counter()
    unexpected = 0
    for rid in got.ids:
        prefix = rid.rsplit(":", 1)[0] + ":"
        if prefix in expected:
            per_prefix[prefix] += 1
        else:
            unexpected += 1
    return {
        "rows_sent": rows_sent,
        "records_received": got.records,
        "distinct_ids": len(got.ids),
        "distinct_values": len(got.values),
        "duplicates": got.duplicates,
        "lost": sum(max(0, n - per_prefix[p]) for p, n in expected.items()),
        "unexpected_ids": unexpected + sum(max(0, per_prefix[p] - n) for p, n in expected.items()),
        "missing_values": len(set(range(rows_sent)) - got.values),
        "records_without_id": got.without_id,
    }
