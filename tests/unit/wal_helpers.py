"""Helpers the WAL unit tests share (test_wal.py, test_wal_recovery.py): chunks, slots, raw LMDB writes."""

from __future__ import annotations

import lmdb
import pyarrow as pa

from spark_recoverable_sink.ids import new_occurrences, with_ids
from spark_recoverable_sink.schema import normalize_batch
from spark_recoverable_sink.wal.format import ChunkKey, encode_chunk
from spark_recoverable_sink.wal.log import Wal
from spark_recoverable_sink.wal.records import OPEN, AttemptState
from tests.record_ids import TEST_IDS

MIB = 1024 * 1024


def _chunk(n: int, size: int = 100, start: int = 0) -> bytes:
    b = pa.RecordBatch.from_pydict({"value": [b"%010d" % i + b"x" * (size - 10) for i in range(start, start + n)]})
    return encode_chunk(with_ids(normalize_batch(b, "t", start, "r"), TEST_IDS, new_occurrences()))


def _wal(tmp_path, **kw) -> Wal:
    return Wal(str(tmp_path / "slot"), sink_name="s", map_size=kw.pop("map_size", 64 * MIB), sync=True, **kw)


def _raw_put(path, db: bytes, key: bytes, value: bytes) -> None:
    env = lmdb.open(str(path), max_dbs=4)
    handle = env.open_db(db)
    with env.begin(write=True) as txn:
        txn.put(key, value, db=handle)
    env.close()


def _committed(tmp_path, sync: bool = True) -> tuple[Wal, ChunkKey]:
    wal = Wal(str(tmp_path / "slot"), sink_name="s", map_size=64 * MIB, sync=sync)
    ck = ChunkKey(1, 0, 0, wal.reserve_gen())
    wal.append(ck, _chunk(5), new_attempt=AttemptState(OPEN, 0, 0, 1.0))
    wal.commit_attempt(ck.attempt, 0, 5, 1.0)
    return wal, ck
