"""Record ids: what makes two records "the same record", and the ids built from it without per-record Python work.

Every record the sink writes carries its id in a header (``id_header``,
``rks-id``): fixed-length bytes, format 1, big-endian throughout::

    byte 0      0x10 | kind            format 1 in the high nibble
    bytes 1-8   run key                blake2b-64 of "<sink>\\0<run>" (:func:`run_key`)
    bytes 9-12  batch                  uint32
    then, by kind:
      POSITION (1)  scope uint64, position uint64                    29 bytes
      CONTENT  (2)  scope uint32, fingerprint uint64, occurrence u32 29 bytes
      KEY      (3)  key hash: 2 x uint64 (128 bits)                   29 bytes

Bytes 1-12 name the (sink, run, batch) whatever the kind
(:func:`batch_prefix`); :func:`describe` prints an id for people (``rks``
does). A consumer de-duplicates on the bytes.

* **POSITION**: a record named by where it is: its *scope* (a 64-bit hash of
  the name of the input it was read from, e.g. a Kafka range's topic,
  partition and first offset, or, in a run no batch of which is ever run
  again, its Spark partition) and its position there (the how-many-th record
  of the scope it is). For inputs read in the same order every time
  (:mod:`..driver.split`): no hashing, no table, nothing stored per record.
* **CONTENT**: a record named by what it is: a 64-bit hash of its content
  (topic when the input has a topic column, partition column, key, value,
  headers, timestamp when written: :mod:`.fingerprint`) and its
  *occurrence*, how many records of its scope with that fingerprint came
  before it (0 for the first). For inputs whose re-runs bring a scope's
  records in another order (after a shuffle); the scope is the Spark
  partition, the exactly-once lane, or, after the driver's re-split, each
  record's *place* (Spark's 32-bit hash the batch was re-split by).
* **KEY**: a record named by the values of the columns the user names
  (``record_ids="columns"``, ``id_columns``), hashed to 128 bits (two 64-bit
  hashes of independent seeds per column, folded in column order): the same
  values give the same id whatever the split; two different value tuples of
  a batch share an id with probability about ``n**2 / 2**129`` for ``n``
  records (10**9 records: 1.5e-21).

Uniqueness. Two records of one (sink, run, batch) share a POSITION id only
if two of its inputs' names hash to the same 64-bit scope (about
``s**2 / 2**65`` for ``s`` inputs in a batch). CONTENT ids number equal fingerprints
within a scope, so they are distinct too; a 64-bit collision of two
*different* records of one scope (about ``n**2 / 2**65`` per scope of ``n``
records) makes those two records' occurrences depend on their order: if a
re-run of the batch brings them in the other order after only the first
run's copy of one of them reached Kafka, that copy and the other record's new
copy share an id, and a consumer de-duplicating by id drops the latter
(``tests/unit/test_ids.py`` shows it with forced fingerprints). Runs differ
by their 64-bit run key (two (sink, run) pairs share one with probability
``2**-64``).

A chunk in the WAL keeps what its ids need (:func:`with_ids`): the prefix its
ids share and the layout of each row's fields in its schema metadata
(``rks.idp``, ``rks.idl``), the fields per row as columns (``rks_place``,
``rks_fp``, ``rks_occ``, ``rks_k1``, ``rks_k2``; a POSITION chunk has none:
its rows' positions follow from its first one). A replay sends the ids the
task chose. What these mean is part of the WAL's version: change them and
bump :data:`.wal.format.WAL_VERSION`.

The unit digest of an exactly-once unit is an order-independent 64-bit sum
over its records' id fields (:func:`unit_digest`): what a lane's marker proves.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .arrays import binary_scalar, numeric, values
from .fingerprint import fingerprints, mix_pairs, new_occurrences

__all__ = ["ID_FORMAT", "POSITION", "CONTENT", "KEY", "IdScheme", "run_key", "batch_prefix", "batch_prefix_of",
           "valid_run_id", "scheme_for", "with_ids", "record_ids", "record_id_at", "id_fields", "unit_digest",
           "describe", "key_hashes", "new_occurrences", "PLACE_INPUT_COLUMN", "sequence_ids", "chunk_scheme",
           "has_scheme", "digest_terms", "ID_COLUMNS", "MAX_ID_BATCH", "scope_of"]

ID_FORMAT = 1
POSITION, CONTENT, KEY = 1, 2, 3
_KINDS = {POSITION: "position", CONTENT: "content", KEY: "key"}
#: Each row's fields by layout: (column, numpy type, width); "seq" is the row's position, not a column.
_LAYOUTS: dict[str, tuple[tuple[str, Any, int], ...]] = {
    "seq": (("seq", np.uint64, 8),),
    "fp,occ": (("rks_fp", np.uint64, 8), ("rks_occ", np.uint32, 4)),
    "place,fp,occ": (("rks_place", np.uint32, 4), ("rks_fp", np.uint64, 8), ("rks_occ", np.uint32, 4)),
    "k1,k2": (("rks_k1", np.uint64, 8), ("rks_k2", np.uint64, 8)),
}
#: Every column a chunk's ids may have.
ID_COLUMNS = frozenset(n for fields in _LAYOUTS.values() for n, _t, _w in fields if n != "seq")
_LAYOUT_KIND = {"seq": POSITION, "fp,occ": CONTENT, "place,fp,occ": CONTENT, "k1,k2": KEY}
_LENGTH = {POSITION: 29, CONTENT: 29, KEY: 29}
IDP_META = b"rks.idp"  # a chunk's id prefix (its ids' shared bytes)
IDL_META = b"rks.idl"  # a chunk's id layout (one of _LAYOUTS)
PLACE_INPUT_COLUMN = "__rks_place"  # the place as the driver's re-split gives it to the tasks (an int32 column)
_PLACE_MIX = np.uint64(0x9E3779B97F4A7C15)
_RUN_RE = re.compile(r"^[A-Za-z0-9._-]{1,64}$")
MAX_ID_BATCH = (1 << 32) - 1  # the largest batch id a record id holds


def valid_run_id(run: str) -> bool:
    """Whether ``run`` can be a record id's run component (1-64 of ``[A-Za-z0-9._-]``)."""
    return isinstance(run, str) and bool(_RUN_RE.match(run))


def run_key(sink: str, run: str) -> bytes:
    """The 8 bytes that tell one (sink, run) from every other in an id: blake2b-64 of ``<sink>\\0<run>``."""
    return hashlib.blake2b(f"{sink}\0{run}".encode(), digest_size=8).digest()


def _batch(batch: int) -> bytes:
    if not 0 <= batch <= MAX_ID_BATCH:
        raise ValueError(f"a record id holds batch ids 0..{MAX_ID_BATCH}, not {batch}")
    return batch.to_bytes(4, "big")


def scope_of(name: str) -> int:
    """A POSITION scope from an input's name (a Kafka range's, a file split's: :mod:`..driver.lineage`): its
    blake2b-64."""
    return int.from_bytes(hashlib.blake2b(name.encode(), digest_size=8).digest(), "big")


def batch_prefix(sink: str, run: str, batch: int) -> bytes:
    """Bytes 1-12 of every id of one (sink, run, batch), whatever its kind: run key and batch.

    Read-backs group the ids a topic holds by it (:func:`batch_prefix_of`)
    and count them against the batch's report.

    Raises:
        ValueError: a batch id beyond uint32.
    """
    return run_key(sink, run) + _batch(batch)


def batch_prefix_of(record_id: bytes) -> bytes | None:
    """:func:`batch_prefix` of a record id; ``None`` for bytes that are not an id of this format."""
    if len(record_id) < 13 or record_id[0] >> 4 != ID_FORMAT or len(record_id) != _LENGTH.get(record_id[0] & 15):
        return None
    return bytes(record_id[1:13])


@dataclass(frozen=True)
class IdScheme:
    """How one task part names its records: the ids' shared prefix and the layout of each row's fields.

    Picklable, a few bytes; made on the executor by :func:`scheme_for`.
    """

    prefix: bytes
    layout: str

    @property
    def kind(self) -> int:
        return _LAYOUT_KIND[self.layout]


def scheme_for(kind: int, sink: str, run: str, batch: int, scope: int | None = None) -> IdScheme:
    """The scheme of a part: POSITION with a ``scope`` (uint64: an input's name hashed, or a Spark partition),
    CONTENT with one (uint32: a Spark partition or lane) or without (each row's place is its scope), or KEY.

    Raises:
        ValueError: a batch id beyond uint32, a scope beyond uint32, or a kind and scope that do not go together.
    """
    head = bytes([(ID_FORMAT << 4) | kind]) + run_key(sink, run) + _batch(batch)
    if kind == KEY:
        if scope is not None:
            raise ValueError("KEY ids have no scope")
        return IdScheme(head, "k1,k2")
    if scope is None:
        if kind != CONTENT:
            raise ValueError("POSITION ids have a scope")
        return IdScheme(head, "place,fp,occ")
    width = 8 if kind == POSITION else 4
    if not 0 <= scope < 1 << (8 * width):
        raise ValueError(f"a {_KINDS[kind]} id's scope is a uint{8 * width}, not {scope}")
    return IdScheme(head + scope.to_bytes(width, "big"), "seq" if kind == POSITION else "fp,occ")


def key_hashes(columns: pa.RecordBatch) -> tuple[np.ndarray, np.ndarray]:
    """Two ``uint64`` per row: the 128-bit hash of the values of the id columns (``record_ids="columns"``).

    Each column's values are turned into bytes (text for numbers and dates
    as Arrow casts them; timestamps as their instant, microseconds since the
    epoch, so the session's time zone does not change them; bytes and strings
    as they are) and hashed twice, as a value and as a key by
    :func:`.fingerprints` (XXH64 of seeds 4 and 3; a null apart from every
    value); each half folds its column hashes in column order. A function of
    the values only, the same on every executor.
    """
    k1 = np.zeros(columns.num_rows, dtype=np.uint64)
    k2 = np.zeros(columns.num_rows, dtype=np.uint64)
    mix = np.uint64(0x9E3779B97F4A7C15)
    with np.errstate(over="ignore"):
        for col in columns.columns:
            if pa.types.is_timestamp(col.type):  # the instant, not its text in the batch's time zone
                col = pc.cast(pc.cast(col, pa.timestamp("us", tz="UTC")), pa.int64())
            raw = col if pa.types.is_binary(col.type) else pc.cast(pc.cast(col, pa.string()), pa.binary())
            k1 = (k1 * mix) ^ fingerprints(pa.RecordBatch.from_arrays([raw], names=["value"]))
            k2 = (k2 * mix) ^ fingerprints(pa.RecordBatch.from_arrays([raw, raw], names=["value", "key"]))
    return k1, k2


def with_ids(batch: pa.RecordBatch, scheme: IdScheme, occurrences: Any = None, places: np.ndarray | None = None,
             keys: tuple[np.ndarray, np.ndarray] | None = None) -> pa.RecordBatch:
    """A normalised batch with what its ids need: their prefix and layout in its metadata, each row's fields as
    columns (none for POSITION: a row's position follows from the chunk's first).

    CONTENT: ``occurrences`` is the scope's counter (:func:`new_occurrences`),
    fed with every batch of the scope in arrival order; ``places`` each row's
    place when the scheme has no scope (occurrences then count equal (place,
    fingerprint) pairs). KEY: ``keys`` from :func:`key_hashes`.

    Raises:
        ValueError: what the scheme needs was not given.
        OSError: the occurrence table's file cannot grow (:func:`.fingerprint.new_occurrences`).
    """
    meta = dict(batch.schema.metadata or {})
    meta[IDP_META], meta[IDL_META] = scheme.prefix, scheme.layout.encode()
    batch = batch.replace_schema_metadata(meta)
    if scheme.layout == "seq":
        return batch
    if scheme.layout == "k1,k2":
        if keys is None:
            raise ValueError("KEY ids need the rows' key hashes")
        return _append(batch, "k1,k2", keys)
    if occurrences is None or (scheme.layout == "place,fp,occ") != (places is not None):
        raise ValueError(f"CONTENT ids of layout {scheme.layout} need an occurrence counter"
                         f"{' and places' if scheme.layout == 'place,fp,occ' else ''}")
    fps = fingerprints(batch)
    if places is None:
        return _append(batch, "fp,occ", (fps, occurrences.number(fps)))
    places = np.asarray(places).astype(np.uint32)
    with np.errstate(over="ignore"):
        occs = occurrences.number(fps ^ (places.astype(np.uint64) * _PLACE_MIX))
    return _append(batch, "place,fp,occ", (places, fps, occs))


def _append(batch: pa.RecordBatch, layout: str, cols: tuple[np.ndarray, ...]) -> pa.RecordBatch:
    for (name, typ, _w), a in zip(_LAYOUTS[layout], cols):
        arrow = pa.uint64() if typ is np.uint64 else pa.uint32()
        batch = batch.append_column(pa.field(name, arrow, nullable=False), numeric(a, arrow))
    return batch


def has_scheme(chunk: pa.RecordBatch) -> bool:
    """Whether a batch names its ids by a scheme (every WAL chunk does; a lane's marker and sweep records do not:
    :func:`sequence_ids`)."""
    return IDP_META in (chunk.schema.metadata or {})


def chunk_scheme(chunk: pa.RecordBatch) -> IdScheme:
    """The scheme a chunk's metadata names.

    Raises:
        ValueError: the chunk has no id scheme, or one this format does not know, or lacks its columns.
    """
    meta = chunk.schema.metadata or {}
    prefix, layout = meta.get(IDP_META), meta.get(IDL_META, b"").decode(errors="replace")
    if prefix is None or layout not in _LAYOUTS:
        raise ValueError(f"a chunk without a known id scheme (prefix {'set' if prefix else 'missing'}, layout "
                         f"{layout!r}): every chunk the WAL holds has one")
    head = prefix[0] if prefix else 0
    if head >> 4 != ID_FORMAT or (head & 15) != _LAYOUT_KIND[layout]:
        raise ValueError(f"a chunk whose id prefix is of format {head >> 4}, kind {head & 15}, not of layout {layout}")
    missing = [n for n, _t, _w in _LAYOUTS[layout] if n != "seq" and chunk.schema.get_field_index(n) < 0]
    if missing:
        raise ValueError(f"a chunk of id layout {layout} without its columns {missing}")
    return IdScheme(bytes(prefix), layout)


def id_fields(chunk: pa.RecordBatch, first_seq: int) -> tuple[bytes, tuple[tuple[np.ndarray, int], ...], int | None]:
    """``(prefix, ((column values, width), ...), first position or None)``: what the native engine builds a chunk's
    ids from (:meth:`..native.producer.NativeProducer.produce_chunk`).

    Raises:
        ValueError: as :func:`chunk_scheme`.
    """
    scheme = chunk_scheme(chunk)
    if scheme.layout == "seq":
        return scheme.prefix, (), first_seq
    return scheme.prefix, tuple((values(chunk.column(n)), w) for n, _t, w in _LAYOUTS[scheme.layout]), None


def record_ids(chunk: pa.RecordBatch, first_seq: int) -> pa.Array:
    """The ids of a chunk's records, as one binary array built in numpy (no per-record Python work).

    Raises:
        ValueError: as :func:`chunk_scheme`.
    """
    scheme = chunk_scheme(chunk)
    n = chunk.num_rows
    width = _LENGTH[scheme.kind]
    out = np.empty((n, width), dtype=np.uint8)
    out[:, :len(scheme.prefix)] = np.frombuffer(scheme.prefix, dtype=np.uint8)
    at = len(scheme.prefix)
    for name, typ, w in _LAYOUTS[scheme.layout]:
        col = (np.arange(first_seq, first_seq + n, dtype=np.uint64) if name == "seq"
               else values(chunk.column(name)).astype(typ, copy=False))
        out[:, at:at + w] = col.astype(">u8" if w == 8 else ">u4").view(np.uint8).reshape(n, w)
        at += w
    fixed = pa.Array.from_buffers(pa.binary(width), n, [None, pa.py_buffer(out.tobytes())])
    return fixed.cast(pa.binary())


def record_id_at(chunk: pa.RecordBatch, first_seq: int, i: int) -> bytes:
    """The id of record ``i`` of a chunk (slow path: dead letters, tools).

    Raises:
        ValueError: as :func:`chunk_scheme`.
    """
    return record_ids(chunk.slice(i, 1), first_seq + i)[0].as_py()


def sequence_ids(prefix: bytes, first_seq: int, n: int) -> pa.Array:
    """``<prefix><seq>`` (decimal) for ``n`` records from ``first_seq``: the ids of records the sink makes itself (a
    lane's marker and sweep records), which have no content to name them by. Never a WAL chunk's."""
    seqs = pc.cast(pc.cast(numeric(np.arange(first_seq, first_seq + n), pa.int64()), pa.string()), pa.binary())
    return pc.binary_join_element_wise(binary_scalar(prefix), seqs, binary_scalar(b""))


def unit_digest(chunk: pa.RecordBatch, first_seq: int, seed: int = 0) -> int:
    """``seed`` plus the order-independent digest of a chunk's id fields, mod 2**64.

    The terms: ``mix(fingerprint, occurrence)`` for CONTENT (the place, when
    there is one, folded into the fingerprint as occurrences count it),
    ``mix(position ^ scope * P1, 0)`` for POSITION (two inputs of as many
    records have other digests), ``mix(k1 ^ k2 * P1, 0)`` for KEY.
    Accumulated chunk by chunk, it gives the digest of a whole unit.

    Raises:
        ValueError: as :func:`chunk_scheme`.
    """
    a, b = digest_terms(chunk, first_seq)
    return mix_pairs(a, b, seed)


def digest_terms(chunk: pa.RecordBatch, first_seq: int) -> tuple[np.ndarray, np.ndarray]:
    """The two arrays :func:`unit_digest` mixes per row (exactly-once parts bucket records by them).

    Raises:
        ValueError: as :func:`chunk_scheme`.
    """
    scheme = chunk_scheme(chunk)
    n = chunk.num_rows
    if scheme.layout == "seq":  # the scope folded in: a unit's digest names its input, not only its row count
        scope = np.uint64(int.from_bytes(scheme.prefix[13:21], "big"))
        with np.errstate(over="ignore"):
            return (np.arange(first_seq, first_seq + n, dtype=np.uint64) ^ (scope * _PLACE_MIX),
                    np.zeros(n, dtype=np.uint32))
    if scheme.layout == "k1,k2":
        with np.errstate(over="ignore"):
            return (values(chunk.column("rks_k1")) ^ (values(chunk.column("rks_k2")) * _PLACE_MIX),
                    np.zeros(n, dtype=np.uint32))
    fps = values(chunk.column("rks_fp"))
    if scheme.layout == "place,fp,occ":
        with np.errstate(over="ignore"):
            fps = fps ^ (values(chunk.column("rks_place")).astype(np.uint64) * _PLACE_MIX)
    return fps, values(chunk.column("rks_occ"))


def describe(record_id: bytes) -> str:
    """An id as people read it: ``content run=<16 hex> batch=7 scope=3 fp=<16 hex> occ=0`` (``rks`` prints it);
    bytes that are not an id of this format are shown as they are."""
    kind = record_id[0] & 15 if record_id else 0
    if batch_prefix_of(record_id) is None:
        return record_id.decode(errors="backslashreplace")
    run, batch = record_id[1:9].hex(), int.from_bytes(record_id[9:13], "big")
    rest = record_id[13:]
    if kind == POSITION:
        tail = f"scope={rest[:8].hex()} position={int.from_bytes(rest[8:], 'big')}"
    elif kind == CONTENT:
        tail = (f"scope={int.from_bytes(rest[:4], 'big')} fp={rest[4:12].hex()} "
                f"occ={int.from_bytes(rest[12:], 'big')}")
    else:
        tail = f"key={rest.hex()}"
    return f"{_KINDS[kind]} run={run} batch={batch} {tail}"
