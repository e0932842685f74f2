"""Byte formats of the write-ahead log's chunks and keys, and the one version of all a slot holds.

Everything the WAL stores is plain, versioned bytes; nothing is ever
unpickled, so a WAL file cannot run code.

:data:`WAL_VERSION` is the version of everything a slot holds: its meta
``format``, every chunk's header, every attempt and dead-letter record
(:mod:`.records`). A build reads its own version only: a slot or a chunk of
any other is refused with :class:`WalVersionError` naming the version and the
slot, and left as it is on disk (``Wal._check_format``, :func:`check_chunk`).

Keys (big-endian, so LMDB's byte order is write order):

* chunk:       ``batch u64 | origin u32 | first_seq u64 | gen u32``
* attempt:     ``batch u64 | origin u32 | gen u32``
* dead letter: ``batch u64 | origin u32 | seq u64 | gen u32``

``origin`` numbers the sequence a key belongs to: the Spark partition
at-least-once, the lane exactly-once (one field for both; the bytes are the
same whatever it is called).

``gen`` is a counter local to the WAL slot that tells apart two attempts at
the same (batch, origin) that met in one slot. It is never part of a
record's id (see :mod:`..ids`).

Chunk value (attempt and dead-letter values are in :mod:`.records`)::

    b"RKSC" | u16 version | u16 flags | u32 rows | u32 crc32(ipc) | Arrow IPC stream

The Arrow stream holds one record batch with the columns ``value`` (binary),
and when the input had them ``key`` (binary), ``topic`` (string),
``partition`` (int32), ``headers`` (list<struct<key: string, value: binary>>)
and ``timestamp`` (int64 milliseconds); then the fields of each record's
id its layout names (``rks_place``, ``rks_fp``, ``rks_occ``, ``rks_k1``,
``rks_k2``; none for ids by position: :mod:`..ids`). Its schema metadata
holds ``rks.topic``, ``rks.run`` (:mod:`..schema`), ``rks.idp`` and
``rks.idl`` (the ids' prefix and layout). A chunk without ``value`` or a
known id scheme with its columns, or with a column of no such name, is
refused.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from ..errors import WalFormatError, WalVersionError
from ..ids import ID_COLUMNS, chunk_scheme
from ..native import library
from ..schema import KAFKA_COLUMNS

__all__ = [
    "WAL_VERSION", "ChunkKey", "AttemptKey", "crc32", "encode_chunk", "decode_chunk", "chunk_rows", "check_chunk",
]

#: The version of everything a WAL slot holds: its meta ``format``, chunk headers, attempt and dead-letter records.
#: BUMP IT WITH EVERY CHANGE OF WHAT THOSE BYTES MEAN, not only of their layout: the layouts here and in
#: .records; a chunk's columns and schema metadata (..schema: rks.topic, rks.run; ..ids: rks.idp, rks.idl and
#: the id fields' columns); the record ids and unit digests built from them (..ids, ..fingerprint: the hash,
#: occurrences, places, the id's bytes). A build reads its own version only, so a slot another build wrote is
#: refused naming its version, never read with other meanings (tests/unit/test_wal_versions.py pins what version 4
#: means).
#: 4: one version for the slot and its chunks; ids by content only (rks_fp and rks_occ in every chunk), always with
#: a run; rks.ids and rks_place.
#: 5: record ids of format 1 (fixed-length bytes: ..ids), each chunk naming its ids' prefix and layout (rks.idp,
#: rks.idl) and holding the fields its layout needs (none for ids by position).
#: 6: the unit digest of ids by position folds in their scope. (1-5: pre-release, not read.)
WAL_VERSION = 6

_CHUNK_KEY = struct.Struct(">QIQI")
_ATTEMPT_KEY = struct.Struct(">QII")
_CHUNK_HEAD = struct.Struct(">4sHHII")
_CHUNK_MAGIC = b"RKSC"


@dataclass(frozen=True, order=True)
class ChunkKey:
    """Where a chunk of records sits: (batch, origin, first sequence, slot generation)."""

    batch: int
    origin: int
    first_seq: int
    gen: int

    def pack(self) -> bytes:
        return _CHUNK_KEY.pack(self.batch, self.origin, self.first_seq, self.gen)

    @classmethod
    def unpack(cls, raw: bytes) -> "ChunkKey":
        if len(raw) != _CHUNK_KEY.size:
            raise WalFormatError(f"chunk key of {len(raw)} bytes, expected {_CHUNK_KEY.size}")
        return cls(*_CHUNK_KEY.unpack(raw))

    @property
    def attempt(self) -> "AttemptKey":
        return AttemptKey(self.batch, self.origin, self.gen)


@dataclass(frozen=True, order=True)
class AttemptKey:
    """One task attempt's records in one slot: (batch, origin, slot generation)."""

    batch: int
    origin: int
    gen: int

    def pack(self) -> bytes:
        return _ATTEMPT_KEY.pack(self.batch, self.origin, self.gen)

    @classmethod
    def unpack(cls, raw: bytes) -> "AttemptKey":
        if len(raw) != _ATTEMPT_KEY.size:
            raise WalFormatError(f"attempt key of {len(raw)} bytes, expected {_ATTEMPT_KEY.size}")
        return cls(*_ATTEMPT_KEY.unpack(raw))


# -- chunks -------------------------------------------------------------------


def crc32(data: Any) -> int:
    """zlib's CRC-32 of ``data``: the native extension's where the CPU folds it (PCLMULQDQ), else zlib's.

    Both give the same value, so a chunk written by either is checked by
    either. The native table path (no PCLMULQDQ: aarch64, old x86) is slower
    than zlib's, so there zlib's is used.
    """
    return _crc32_impl()(data)


def _crc32_impl() -> Any:
    global _CRC32
    if _CRC32 is None:
        native = library.module()
        hardware = getattr(native, "crc32_hardware", None)
        _CRC32 = native.crc32 if hardware is not None and hardware() else zlib.crc32
    return _CRC32


_CRC32: Any = None


def encode_chunk(batch: pa.RecordBatch) -> memoryview:
    """Serialise one normalised record batch as a chunk value: the header and the IPC bytes written into one
    buffer (the rows are copied once, into the IPC stream; the header is filled in place after it)."""
    sink = pa.BufferOutputStream()
    sink.write(bytes(_CHUNK_HEAD.size))
    with pa.ipc.new_stream(sink, batch.schema) as writer:
        writer.write_batch(batch)
    out = memoryview(sink.getvalue())  # a resizable buffer's: writable
    _CHUNK_HEAD.pack_into(out, 0, _CHUNK_MAGIC, WAL_VERSION, 0, batch.num_rows, crc32(out[_CHUNK_HEAD.size:]))
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
    if head[1] != WAL_VERSION:
        raise WalVersionError(f"chunk of format version {head[1]}; this build reads version {WAL_VERSION} only",
                              version=str(head[1]))
    return head


def check_chunk(raw: bytes | memoryview) -> int:
    """Validate a chunk's header and checksum without decoding it; returns its row count.

    Raises:
        WalVersionError: a version this build does not read (the chunk may be sound: its slot is refused whole).
        WalFormatError: bad magic or checksum.
    """
    _magic, _version, _flags, rows, crc = _check_chunk_head(raw)
    if crc32(memoryview(raw)[_CHUNK_HEAD.size:]) != crc:
        raise WalFormatError("chunk checksum mismatch: the WAL bytes are corrupt")
    return rows


def decode_chunk(raw: bytes | memoryview) -> pa.RecordBatch:
    """Parse a chunk value back into its record batch.

    Raises:
        WalVersionError: a version this build does not read.
        WalFormatError: bad checksum, unreadable Arrow data, or columns a chunk of this version does not hold.
    """
    _magic, _version, _flags, rows, crc = _check_chunk_head(raw)
    body = memoryview(raw)[_CHUNK_HEAD.size:]
    if crc32(body) != crc:
        raise WalFormatError("chunk checksum mismatch: the WAL bytes are corrupt")
    try:
        reader = pa.ipc.open_stream(pa.py_buffer(bytes(body)))
        batches = list(reader)
    except (pa.ArrowInvalid, pa.ArrowException) as exc:
        raise WalFormatError(f"chunk Arrow data unreadable: {exc}") from exc
    if len(batches) != 1 or batches[0].num_rows != rows:
        raise WalFormatError(f"chunk holds {sum(b.num_rows for b in batches)} rows, header says {rows}")
    names = batches[0].schema.names
    if not {"value"} <= set(names) <= _CHUNK_COLUMNS:
        raise WalFormatError(f"chunk with the columns {names}: one of version {WAL_VERSION} holds value, the fields "
                             f"of its ids, and only {sorted(_CHUNK_COLUMNS)}")
    try:
        chunk_scheme(batches[0])
    except ValueError as exc:
        raise WalFormatError(f"chunk of version {WAL_VERSION} unreadable: {exc}") from exc
    return batches[0]


_CHUNK_COLUMNS = frozenset(KAFKA_COLUMNS) | ID_COLUMNS
