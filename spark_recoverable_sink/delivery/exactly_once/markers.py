"""Exactly-once markers: what a lane's committed transactions leave in Kafka, as bytes, encoded and decoded.

Every lane (named by :func:`.names.lane_id`) commits, in the same transaction as a unit's records, a
*marker* in two places:

* the **offset** of the consumer group named like the lane on partition 0 of
  the sink's ``marker_topic``: ``(batch + 1) << 32 | digest mod 2**32``. It is
  read fresh by any client (an offset fetch, ``read_committed``), but brokers
  delete it ``offsets.retention.minutes`` after the lane's last commit (7 days
  by default);
* a **record** in ``marker_topic`` (compacted, created by the sink), key = the
  lane, value = :func:`encode_record` (batch, rows, the whole 64-bit digest,
  run, time). Compaction keeps the latest per lane for as long as the topic
  lives: it is what survives the offset's expiry.

How they are read back: :mod:`.marker_reads`.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass, field

from .subunits import (
    PARTIAL_RECORD_VERSION,
    Partial,
    decode_partial,
    decode_partial_record,
    encode_partial,
    encode_partial_record,
)

__all__ = ["Marker", "encode_offset", "decode_offset", "encode_record", "decode_record", "encode_commit",
           "MAX_BATCH", "DIGEST_BITS", "UNANSWERED"]

DIGEST_BITS = 32  # of the unit digest in the offset (the record holds all 64)
_DIGEST_MASK = (1 << DIGEST_BITS) - 1
MAX_BATCH = (1 << 31) - 2  # the largest batch id an offset marker holds
_RECORD = struct.Struct(">4sHqQQqH")
_RECORD_MAGIC = b"RKSM"
_RECORD_VERSION = 1

@dataclass(frozen=True)
class Marker:
    """A lane's latest committed unit: its batch and digest (``rows``/``full_digest`` only from a record).

    ``partial``: a later unit of the lane committed in part since (:mod:`.subunits`); ``batch`` -1 when the lane
    has no complete unit yet.
    """

    batch: int
    digest32: int
    rows: int | None = None
    full_digest: int | None = None
    source: str = "offset"  # or "record": the offset had expired
    run: str | None = field(default=None, compare=False)  # the run a record names (an offset names none)
    partial: Partial | None = None

    @property
    def latest(self) -> int:
        """The latest batch the lane committed any of: its complete marker's, or a partial one's."""
        return max(self.batch, self.partial.batch) if self.partial is not None else self.batch

    def proves(self, batch: int, digest: int) -> bool:
        """Whether this marker shows that unit (``batch``, ``digest``) is the one Kafka has."""
        if self.batch != batch:
            return False
        if self.full_digest is not None:
            return self.full_digest == digest
        return self.digest32 == digest & _DIGEST_MASK


#: What a bounded marker read returns when the broker gave no answer (compared with ``is``; proves nothing).
UNANSWERED = Marker(batch=-1, digest32=0, source="unanswered")


def encode_offset(batch: int, digest: int) -> int:
    """The marker offset of a committed unit.

    Raises:
        ValueError: ``batch`` is beyond :data:`MAX_BATCH` (the config refuses such sinks' batches earlier).
    """
    if not 0 <= batch <= MAX_BATCH:
        raise ValueError(f"batch {batch} cannot be held by an exactly-once marker (0..{MAX_BATCH})")
    return ((batch + 1) << DIGEST_BITS) | (digest & _DIGEST_MASK)


def decode_offset(offset: int | None, metadata: str | None = None) -> Marker | None:
    """The marker an offset (and its commit metadata: a partial marker) holds; ``None`` if the lane has none.

    Raises:
        ValueError: the metadata is not a partial marker (:func:`.subunits.decode_partial`).
    """
    partial = decode_partial(metadata)
    if offset is None or offset < (1 << DIGEST_BITS):
        return None if partial is None else Marker(-1, 0, partial=partial)
    return Marker((offset >> DIGEST_BITS) - 1, offset & _DIGEST_MASK, partial=partial)


def encode_record(batch: int, rows: int, digest: int, run: str, written_ms: int) -> bytes:
    """The value of a lane's marker record:
    ``RKSM | u16 1 | i64 batch | u64 rows | u64 digest | i64 ms | run | crc``."""
    r = run.encode()
    body = _RECORD.pack(_RECORD_MAGIC, _RECORD_VERSION, batch, rows, digest, written_ms, len(r)) + r
    return body + struct.pack(">I", zlib.crc32(body))


@dataclass(frozen=True)
class Commit:
    """What one lane transaction puts in Kafka beside its records (:func:`encode_commit`): the marker record's
    value, the lane group's offset and its metadata, and the marker a read of that offset returns afterwards."""

    record: bytes
    offset: int
    metadata: str | None
    reads_as: Marker


def encode_commit(batch: int, rows: int, digest: int, run: str, written_ms: int, partial: Partial | None = None,
                  base: Marker | None = None) -> Commit:
    """The marker of a unit's commit (``partial`` ``None``: batch ``batch``'s whole unit of ``rows`` records and
    64-bit ``digest``), or of one of its parts (``partial``: buckets ``0..k`` of its batch; ``base``: the lane's
    last complete marker, which the offset keeps, the partial marker riding as its metadata).

    Raises:
        ValueError: ``batch`` (or ``base``'s) is beyond :data:`MAX_BATCH`.
    """
    if partial is None:
        return Commit(encode_record(batch, rows, digest, run, written_ms), encode_offset(batch, digest), None,
                      Marker(batch, digest & _DIGEST_MASK))
    if base is None:
        offset, reads_as = 0, Marker(-1, 0, partial=partial)
    else:
        whole = base.full_digest if base.full_digest is not None else base.digest32
        offset, reads_as = encode_offset(base.batch, whole), Marker(base.batch, whole & _DIGEST_MASK, partial=partial)
    record = encode_partial_record(None if base is None else (base.batch, base.digest32), partial, run, written_ms)
    return Commit(record, offset, encode_partial(partial), reads_as)


def decode_record(raw: bytes) -> tuple[Marker, int]:
    """``(marker, written_ms)`` of a marker record (format 1, or a partial commit's format 2); never trusted blindly.

    Raises:
        ValueError: the bytes are not a marker record this version reads (its reason: checksum, magic, version,
            length, range, run not UTF-8).
    """
    if len(raw) < 10 or zlib.crc32(raw[:-4]) != struct.unpack(">I", raw[-4:])[0]:
        raise ValueError(f"not a marker record: {len(raw)} bytes whose checksum does not match")
    if raw[:4] != _RECORD_MAGIC:
        raise ValueError(f"not a marker record: magic {bytes(raw[:4])!r}")
    version = int.from_bytes(raw[4:6], "big")
    if version == PARTIAL_RECORD_VERSION:  # a partial commit's
        base, p, run, written_ms = decode_partial_record(raw)
        b, d = base or (-1, 0)
        return Marker(b, d, source="record", run=run, partial=p), written_ms
    if version != _RECORD_VERSION:
        raise ValueError(f"a marker record of format {version}, which this version does not read "
                         f"(it reads {_RECORD_VERSION} and {PARTIAL_RECORD_VERSION})")
    if len(raw) < _RECORD.size + 4:
        raise ValueError(f"a marker record of {len(raw)} bytes, shorter than its header")
    _magic, _version, batch, rows, digest, written_ms, n = _RECORD.unpack_from(raw)
    if len(raw) != _RECORD.size + n + 4 or batch < 0:
        raise ValueError(f"a marker record of {len(raw)} bytes for a run of {n} (batch {batch})")
    try:
        run = raw[_RECORD.size:_RECORD.size + n].decode()
    except UnicodeDecodeError as exc:
        raise ValueError(f"a marker record whose run is not UTF-8 ({exc})") from exc
    return Marker(batch, digest & _DIGEST_MASK, rows, digest, "record", run), written_ms
