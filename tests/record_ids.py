"""The ids the sink gives rows, computed the way a task does (to compare with what a topic holds).

Ids are bytes (spark_recoverable_sink.ids, format 1); the tests handle them as
hex strings, as ``tests.kafka_helpers.Record.rid`` reads them.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
import pyarrow as pa

from spark_recoverable_sink.ids import (
    CONTENT,
    KEY,
    POSITION,
    batch_prefix,
    new_occurrences,
    record_ids,
    scheme_for,
    with_ids,
)
from spark_recoverable_sink.schema import normalize_batch

#: How reported rows are grouped: per batch (ids whose scope is each row's place, or KEY ids), or per (batch,
#: scope) (ids in the scope of a Spark partition or an exactly-once lane).
BATCH, SCOPE = "batch", "scope"


def ids_of(sink: str, run: str, batch: int, partition: int, batches: Iterable[pa.RecordBatch],
           topic: str | None = "t", places: Iterable[int] | None = None, kind: int = CONTENT) -> list[str]:
    """Every id (hex) of one task's rows of Spark ``partition`` (arrival order), as ``write_partition`` gives them:
    CONTENT ids in the partition's scope, or named by each row's place when ``places`` are given (the driver's
    re-split: :func:`spark_places`, in row order); ``kind=POSITION``: ids by position in the partition's scope."""
    place_list = None if places is None else list(places)
    scheme = scheme_for(kind, sink, run, batch, None if place_list is not None else partition)
    occ = new_occurrences() if kind == CONTENT else None
    out: list[str] = []
    seq = 0
    for b in batches:
        if not b.num_rows:
            continue
        pl = None if place_list is None else np.array(place_list[seq:seq + b.num_rows], dtype=np.int64)
        norm = with_ids(normalize_batch(b, topic, seq, run), scheme, occ, pl)
        out += [i.hex() for i in record_ids(norm, seq).to_pylist()]
        seq += b.num_rows
    return out


def spark_places(spark: Any, rows: list[dict[str, Any]], schema: str, topic: str | None = None) -> list[int]:
    """Each row's place as the driver computes it (``spark_recoverable_sink.driver.split._record_hash``), by
    Spark itself: ``rows`` as a DataFrame of ``schema``, ``topic`` the sink's topic option."""
    from spark_recoverable_sink.config import SinkConfig
    from spark_recoverable_sink.driver.split import _record_hash

    df = spark.createDataFrame(rows, schema)
    cfg = SinkConfig.build("places", {"bootstrap.servers": "localhost:9092"}, "/tmp/rks-places", topic=topic)
    return [r[0] for r in df.select(_record_hash(df, cfg)).collect()]


def id_kind(rid: str) -> int:
    return int(rid[:2], 16) & 15


def id_batch(rid: str) -> int:
    """The batch of an id (hex)."""
    return int(rid[18:26], 16)


def id_scope(rid: str) -> int:
    """The scope of a POSITION or CONTENT id (hex): its input's name hashed, Spark partition, lane or place."""
    return int(rid[26:42] if id_kind(rid) == POSITION else rid[26:34], 16)


def id_group(rid: str, by: str = BATCH) -> str:
    """The group an id (hex) is counted in: its run key and batch, and its scope when ``by`` is :data:`SCOPE`."""
    return rid[2:26] + (f"{id_scope(rid):08x}" if by == SCOPE else "")


def group_of(sink: str, run: str, batch: int, scope: int | None = None) -> str:
    """:func:`id_group` of the ids of (sink, run, batch[, scope])."""
    key = batch_prefix(sink, run, batch) + (b"" if scope is None else scope.to_bytes(4, "big"))
    return key.hex()


def reported_rows(sink: str, reports: Iterable[Any], by: str = BATCH) -> dict[str, int]:
    """Rows per id group (per batch, or per (batch, Spark partition) with ``by=SCOPE``) that the ``BatchReport``
    objects say were written."""
    out: dict[str, int] = {}
    for r in reports:
        for p in r.task_reports:
            key = group_of(sink, r.run, r.batch_id, p.origin if by == SCOPE else None)
            out[key] = out.get(key, 0) + p.rows
    return out


def check_ids_per_group(ids: Mapping[str | None, int], want: Mapping[str, int], others: bool = False) -> None:
    """Assert a topic holds exactly ``want[group]`` distinct ids in each id group, each read once.

    ``ids``: id -> times read (``TopicContents.ids``); ``want``: rows per group (e.g. :func:`reported_rows`),
    for tests that know how many rows each (run, batch[, partition]) wrote but not the rows themselves. Every id
    must be a CONTENT id whose occurrences, within a (group, fingerprint), are ``0..n-1`` (what a task gives ``n``
    equal rows), or a POSITION id whose positions, within a scope, are ``0..n-1``, so a lost record cannot hide
    behind a stray one. With ``others`` the topic may also
    hold ids of groups ``want`` does not name (rows no report counts, e.g. of a batch a stop interrupted): not
    checked.
    """
    by = SCOPE if want and len(next(iter(want))) == 32 else BATCH
    want = {k: v for k, v in want.items() if v}
    assert None not in ids or others, f"{ids[None]} record(s) without an id"
    got_ids = {rid: n for rid, n in ids.items() if rid is not None and (not others or id_group(rid, by) in want)}
    kinds = {id_kind(rid) for rid in got_ids}
    assert kinds <= {CONTENT, POSITION}, f"ids of kinds {sorted(kinds)}, not CONTENT or POSITION"
    dups = {rid: n for rid, n in got_ids.items() if n > 1}
    assert not dups, f"{len(dups)} id(s) read more than once, e.g. {sorted(dups.items())[:5]}"
    got = dict(sorted(Counter(id_group(rid, by) for rid in got_ids).items()))
    assert got == dict(sorted(want.items())), {
        p: {"read": got.get(p, 0), "want": want.get(p, 0)} for p in sorted(set(got) | set(want))
        if got.get(p, 0) != want.get(p, 0)}
    numbers: dict[str, list[int]] = {}  # CONTENT: occurrences per (scope, fingerprint); POSITION: positions per scope
    for rid in got_ids:
        cut = -16 if id_kind(rid) == POSITION else -8
        numbers.setdefault(rid[:cut], []).append(int(rid[cut:], 16))
    gaps = {stem: sorted(o) for stem, o in numbers.items() if sorted(o) != list(range(len(o)))}
    assert not gaps, f"occurrences or positions with gaps (a lost or stray record): {sorted(gaps.items())[:5]}"


__all__ = ["BATCH", "SCOPE", "POSITION", "CONTENT", "KEY", "ids_of", "spark_places", "id_kind", "id_batch", "id_scope",
           "id_group", "group_of", "reported_rows", "check_ids_per_group"]

#: The id scheme of chunks the unit tests make by hand (CONTENT ids of sink "s", run "r", batch 1, scope 0).
TEST_IDS = scheme_for(CONTENT, "s", "r", 1, 0)
__all__ += ["TEST_IDS"]


def id_run(rid: str) -> str:
    """The run key (hex) of an id (hex): :func:`spark_recoverable_sink.ids.run_key` of its (sink, run)."""
    return rid[2:18]


def run_of(sink: str, run: str) -> str:
    """:func:`id_run` of the ids of (sink, run)."""
    from spark_recoverable_sink.ids import run_key

    return run_key(sink, run).hex()


__all__ += ["id_run", "run_of"]
