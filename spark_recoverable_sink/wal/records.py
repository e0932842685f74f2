"""Byte formats of a WAL slot's attempt and dead-letter records (keys and chunks: :mod:`.format`).

Both are of the slot's one version, :data:`.format.WAL_VERSION`; a record of
any other is refused (:class:`WalVersionError`).

Attempt value::

    b"RKSA" | u16 version | u8 state | u32 spark attempt | u64 rows | f64 started
    | u8 guarantee | u64 unit digest | u32 crc32(all before)

``guarantee`` is the one the attempt was accepted under (1 at-least-once,
2 exactly-once); ``unit digest`` is the exactly-once unit's order-independent
digest of its records' ids (:func:`..ids.unit_digest`).

Dead-letter value::

    b"RKSD" | u16 version | u8 flags | i32 code | i64 ts | i32 partition | u32 n headers | u32 crc
    | (i32 length | bytes){5 + 2 * n headers}        (length -1: null)

    crc = crc32(header without crc, then the body).

Any record that does not decode raises :class:`WalFormatError`, never a
``struct.error``, ``UnicodeDecodeError`` or ``ValueError``.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass

from ..errors import WalFormatError, WalVersionError
from .format import WAL_VERSION

__all__ = [
    "OPEN",
    "COMMITTED",
    "AT_LEAST_ONCE",
    "EXACTLY_ONCE",
    "AttemptState",
    "DeadLetter",
    "encode_attempt",
    "decode_attempt",
    "encode_dead_letter",
    "decode_dead_letter",
]

_ATTEMPT_HEAD = struct.Struct(">4sHBIQdBQ")
_ATTEMPT_VAL = struct.Struct(">4sHBIQdBQI")
_ATTEMPT_MAGIC = b"RKSA"
_DEAD_HEAD = struct.Struct(">4sHBiqiII")
_DEAD_MAGIC = b"RKSD"
_LEN = struct.Struct(">i")
_CRC = struct.Struct(">I")

OPEN = 1
COMMITTED = 2
#: The guarantee an attempt was accepted under.
AT_LEAST_ONCE, EXACTLY_ONCE = 1, 2


@dataclass(frozen=True)
class AttemptState:
    """What the WAL knows of a task attempt: open or committed, its size, its guarantee and unit digest."""

    state: int
    spark_attempt: int
    rows: int
    started_at: float
    guarantee: int = AT_LEAST_ONCE
    digest: int = 0

    @property
    def exactly_once(self) -> bool:
        """Accepted under exactly-once: published only in a transaction."""
        return self.guarantee == EXACTLY_ONCE

    @property
    def committed(self) -> bool:
        return self.state == COMMITTED


def encode_attempt(a: AttemptState) -> bytes:
    body = _ATTEMPT_HEAD.pack(_ATTEMPT_MAGIC, WAL_VERSION, a.state, a.spark_attempt, a.rows, a.started_at,
                              a.guarantee, a.digest)
    return body + _CRC.pack(zlib.crc32(body))


def decode_attempt(raw: bytes | memoryview) -> AttemptState:
    """Parse an attempt record.

    Raises:
        WalVersionError: a version this build does not read.
        WalFormatError: wrong size, magic, state, guarantee or checksum.
    """
    raw = bytes(raw)
    if len(raw) >= 6 and raw[:4] == _ATTEMPT_MAGIC and int.from_bytes(raw[4:6], "big") != WAL_VERSION:
        raise WalVersionError(f"attempt record of format version {int.from_bytes(raw[4:6], 'big')}; this build "
                              f"reads version {WAL_VERSION} only", version=str(int.from_bytes(raw[4:6], "big")))
    if len(raw) != _ATTEMPT_VAL.size:
        raise WalFormatError(f"attempt record of {len(raw)} bytes, expected {_ATTEMPT_VAL.size}")
    magic, _version, state, attempt, rows, started, guarantee, digest, crc = _ATTEMPT_VAL.unpack(raw)
    if zlib.crc32(raw[:-_CRC.size]) != crc:
        raise WalFormatError("attempt record checksum mismatch: the WAL bytes are corrupt")
    if magic != _ATTEMPT_MAGIC or state not in (OPEN, COMMITTED) or guarantee not in (AT_LEAST_ONCE, EXACTLY_ONCE):
        raise WalFormatError(f"attempt record with magic {magic!r} state {state} guarantee {guarantee}")
    if attempt < 0 or rows < 0 or started != started:  # NaN: never written by this sink
        raise WalFormatError(f"attempt record with spark attempt {attempt} rows {rows} started {started}")
    return AttemptState(state, attempt, rows, started, guarantee, digest)


# -- dead letters ---------------------------------------------------------------


@dataclass(frozen=True)
class DeadLetter:
    """A record that failed with a non-retriable error, with its reason.

    ``record_id``: its id (:mod:`..ids`) in hex, as reports, errors and ``rks`` show it; a dead-letter topic's
    record carries the id's bytes in its id header, as the record would have.
    """

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


def _dead_crc(raw: bytes | bytearray | memoryview) -> int:
    raw = memoryview(raw)
    return zlib.crc32(raw[_DEAD_HEAD.size:], zlib.crc32(raw[:_DEAD_HEAD.size - _CRC.size]))


def encode_dead_letter(d: DeadLetter) -> bytes:
    flags = (FORWARDED if d.forwarded else 0) | (REPORTED if d.reported else 0)
    out = [_DEAD_HEAD.pack(
        _DEAD_MAGIC, WAL_VERSION, flags, d.error_code,
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
    """Parse a dead-letter record.

    Raises:
        WalVersionError: a version this build does not read.
        WalFormatError: wrong magic or checksum, truncated, or not UTF-8 where text is due.
    """
    raw = memoryview(raw)
    if len(raw) < _DEAD_HEAD.size:
        raise WalFormatError("dead-letter record shorter than its header")
    magic, version, flags, code, ts, part, nh, crc = _DEAD_HEAD.unpack_from(raw, 0)
    if magic != _DEAD_MAGIC:
        raise WalFormatError(f"dead-letter record with magic {bytes(magic)!r}")
    if version != WAL_VERSION:
        raise WalVersionError(f"dead-letter record of format version {version}; this build reads version "
                              f"{WAL_VERSION} only", version=str(version))
    if _dead_crc(raw) != crc:
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
