"""Record ids: what makes two records "the same record", and the ids built from it without per-record Python work.

A record's id is ``sink:run:batch:partition:<fingerprint>-<occurrence>``:

* ``fingerprint``: 16 hex digits of a 64-bit hash of the record's content:
  its topic (when the input has a topic column), partition column, key,
  value, headers and timestamp (:mod:`.fingerprint`);
* ``occurrence``: among the records of the same Spark partition of the same
  batch with that fingerprint, how many arrived before it (0 for the first).

So two records are *the same record* when they belong to the same sink, run,
batch and Spark partition and have equal content; ``n`` equal records of a
partition get occurrences ``0..n-1``, whatever order the partition's rows
arrive in (Spark does not keep row order across a shuffle). Ids are unique
across runs (the run component) and for different rows (up to a 64-bit hash
collision, which only makes the two colliding rows' occurrences depend on
their order). Fingerprints and occurrences are stored with each WAL chunk
(columns ``rks_fp``, ``rks_occ``), so a replay sends the ids the task chose.
Chunks written before fingerprints existed have neither column: their ids
are ``sink:run:batch:partition:<seq>`` (the row's position), as they were.

The unit digest of an exactly-once unit is an order-independent 64-bit sum
over its records' (fingerprint, occurrence) pairs: what a lane's marker proves.
"""

from __future__ import annotations

import re

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .fingerprint import fingerprints, mix_pairs, new_occurrences

__all__ = ["FP_COLUMN", "OCC_COLUMN", "valid_run_id", "record_id_prefix", "with_ids", "record_ids", "record_id_at",
           "unit_digest", "new_occurrences", "has_ids"]

FP_COLUMN = "rks_fp"
OCC_COLUMN = "rks_occ"
_RUN_RE = re.compile(r"^[A-Za-z0-9._-]{1,64}$")
_HEX = np.frombuffer(b"".join(b"%02x" % i for i in range(256)), dtype=np.uint8).reshape(256, 2)
_DASH = pa.scalar(b"-", pa.binary())
_EMPTY = pa.scalar(b"", pa.binary())


def valid_run_id(run: str) -> bool:
    """Whether ``run`` can be a record id's run component (1-64 of ``[A-Za-z0-9._-]``, no ``:``)."""
    return isinstance(run, str) and bool(_RUN_RE.match(run))


def record_id_prefix(sink: str, batch: int, partition: int, run: str = "") -> bytes:
    """The part of a record id shared by one (run, batch, partition): ``sink:run:batch:partition:``.

    An empty ``run`` gives the run-less form ``sink:batch:partition:`` of
    chunks written before ids had a run (so their replays keep their ids).
    """
    return (f"{sink}:{run}:{batch}:{partition}:" if run else f"{sink}:{batch}:{partition}:").encode()


def with_ids(batch: pa.RecordBatch, occurrences: object) -> pa.RecordBatch:
    """A normalised batch with its records' fingerprints and occurrences appended (``rks_fp``, ``rks_occ``).

    ``occurrences`` is the task's counter (:func:`new_occurrences`), fed with
    every batch of the partition in arrival order.
    """
    fps = fingerprints(batch)
    occs = occurrences.number(fps)  # type: ignore[attr-defined]
    batch = batch.append_column(pa.field(FP_COLUMN, pa.uint64(), nullable=False), pa.array(fps, pa.uint64()))
    return batch.append_column(pa.field(OCC_COLUMN, pa.uint32(), nullable=False), pa.array(occs, pa.uint32()))


def has_ids(batch: pa.RecordBatch) -> bool:
    return batch.schema.get_field_index(FP_COLUMN) >= 0


def _hex16(fps: np.ndarray) -> pa.Array:
    digits = _HEX[fps.astype(">u8").view(np.uint8).reshape(-1, 8)].reshape(-1)
    fixed = pa.Array.from_buffers(pa.binary(16), len(fps), [None, pa.py_buffer(digits.tobytes())])
    return fixed.cast(pa.binary())


def record_ids(prefix: bytes, batch: pa.RecordBatch, first_seq: int) -> pa.Array:
    """The ids of a chunk's records, as one binary array built by Arrow kernels (no per-record Python work)."""
    n = batch.num_rows
    p = pa.scalar(prefix, pa.binary())
    if has_ids(batch):
        fps = batch.column(FP_COLUMN).to_numpy()
        occ = pc.cast(pc.cast(batch.column(OCC_COLUMN), pa.string()), pa.binary())
        return pc.binary_join_element_wise(p, _hex16(fps), _DASH, occ, _EMPTY)
    seqs = pc.cast(pc.cast(pa.array(np.arange(first_seq, first_seq + n, dtype=np.int64)), pa.string()), pa.binary())
    return pc.binary_join_element_wise(p, seqs, _EMPTY)


def record_id_at(prefix: bytes, batch: pa.RecordBatch, first_seq: int, i: int) -> str:
    """The id of record ``i`` of a chunk (slow path: dead letters, tools)."""
    if has_ids(batch):
        fp = int(batch.column(FP_COLUMN)[i].as_py())
        return f"{prefix.decode()}{fp:016x}-{batch.column(OCC_COLUMN)[i].as_py()}"
    return f"{prefix.decode()}{first_seq + i}"


def unit_digest(batch: pa.RecordBatch, first_seq: int, seed: int = 0) -> int:
    """``seed`` plus the order-independent digest of a chunk's (fingerprint, occurrence) pairs, mod 2**64.

    Accumulated chunk by chunk, it gives the digest of a whole unit. A chunk
    without fingerprints (an older build) counts by row positions instead.
    """
    if has_ids(batch):
        fps = batch.column(FP_COLUMN).to_numpy()
        occs = batch.column(OCC_COLUMN).to_numpy()
    else:
        fps = np.zeros(batch.num_rows, dtype=np.uint64)
        occs = np.arange(first_seq, first_seq + batch.num_rows, dtype=np.uint32)
    return mix_pairs(fps, occs, seed)
