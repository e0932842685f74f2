"""The ids the sink gives rows, computed the way a task does (to compare with what a topic holds)."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
import pyarrow as pa

from spark_recoverable_sink.ids import (
    new_occurrences,
    record_id_prefix,
    record_ids,
    with_ids,
)
from spark_recoverable_sink.schema import BATCH_SCOPE, normalize_batch


def ids_of(sink: str, run: str, batch: int, partition: int, batches: Iterable[pa.RecordBatch],
           topic: str | None = "t", scope: str = BATCH_SCOPE, places: Iterable[int] | None = None) -> list[str]:
    """Every id of one task's rows (arrival order), as ``write_partition`` gives them.

    ``scope``: the batch scope of at-least-once's default ``record_ids``, or ``""`` (ids that name their
    partition: exactly-once's lanes, ``record_ids="partition"``). ``places``: each row's place (Spark's hash the
    driver re-split the batch by, ``record_ids="content"`` through Spark: :func:`spark_places`), in row order.
    """
    place_list = None if places is None else list(places)
    prefix = record_id_prefix(sink, batch, partition, run, scope)
    occ = new_occurrences()
    out: list[str] = []
    seq = 0
    for b in batches:
        if not b.num_rows:
            continue
        pl = None if place_list is None else np.array(place_list[seq:seq + b.num_rows], dtype=np.int64)
        norm = with_ids(normalize_batch(b, topic, prefix.decode(), seq, run, scope), occ, None, pl)
        out += [i.decode() for i in record_ids(prefix, norm).to_pylist()]
        seq += b.num_rows
    return out


_SUFFIX = re.compile(r"(?:[0-9a-f]{8})?[0-9a-f]{16}-(0|[1-9][0-9]*)")


def spark_places(spark: Any, rows: list[dict[str, Any]], schema: str, topic: str | None = None) -> list[int]:
    """Each row's place as the driver computes it (:func:`spark_recoverable_sink.driver.resplit.record_hash`), by
    Spark itself: ``rows`` as a DataFrame of ``schema``, ``topic`` the sink's topic option."""
    from spark_recoverable_sink.config import SinkConfig
    from spark_recoverable_sink.driver.resplit import record_hash

    df = spark.createDataFrame(rows, schema)
    cfg = SinkConfig.build("places", {"bootstrap.servers": "localhost:9092"}, "/tmp/rks-places", topic=topic)
    return [r[0] for r in df.select(record_hash(df, cfg)).collect()]


def id_prefix(rid: str) -> str:
    """``sink:run:batch:`` (or ``sink:run:batch:partition:``) of a content id (what ``record_id_prefix`` gives);
    ValueError if not one."""
    prefix, _, suffix = rid.rpartition(":")
    if not prefix or not _SUFFIX.fullmatch(suffix):
        raise ValueError(f"not a content record id (sink:run:batch:partition:<16 hex>-<occurrence>): {rid!r}")
    return prefix + ":"


def ids_per_prefix(ids: Iterable[str | None]) -> dict[str, int]:
    """How many *distinct* ids each ``sink:run:batch:partition:`` prefix has (every id must be a content id)."""
    distinct = set(ids)
    assert None not in distinct, "a record has no id"
    return dict(sorted(Counter(id_prefix(rid) for rid in distinct).items()))  # type: ignore[arg-type]


def reported_rows(sink: str, reports: Iterable[Any], scope: str = BATCH_SCOPE) -> dict[str, int]:
    """Rows per id prefix (``sink:run:batch:``, or ``sink:run:batch:partition:`` with ``scope=""``) that the
    ``BatchReport`` objects say were written."""
    out: dict[str, int] = {}
    for r in reports:
        for p in r.partition_reports:
            key = record_id_prefix(sink, r.batch_id, p.partition, r.run, scope).decode()
            out[key] = out.get(key, 0) + p.rows
    return out


def check_ids_per_prefix(ids: Mapping[str | None, int], want: Mapping[str, int], others: bool = False) -> None:
    """Assert a topic holds exactly ``want[prefix]`` distinct ids under each id prefix, each read once.

    ``ids``: id -> times read (``TopicContents.ids``); ``want``: rows per prefix ``sink:run:batch:partition:``
    (e.g. :func:`reported_rows`), for tests that know how many rows each (run, batch, partition) wrote but
    not the rows themselves. Every id must be a content id (``<prefix><16 hex>-<occurrence>``) and, within
    a prefix, each fingerprint's occurrences must be ``0..n-1`` (what a task gives ``n`` equal rows), so a
    lost record cannot hide behind a stray one. With ``others`` the topic may also hold ids under prefixes
    ``want`` does not name (rows no report counts, e.g. of a batch a stop interrupted): not checked.
    """
    want = {k: v for k, v in want.items() if v}
    assert None not in ids or others, f"{ids[None]} record(s) without an id"
    got_ids = {rid: n for rid, n in ids.items() if rid is not None and (not others or id_prefix(rid) in want)}
    dups = {rid: n for rid, n in got_ids.items() if n > 1}
    assert not dups, f"{len(dups)} id(s) read more than once, e.g. {sorted(dups.items())[:5]}"
    got = ids_per_prefix(got_ids)
    assert got == dict(sorted(want.items())), {
        p: {"read": got.get(p, 0), "want": want.get(p, 0)} for p in sorted(set(got) | set(want))
        if got.get(p, 0) != want.get(p, 0)}
    occurrences: dict[str, list[int]] = {}
    for rid in got_ids:
        stem, _, occ = rid.rpartition("-")
        occurrences.setdefault(stem, []).append(int(occ))
    gaps = {stem: sorted(o) for stem, o in occurrences.items() if sorted(o) != list(range(len(o)))}
    assert not gaps, f"occurrences with gaps (a lost or stray record): {sorted(gaps.items())[:5]}"
