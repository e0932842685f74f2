"""Byte formats of the write-ahead log and of record ids.

Everything the WAL stores is plain, versioned bytes; nothing is ever
unpickled, so a WAL file cannot run code.

Keys (big-endian, so LMDB's byte order is write order):

* chunk:       ``batch u64 | partition u32 | first_seq u64 | gen u32``
* attempt:     ``batch u64 | partition u32 | gen u32``
* dead letter: ``batch u64 | partition u32 | seq u64 | gen u32``

``gen`` is a counter local to the WAL slot that tells apart two attempts at
the same (batch, partition) that met in one slot. It is never part of a
record's id: ids are ``sink:batch:partition:seq`` and depend only on the data.

Chunk value (chunk format 1, unchanged in slot format 2)::

    b"RKSC" | u16 format | u16 flags | u32 rows | u32 crc32(ipc) | Arrow IPC stream

Attempt value (format 2; format 1 had no trailing checksum)::

    b"RKSA" | u16 format | u8 state | u32 spark attempt | u64 rows | f64 started | u32 crc32(all before)

Dead-letter value (format 2; in format 1 the last header field was 0)::

    b"RKSD" | u16 format | u8 flags | i32 code | i64 ts | i32 partition | u32 n headers | u32 crc
    | (i32 length | bytes){5 + 2 * n headers}        (length -1: null)

    crc = crc32(header without crc, then the body).

A slot's format (meta ``format``) is 2 since attempt and dead-letter records
carry a checksum; slots of format 1 are read (their unchecksummed records are
parsed strictly) and every record written into them is of format 2. Any
record that does not decode raises :class:`WalFormatError`, never a
``struct.error``, ``UnicodeDecodeError`` or ``ValueError``.

The Arrow stream holds one record batch with the columns ``value`` (binary),
and when the input had them ``key`` (binary), ``topic`` (string),
``partition`` (int32), ``headers`` (list<struct<key: string, value: binary>>)
and ``timestamp`` (int64 milliseconds). The default topic travels in the
schema metadata under ``rks.topic``.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass
from typing import Any, Iterator

import pyarrow as pa

from .errors import WalFormatError

__all__ = [
    "FORMAT_VERSION",
    "READABLE_FORMATS",
    "CHUNK_VERSION",
    "ChunkKey",
    "AttemptKey",
    "AttemptState",
    "DeadLetter",
    "encode_chunk",
    "decode_chunk",
    "chunk_rows",
    "check_chunk",
    "encode_attempt",
    "decode_attempt",
    "encode_dead_letter",
    "decode_dead_letter",
    "record_id",
    "record_id_prefix",
]

FORMAT_VERSION = 2  # the slot format (meta) and the attempt and dead-letter record format
READABLE_FORMATS = (1, 2)
CHUNK_VERSION = 1  # chunks were checksummed from the start: their format did not change

_CHUNK_KEY = struct.Struct(">QIQI")
_ATTEMPT_KEY = struct.Struct(">QII")
_CHUNK_HEAD = struct.Struct(">4sHHII")
_CHUNK_MAGIC = b"RKSC"
_ATTEMPT_VAL1 = struct.Struct(">4sHBIQd")
_ATTEMPT_VAL = struct.Struct(">4sHBIQdI")
_ATTEMPT_MAGIC = b"RKSA"
_DEAD_HEAD = struct.Struct(">4sHBiqiII")
_DEAD_MAGIC = b"RKSD"
_LEN = struct.Struct(">i")
_CRC = struct.Struct(">I")
TOPIC_META = b"rks.topic"

OPEN = 1
COMMITTED = 2


@dataclass(frozen=True, order=True)
class ChunkKey:
    """Where a chunk of records sits: (batch, partition, first sequence, slot generation)."""

    batch: int
    partition: int
    first_seq: int
    gen: int

    def pack(self) -> bytes:
        return _CHUNK_KEY.pack(self.batch, self.partition, self.first_seq, self.gen)

    @classmethod
    def unpack(cls, raw: bytes) -> "ChunkKey":
        if len(raw) != _CHUNK_KEY.size:
            raise WalFormatError(f"chunk key of {len(raw)} bytes, expected {_CHUNK_KEY.size}")
        return cls(*_CHUNK_KEY.unpack(raw))

    @property
    def attempt(self) -> "AttemptKey":
        return AttemptKey(self.batch, self.partition, self.gen)


@dataclass(frozen=True, order=True)
class AttemptKey:
    """One task attempt's records in one slot: (batch, partition, slot generation)."""

    batch: int
    partition: int
    gen: int

    def pack(self) -> bytes:
        return _ATTEMPT_KEY.pack(self.batch, self.partition, self.gen)

    @classmethod
    def unpack(cls, raw: bytes) -> "AttemptKey":
        if len(raw) != _ATTEMPT_KEY.size:
            raise WalFormatError(f"attempt key of {len(raw)} bytes, expected {_ATTEMPT_KEY.size}")
        return cls(*_ATTEMPT_KEY.unpack(raw))


@dataclass(frozen=True)
class AttemptState:
    """What the WAL knows of a task attempt: open or committed, and its size."""

    state: int
    spark_attempt: int
    rows: int
    started_at: float

    @property
    def committed(self) -> bool:
        return self.state == COMMITTED


def encode_attempt(a: AttemptState) -> bytes:
    body = _ATTEMPT_VAL1.pack(_ATTEMPT_MAGIC, FORMAT_VERSION, a.state, a.spark_attempt, a.rows, a.started_at)
    return body + _CRC.pack(zlib.crc32(body))


def decode_attempt(raw: bytes | memoryview) -> AttemptState:
    """Parse an attempt record (format 2 with its checksum, or format 1).

    Raises:
        WalFormatError: wrong size, magic, version, state or checksum.
    """
    raw = bytes(raw)
    if len(raw) == _ATTEMPT_VAL.size:
        magic, version, state, attempt, rows, started, crc = _ATTEMPT_VAL.unpack(raw)
        if version == FORMAT_VERSION and zlib.crc32(raw[:-_CRC.size]) != crc:
            raise WalFormatError("attempt record checksum mismatch: the WAL bytes are corrupt")
        want = FORMAT_VERSION
    elif len(raw) == _ATTEMPT_VAL1.size:
        magic, version, state, attempt, rows, started = _ATTEMPT_VAL1.unpack(raw)
        want = 1
    else:
        raise WalFormatError(f"attempt record of {len(raw)} bytes, expected {_ATTEMPT_VAL.size}")
    if magic != _ATTEMPT_MAGIC or version != want or state not in (OPEN, COMMITTED):
        raise WalFormatError(f"attempt record with magic {magic!r} version {version} state {state}")
    if attempt < 0 or rows < 0 or started != started:  # NaN: never written by this sink
        raise WalFormatError(f"attempt record with spark attempt {attempt} rows {rows} started {started}")
    return AttemptState(state, attempt, rows, started)


# -- chunks -------------------------------------------------------------------


def encode_chunk(batch: pa.RecordBatch) -> bytearray:
    """Serialise one normalised record batch as a chunk value (one copy of the IPC bytes)."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.schema) as writer:
        writer.write_batch(batch)
    ipc = sink.getvalue()
    out = bytearray(_CHUNK_HEAD.size)
    out += memoryview(ipc)
    _CHUNK_HEAD.pack_into(out, 0, _CHUNK_MAGIC, CHUNK_VERSION, 0, batch.num_rows, zlib.crc32(ipc))
    return out


def chunk_rows(raw: bytes | memoryview) -> int:
    """Number of records in a chunk, read from its header only."""
    magic, version, _flags, rows, _crc = _check_chunk_head(raw)
    return rows


def _check_chunk_head(raw: bytes | memoryview) -> tuple[bytes, int, int, int, int]:
    if len(raw) < _CHUNK_HEAD.size:
        raise WalFormatError(f"chunk of {len(raw)} bytes is shorter than its header")
    head = _CHUNK_HEAD.unpack_from(raw, 0)
    if head[0] != _CHUNK_MAGIC:
        raise WalFormatError(f"chunk has magic {bytes(head[0])!r}, expected {_CHUNK_MAGIC!r}")
    if head[1] != CHUNK_VERSION:
        raise WalFormatError(f"chunk of format version {head[1]}; this build reads version {CHUNK_VERSION}")
    return head


def check_chunk(raw: bytes | memoryview) -> int:
    """Validate a chunk's header and checksum without decoding it; returns its row count.

    Raises:
        WalFormatError: unknown version, bad magic or checksum.
    """
    _magic, _version, _flags, rows, crc = _check_chunk_head(raw)
    if zlib.crc32(memoryview(raw)[_CHUNK_HEAD.size:]) != crc:
        raise WalFormatError("chunk checksum mismatch: the WAL bytes are corrupt")
    return rows


def decode_chunk(raw: bytes | memoryview) -> pa.RecordBatch:
    """Parse a chunk value back into its record batch.

    Raises:
        WalFormatError: unknown version, bad checksum or unreadable Arrow data.
    """
    _magic, _version, _flags, rows, crc = _check_chunk_head(raw)
    body = memoryview(raw)[_CHUNK_HEAD.size:]
    if zlib.crc32(body) != crc:
        raise WalFormatError("chunk checksum mismatch: the WAL bytes are corrupt")
    try:
        reader = pa.ipc.open_stream(pa.py_buffer(bytes(body)))
        batches = list(reader)
    except (pa.ArrowInvalid, pa.ArrowException) as exc:
        raise WalFormatError(f"chunk Arrow data unreadable: {exc}") from exc
    if len(batches) != 1 or batches[0].num_rows != rows:
        raise WalFormatError(f"chunk holds {sum(b.num_rows for b in batches)} rows, header says {rows}")
    return batches[0]


# -- dead letters ---------------------------------------------------------------


@dataclass(frozen=True)
class DeadLetter:
    """A record that failed with a non-retriable error, with its reason."""

    record_id: str
    error_code: int
    error: str
    topic: str
    partition: int | None
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]
    timestamp_ms: int | None
    forwarded: bool = False
    reported: bool = False


FORWARDED = 1
REPORTED = 2


def _put_bytes(out: list[bytes], b: bytes | None) -> None:
    if b is None:
        out.append(_LEN.pack(-1))
    else:
        out.append(_LEN.pack(len(b)))
        out.append(b)


def _get_bytes(raw: memoryview, pos: int) -> tuple[bytes | None, int]:
    if pos + _LEN.size > len(raw):
        raise WalFormatError("dead-letter record truncated")
    (n,) = _LEN.unpack_from(raw, pos)
    pos += _LEN.size
    if n < -1:
        raise WalFormatError(f"dead-letter record with a field of length {n}")
    if n == -1:
        return None, pos
    if pos + n > len(raw):
        raise WalFormatError("dead-letter record truncated")
    return bytes(raw[pos:pos + n]), pos + n


def _dead_crc(raw: bytes | memoryview) -> int:
    raw = memoryview(raw)
    return zlib.crc32(raw[_DEAD_HEAD.size:], zlib.crc32(raw[:_DEAD_HEAD.size - _CRC.size]))


def encode_dead_letter(d: DeadLetter) -> bytes:
    flags = (FORWARDED if d.forwarded else 0) | (REPORTED if d.reported else 0)
    out = [_DEAD_HEAD.pack(
        _DEAD_MAGIC, FORMAT_VERSION, flags, d.error_code,
        -1 if d.timestamp_ms is None else d.timestamp_ms,
        -1 if d.partition is None else d.partition, len(d.headers), 0,
    )]
    for s in (d.record_id, d.error, d.topic):
        _put_bytes(out, s.encode())
    _put_bytes(out, d.key)
    _put_bytes(out, d.value)
    for hk, hv in d.headers:
        _put_bytes(out, hk.encode())
        _put_bytes(out, hv)
    raw = bytearray(b"".join(out))
    _CRC.pack_into(raw, _DEAD_HEAD.size - _CRC.size, _dead_crc(raw))
    return bytes(raw)


def decode_dead_letter(raw: bytes | memoryview) -> DeadLetter:
    """Parse a dead-letter record (format 2 with its checksum, or format 1).

    Raises:
        WalFormatError: wrong magic, version or checksum, truncated, or not UTF-8 where text is due.
    """
    raw = memoryview(raw)
    if len(raw) < _DEAD_HEAD.size:
        raise WalFormatError("dead-letter record shorter than its header")
    magic, version, flags, code, ts, part, nh, crc = _DEAD_HEAD.unpack_from(raw, 0)
    if magic != _DEAD_MAGIC or version not in READABLE_FORMATS:
        raise WalFormatError(f"dead-letter record with magic {bytes(magic)!r} version {version}")
    if version == FORMAT_VERSION and _dead_crc(raw) != crc:
        raise WalFormatError("dead-letter record checksum mismatch: the WAL bytes are corrupt")
    if nh > len(raw):  # each header takes at least 8 bytes: a huge count is garbage
        raise WalFormatError(f"dead-letter record claims {nh} headers in {len(raw)} bytes")
    pos = _DEAD_HEAD.size
    fields = []
    for _ in range(5):
        v, pos = _get_bytes(raw, pos)
        fields.append(v)
    headers = []
    try:
        for _ in range(nh):
            hk, pos = _get_bytes(raw, pos)
            hv, pos = _get_bytes(raw, pos)
            headers.append(((hk or b"").decode(), hv))
        if pos != len(raw):
            raise WalFormatError(f"dead-letter record has {len(raw) - pos} bytes after its last field")
        rid, err, topic, key, value = fields
        return DeadLetter(
            record_id=(rid or b"").decode(), error_code=code, error=(err or b"").decode(),
            topic=(topic or b"").decode(), partition=None if part < 0 else part, key=key, value=value,
            headers=tuple(headers), timestamp_ms=None if ts < 0 else ts,
            forwarded=bool(flags & FORWARDED), reported=bool(flags & REPORTED),
        )
    except UnicodeDecodeError as exc:
        raise WalFormatError(f"dead-letter record with text that is not UTF-8: {exc}") from exc


# -- record ids ------------------------------------------------------------------


def record_id_prefix(sink: str, batch: int, partition: int) -> bytes:
    """The part of a record id shared by one (batch, partition)."""
    return f"{sink}:{batch}:{partition}:".encode()


def record_id(sink: str, batch: int, partition: int, seq: int) -> str:
    """The deterministic id of one record: ``sink:batch:partition:seq``."""
    return f"{sink}:{batch}:{partition}:{seq}"


def iter_rows(batch: pa.RecordBatch, default_topic: str | None) -> Iterator[dict[str, Any]]:
    """Rows of a normalised chunk as dicts (slow path: dead letters, tools, tests)."""
    cols = {name: batch.column(i).to_pylist() for i, name in enumerate(batch.schema.names)}
    meta = batch.schema.metadata or {}
    topic = meta.get(TOPIC_META, b"").decode() or default_topic
    for i in range(batch.num_rows):
        yield {
            "topic": cols["topic"][i] if "topic" in cols else topic,
            "partition": cols["partition"][i] if "partition" in cols else None,
            "key": cols["key"][i] if "key" in cols else None,
            "value": cols["value"][i],
            "headers": [(h["key"], h["value"]) for h in cols["headers"][i] or []] if "headers" in cols else [],
            "timestamp": cols["timestamp"][i] if "timestamp" in cols else None,
        }
