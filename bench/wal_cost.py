"""The WAL's own cost per record, outside Spark and Kafka.

Compares, for the same records:

* ``chunked`` -- what the sink does: one LMDB entry per Arrow batch
  (normalise + the records' ids, i.e. content fingerprints and occurrences
  stored as the columns ``rks_fp``, ``rks_occ`` + Arrow IPC encode + CRC +
  one committed, fsynced transaction), then one delete per chunk when it is
  acked;
* ``per_record`` -- the alternative design: one LMDB put per record in the
  same transaction, one delete per record at prune.

For ``chunked`` it also measures the in-memory ack tracking, without Kafka:
``ack_us`` as the native delivery engine (the sink's default) does it (its
counts of a chunk's round handed over once: ``Round.add_reports``), and
``ack_python_us`` as the Python engine does it (the round's
``on_delivery`` called as the delivery callback of each record).
``total_with_ack_us`` is write + ack (native) + prune. ``ids_us`` is the
part of the write that computes the ids (fingerprints + occurrences). Kafka itself is left out here; ``bench/run.py`` compares
the whole path with a plain produce loop against the broker.

Usage: python bench/wal_cost.py [--rows N] [--chunk N] [--sizes 100,1024] [--repeat N] [--json PATH]
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import shutil
import struct
import sys
import tempfile
import time

import lmdb
import pyarrow as pa

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from functools import partial  # noqa: E402

from spark_recoverable_sink.delivery.attempts import AttemptTracker
from spark_recoverable_sink.delivery.chunks import ChunkTracker  # noqa: E402
from spark_recoverable_sink.ids import CONTENT, new_occurrences, scheme_for, with_ids  # noqa: E402
from spark_recoverable_sink.schema import normalize_batch  # noqa: E402
from spark_recoverable_sink.wal.format import AttemptKey, ChunkKey, encode_chunk  # noqa: E402
from spark_recoverable_sink.wal.log import Wal  # noqa: E402


_SCHEME = scheme_for(CONTENT, "bench", "r", 0, 0)


def _batches(rows: int, chunk: int, size: int) -> list[pa.RecordBatch]:
    out = []
    for start in range(0, rows, chunk):
        n = min(chunk, rows - start)
        keys = pa.array([b"key-%d" % i for i in range(start, start + n)], pa.binary())
        vals = pa.array([os.urandom(size) for _ in range(n)], pa.binary())
        out.append(pa.RecordBatch.from_arrays([keys, vals], ["key", "value"]))
    return out


def bench_chunked(batches: list[pa.RecordBatch], path: str, sync: bool) -> dict[str, float]:
    wal = Wal(path, sink_name="bench", map_size=8 << 30, sync=sync)
    gen = wal.reserve_gen()
    rows = sum(b.num_rows for b in batches)
    keys = []
    occ = new_occurrences()
    t0 = time.perf_counter()
    seq = 0
    for b in batches:
        norm = with_ids(normalize_batch(b, "t", seq), _SCHEME, occ)
        chunk = encode_chunk(norm)
        key = ChunkKey(0, 0, seq, gen)
        wal.append(key, chunk)
        keys.append((key, len(chunk)))
        seq += b.num_rows
    t1 = time.perf_counter()
    for i in range(0, len(keys), 16):  # a checkpoint prunes many chunks per transaction
        wal.prune(chunks=keys[i:i + 16])
    t2 = time.perf_counter()
    counts = [b.num_rows for b in batches]
    ack = bench_ack(wal, keys, counts, native=True)
    ack_py = bench_ack(wal, keys, counts, native=False)
    wal.close()
    normed = [normalize_batch(b, "t", 0) for b in batches]
    occ = new_occurrences()
    t3 = time.perf_counter()
    for nb in normed:
        with_ids(nb, _SCHEME, occ)
    ids = (time.perf_counter() - t3) / rows * 1e6
    return {"write_us": (t1 - t0) / rows * 1e6, "prune_us": (t2 - t1) / rows * 1e6,
            "total_us": (t2 - t0) / rows * 1e6, "ack_us": ack, "ack_python_us": ack_py, "ids_us": ids,
            "total_with_ack_us": (t2 - t0) / rows * 1e6 + ack}


def bench_ack(wal: Wal, keys: list, counts: list[int], native: bool = True) -> float:
    """µs per record of the sink's in-memory ack tracking, without Kafka.

    ``native``: the native engine's way, a chunk round's counts handed over
    once (``add_reports``). Otherwise the Python engine's: the tracker's
    callback per record, following its signature: ``on_delivery(index, err,
    msg)`` (a ``partial`` bound to each record's index in the produce loop) or
    ``on_delivery(err, msg)`` (one bound method per chunk).
    """
    attempt = AttemptTracker(wal, AttemptKey(0, 0, 0))
    per_index = len(inspect.signature(ChunkTracker.on_delivery).parameters) == 4  # self, index, err, msg
    rows = sum(counts)
    t0 = time.perf_counter()
    for (key, size), n in zip(keys, counts):
        t = ChunkTracker(wal, key, n, size, attempt)
        if native:
            t.round.add_reports(n, n, [])  # what the publisher does with one poll's results for the round
            assert t.acked == n
            continue
        cb = t.round.on_delivery if hasattr(t, "round") else t.on_delivery  # what the produce loop binds
        if per_index:
            cbs = [partial(cb, i) for i in range(n)]  # the produce loop binds the index ...
            for f in cbs:  # ... the poll() that serves delivery reports calls it with (err, msg)
                f(None, None)
        else:
            for _ in range(n):
                cb(None, None)
        assert t.acked == n
    return (time.perf_counter() - t0) / rows * 1e6


def bench_per_record(batches: list[pa.RecordBatch], path: str, sync: bool) -> dict[str, float]:
    env = lmdb.open(path, map_size=8 << 30, sync=sync, metasync=sync, max_dbs=1)
    db = env.open_db(b"records")
    pack = struct.Struct(">QIQ").pack
    rows = sum(b.num_rows for b in batches)
    t0 = time.perf_counter()
    seq = 0
    for b in batches:
        keys = b.column(0).to_pylist()
        vals = b.column(1).to_pylist()
        with env.begin(write=True, db=db) as txn:
            for k, v in zip(keys, vals):
                txn.put(pack(0, 0, seq), struct.pack(">I", len(k)) + k + v)
                seq += 1
    t1 = time.perf_counter()
    seq = 0
    for b in batches:
        with env.begin(write=True, db=db) as txn:
            for _ in range(b.num_rows):
                txn.delete(pack(0, 0, seq))
                seq += 1
    t2 = time.perf_counter()
    env.close()
    return {"write_us": (t1 - t0) / rows * 1e6, "prune_us": (t2 - t1) / rows * 1e6,
            "total_us": (t2 - t0) / rows * 1e6}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--chunk", type=int, default=10_000)
    ap.add_argument("--sizes", default="100,1024")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    results = []
    for size in [int(s) for s in args.sizes.split(",")]:
        batches = _batches(args.rows, args.chunk, size)
        for design, fn in (("chunked", bench_chunked), ("per_record", bench_per_record)):
            for sync in (True, False):
                runs = []
                for _ in range(args.repeat):
                    d = tempfile.mkdtemp(prefix="walbench-", dir=os.environ.get("BENCH_TMP"))
                    try:
                        runs.append(fn(batches, os.path.join(d, "slot"), sync))
                    finally:
                        shutil.rmtree(d)
                best = sorted(runs, key=lambda r: r["total_us"])[len(runs) // 2]
                row = {"design": design, "value_bytes": size, "fsync": sync, "rows": args.rows,
                       "chunk_rows": args.chunk, **{k: round(v, 3) for k, v in best.items()}}
                results.append(row)
                print(json.dumps(row), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
