"""Record ids: what makes two records "the same record", and the ids built from it without per-record Python work.

A record's id is ``sink:run:batch:[<place>]<fingerprint>-<occurrence>`` (its
*batch scope*) or ``sink:run:batch:partition:<fingerprint>-<occurrence>`` (its
*partition scope*, with the Spark partition the task wrote it from):

* ``place`` (``record_ids="content"`` only): 8 hex digits of the 32-bit
  Spark hash the driver re-split the batch by (:mod:`..driver.placement`);
  records of different places may be in different tasks, records of one
  place are always in one task, so with it two records of a batch never
  share an id, 64-bit collisions of their fingerprints included;
* ``fingerprint``: 16 hex digits of a 64-bit hash of the record's content:
  its topic (when the input has a topic column), partition column, key,
  value, headers and timestamp (:mod:`.fingerprint`); or, with
  ``record_ids="columns"``, of the values of the columns the user named
  (:func:`id_fingerprints`);
* ``occurrence``: among the records of the same task's scope with that
  fingerprint, how many arrived before it (0 for the first).

Which scope a sink's ids have is its ``record_ids`` (:class:`.SinkConfig`):

* ``"content"`` (at-least-once's default): the driver re-splits the batch by
  each record's place (:mod:`..driver.placement`), so all
  copies of a record are in one task; ids are in the batch scope, the same
  in every run of the batch whatever split and order it has (Spark's Kafka
  source re-running a batch from its offset log included), and two records
  of a batch never share one (the place tells tasks apart, occurrences the
  records of a task). Costs a shuffle of the batch;
* ``"partition"``: no re-split; ids name the Spark partition, so they hold
  across re-runs only for sources that bring the same rows to the same
  partition index (files; not Spark's Kafka source);
* ``"columns"``: ids from the columns named in ``id_columns`` (for example
  the Kafka source's ``topic``, ``partition`` and ``offset``), batch scope, no
  re-split; unique as long as those values are unique in the batch (and up
  to a 64-bit collision of two rows' fingerprints of them).

Exactly-once's units are lanes (:mod:`..driver.resplit`): its ids are in
the partition scope with the lane as partition, which a re-run keeps.

So two records are *the same record* when they belong to the same sink, run,
batch (and partition, in that scope) and have equal content; ``n`` equal
records get occurrences ``0..n-1``, whatever order they arrive in. Ids are
unique across runs (the run component) and for different rows: within a task
by occurrences (a 64-bit collision of two different rows' fingerprints only
makes their occurrences depend on their order), across tasks by the place or
the partition. Fingerprints, occurrences and places are stored with each WAL
chunk (columns ``rks_fp``, ``rks_occ``, ``rks_place``; the run and the scope
in its metadata, ``rks.run`` and ``rks.ids``), so a replay sends the ids the
task chose. What these columns and this form mean is part of the WAL's
version: change them and bump :data:`.wal.format.WAL_VERSION`.

Records the sink makes itself (a lane's marker and sweep records) have no
content: their ids are ``<prefix><seq>`` (:func:`sequence_ids`).

The unit digest of an exactly-once unit is an order-independent 64-bit sum
over its records' (fingerprint, occurrence) pairs: what a lane's marker proves.
"""

from __future__ import annotations

import re

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .arrays import binary_scalar, numeric, values
from .fingerprint import fingerprints, mix_pairs, new_occurrences
from .schema import BATCH_SCOPE, chunk_run, chunk_scope

__all__ = ["batch_prefix", "batch_prefix_of", "FP_COLUMN", "OCC_COLUMN", "PLACE_COLUMN", "PLACE_INPUT_COLUMN", "has_place", "valid_run_id",
           "record_id_prefix", "chunk_id_prefix", "with_ids", "record_ids", "sequence_ids", "record_id_at",
           "unit_digest", "new_occurrences", "has_ids", "id_fingerprints"]

FP_COLUMN = "rks_fp"
OCC_COLUMN = "rks_occ"
PLACE_COLUMN = "rks_place"
PLACE_INPUT_COLUMN = "__rks_place"  # the place as the driver's re-split gives it to the tasks (an int32 column)
_PLACE_MIX = np.uint64(0x9E3779B97F4A7C15)
_RUN_RE = re.compile(r"^[A-Za-z0-9._-]{1,64}$")
_HEX = np.frombuffer(b"".join(b"%02x" % i for i in range(256)), dtype=np.uint8).reshape(256, 2)
_DASH = binary_scalar(b"-")
_EMPTY = binary_scalar(b"")


def valid_run_id(run: str) -> bool:
    """Whether ``run`` can be a record id's run component (1-64 of ``[A-Za-z0-9._-]``, no ``:``)."""
    return isinstance(run, str) and bool(_RUN_RE.match(run))


def record_id_prefix(sink: str, batch: int, partition: int, run: str = "", scope: str = "") -> bytes:
    """The part of a record id shared by one (run, batch, partition): ``sink:run:batch:partition:``.

    In the batch scope (``scope="batch"``) it is ``sink:run:batch:``, the same
    for every partition. The sink always has a run; tools and tests that give
    none get an empty component (``sink::batch:partition:``).
    """
    if scope == BATCH_SCOPE:
        return f"{sink}:{run}:{batch}:".encode()
    return f"{sink}:{run}:{batch}:{partition}:".encode()


def batch_prefix(sink: str, run: str, batch: int) -> bytes:
    """What every id of one (sink, run, batch) starts with, whatever its scope: ``sink:run:batch:``.

    Read-backs group the ids a topic holds by it and count them against the
    batch's report (:func:`batch_prefix_of` gives it of an id).
    """
    return f"{sink}:{run}:{batch}:".encode()


def batch_prefix_of(record_id: bytes) -> bytes | None:
    """:func:`batch_prefix` of a record id; ``None`` for bytes that are not an id of this format."""
    parts = record_id.split(b":", 3)
    if len(parts) != 4 or not parts[0] or not parts[1] or not parts[2].isdigit() or not parts[3]:
        return None
    return b":".join(parts[:3]) + b":"


def chunk_id_prefix(sink: str, batch_id: int, partition: int, chunk: pa.RecordBatch) -> bytes:
    """The id prefix of a chunk read back from the WAL: its run and scope come from its own metadata."""
    return record_id_prefix(sink, batch_id, partition, chunk_run(chunk), chunk_scope(chunk))


def id_fingerprints(columns: pa.RecordBatch) -> np.ndarray:
    """One ``uint64`` per row: the fingerprint of the values of the id columns (``record_ids="columns"``).

    Each column's values are turned into bytes (text for numbers and dates
    as Arrow casts them; timestamps as their instant, microseconds since the
    epoch, so the session's time zone does not change them; bytes and strings
    as they are), hashed as
    a value by :func:`.fingerprints` (a null apart from every value), and the
    columns' hashes folded in their order: a function of the values only, the
    same on every executor.
    """
    acc = np.zeros(columns.num_rows, dtype=np.uint64)
    with np.errstate(over="ignore"):
        for col in columns.columns:
            if pa.types.is_timestamp(col.type):  # the instant, not its text in the batch's time zone
                col = pc.cast(pc.cast(col, pa.timestamp("us", tz="UTC")), pa.int64())
            raw = col if pa.types.is_binary(col.type) else pc.cast(pc.cast(col, pa.string()), pa.binary())
            h = fingerprints(pa.RecordBatch.from_arrays([raw], names=["value"]))
            acc = (acc * np.uint64(0x9E3779B97F4A7C15)) ^ h
    return acc


def with_ids(batch: pa.RecordBatch, occurrences: object, fps: np.ndarray | None = None,
             places: np.ndarray | None = None) -> pa.RecordBatch:
    """A normalised batch with its records' fingerprints and occurrences appended (``rks_fp``, ``rks_occ``).

    ``occurrences`` is the task's counter (:func:`new_occurrences`), fed with
    every batch of the scope in arrival order. ``fps``: the fingerprints
    when they are not the records' content (:func:`id_fingerprints`).
    ``places``: each record's place (``record_ids="content"``, a 32-bit
    Spark hash), appended as ``rks_place``; occurrences then count equal
    (place, fingerprint) pairs.
    """
    fps = fingerprints(batch) if fps is None else fps
    if places is None:
        occs = occurrences.number(fps)  # type: ignore[attr-defined]
    else:
        places = np.asarray(places).astype(np.uint32)
        with np.errstate(over="ignore"):
            occs = occurrences.number(fps ^ (places.astype(np.uint64) * _PLACE_MIX))  # type: ignore[attr-defined]
    batch = batch.append_column(pa.field(FP_COLUMN, pa.uint64(), nullable=False), numeric(fps, pa.uint64()))
    batch = batch.append_column(pa.field(OCC_COLUMN, pa.uint32(), nullable=False), numeric(occs, pa.uint32()))
    if places is None:
        return batch
    return batch.append_column(pa.field(PLACE_COLUMN, pa.uint32(), nullable=False), numeric(places, pa.uint32()))


def has_place(batch: pa.RecordBatch) -> bool:
    """Whether a chunk's ids carry their place (``record_ids="content"``)."""
    return batch.schema.get_field_index(PLACE_COLUMN) >= 0


def has_ids(batch: pa.RecordBatch) -> bool:
    """Whether a batch's records carry their content ids (every WAL chunk's do; a lane's marker records do not)."""
    return batch.schema.get_field_index(FP_COLUMN) >= 0


def _hex16(fps: np.ndarray) -> pa.Array:
    return _hexn(fps, 8)


def _hexn(values: np.ndarray, nbytes: int) -> pa.Array:
    """The low ``nbytes`` bytes of each uint64, as ``2 * nbytes`` lower-case hex digits."""
    raw = values.astype(">u8").view(np.uint8).reshape(-1, 8)[:, 8 - nbytes:]
    digits = _HEX[raw].reshape(-1)
    fixed = pa.Array.from_buffers(pa.binary(2 * nbytes), len(values), [None, pa.py_buffer(digits.tobytes())])
    return fixed.cast(pa.binary())


def _check_ids(batch: pa.RecordBatch) -> None:
    if not has_ids(batch):
        raise ValueError(f"a batch without record fingerprints ({FP_COLUMN}, {OCC_COLUMN}) has no content ids; "
                         "every chunk the WAL holds has them")


def record_ids(prefix: bytes, batch: pa.RecordBatch) -> pa.Array:
    """The ids of a chunk's records, as one binary array built by Arrow kernels (no per-record Python work).

    Raises:
        ValueError: the batch has no fingerprints and occurrences (:func:`with_ids`).
    """
    _check_ids(batch)
    p = binary_scalar(prefix)
    fps = values(batch.column(FP_COLUMN))
    occ = pc.cast(pc.cast(batch.column(OCC_COLUMN), pa.string()), pa.binary())
    if has_place(batch):
        place = _hexn(values(batch.column(PLACE_COLUMN)).astype(np.uint64), 4)
        return pc.binary_join_element_wise(p, place, _hex16(fps), _DASH, occ, _EMPTY)
    return pc.binary_join_element_wise(p, _hex16(fps), _DASH, occ, _EMPTY)


def sequence_ids(prefix: bytes, first_seq: int, n: int) -> pa.Array:
    """``<prefix><seq>`` for ``n`` records from ``first_seq``: the ids of records the sink makes itself (a lane's
    marker and sweep records), which have no content to name them by. Never a WAL chunk's."""
    seqs = pc.cast(pc.cast(numeric(np.arange(first_seq, first_seq + n), pa.int64()), pa.string()), pa.binary())
    return pc.binary_join_element_wise(binary_scalar(prefix), seqs, _EMPTY)


def record_id_at(prefix: bytes, batch: pa.RecordBatch, i: int) -> str:
    """The id of record ``i`` of a chunk (slow path: dead letters, tools).

    Raises:
        ValueError: the batch has no fingerprints and occurrences.
    """
    _check_ids(batch)
    fp = int(batch.column(FP_COLUMN)[i].as_py())
    place = f"{batch.column(PLACE_COLUMN)[i].as_py():08x}" if has_place(batch) else ""
    return f"{prefix.decode()}{place}{fp:016x}-{batch.column(OCC_COLUMN)[i].as_py()}"


def unit_digest(batch: pa.RecordBatch, seed: int = 0) -> int:
    """``seed`` plus the order-independent digest of a chunk's (fingerprint, occurrence) pairs, mod 2**64.

    Accumulated chunk by chunk, it gives the digest of a whole unit.

    Raises:
        ValueError: the batch has no fingerprints and occurrences.
    """
    _check_ids(batch)
    return mix_pairs(values(batch.column(FP_COLUMN)), values(batch.column(OCC_COLUMN)), seed)
