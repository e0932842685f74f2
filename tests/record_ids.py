"""The ids the sink gives rows, computed the way a task does (to compare with what a topic holds)."""

from __future__ import annotations

from typing import Iterable

import pyarrow as pa

from spark_recoverable_sink.ids import new_occurrences, record_id_prefix, record_ids, with_ids
from spark_recoverable_sink.schema import normalize_batch


def ids_of(sink: str, run: str, batch: int, partition: int, batches: Iterable[pa.RecordBatch],
           topic: str | None = "t") -> list[str]:
    """Every id of one partition's rows (arrival order), as ``write_partition`` gives them."""
    prefix = record_id_prefix(sink, batch, partition, run)
    occ = new_occurrences()
    out: list[str] = []
    seq = 0
    for b in batches:
        if not b.num_rows:
            continue
        norm = with_ids(normalize_batch(b, topic, prefix.decode(), seq, run), occ)
        out += [i.decode() for i in record_ids(prefix, norm, seq).to_pylist()]
        seq += b.num_rows
    return out
