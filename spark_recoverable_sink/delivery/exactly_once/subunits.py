"""Exactly-once: a unit too large for one transaction, published as sub-units that a re-run forms alike.

A unit is published in one Kafka transaction, and a broker aborts a
transaction left open longer than ``transaction.timeout.ms``. A lane's unit
of millions of records (the first batch after a long stop without
``maxOffsetsPerTrigger``) would be aborted on every try. Such a unit is cut
into ``K`` *sub-units*, each committed in a transaction of its own with a
*partial* marker; the last commits the unit's complete marker (:func:`.parts.commit_parts`).

Which units (:func:`in_parts`): every part reads the whole unit from the WAL
to pick its records, so a unit that fits one transaction stays whole. A unit
goes in parts when it is larger than :func:`whole_limit` (what
``transaction.timeout.ms`` takes at :data:`PARTS_RATE`), or larger than
:data:`SUB_UNIT_BYTES` once a try of it failed (a whole transaction the broker
aborted at its timeout: a slower broker than that rate), or when its lane
already committed part of it. Its parts are :func:`part_bytes` each.

A re-run must form the same sub-units whatever order its records come in, so
a sub-unit is not a run of chunks but a *bucket* of records: :func:`terms`
gives each record its term of the unit digest (``mix(fingerprint,
occurrence)``, :func:`...fingerprint.mix_each`), and its bucket is that term
mod ``K``. ``K`` comes from the unit's WAL bytes when its first sub-unit is
committed (:func:`bucket_count`, at most :data:`SUB_UNIT_BYTES` each) and is
written in every partial marker, so a re-run uses the marker's ``K``, not its
own count. A partial marker holds ``(batch, k, K, digest)``: buckets ``0..k``
are in Kafka, and ``digest`` is the sum of their records' terms; a re-run
proves its buckets ``0..k`` hold exactly those records (the same sum), then
publishes buckets ``k+1..K-1``. Any unit size commits: each transaction
carries one bucket.

A partial marker rides where the complete one does (:mod:`.markers`): the
lane group's offset keeps the lane's last *complete* marker, unchanged, and
its commit *metadata* holds the partial one (:func:`encode_partial`), so every
reader that only asks whether a batch is complete (the driver's settle) reads
it as before; the lane's marker record holds both (:func:`encode_partial_record`,
record format 2), for when the offset has expired.

Where it runs: the executor, in a lane's commit step. Nothing here pickles.
"""

from __future__ import annotations

import json
import struct
import zlib
from dataclasses import dataclass

import numpy as np

from ...fingerprint import mix_each

__all__ = ["SUB_UNIT_BYTES", "PARTS_RATE", "Partial", "bucket_count", "buckets", "terms", "encode_partial",
           "decode_partial", "encode_partial_record", "decode_partial_record", "PARTIAL_RECORD_VERSION",
           "txn_timeout_ms", "whole_limit", "part_bytes", "in_parts"]

#: The least WAL chunk bytes of a part. 32 MiB in half the default transaction timeout (30 s) needs about 1 MB/s from
#: the broker; a unit no larger is always published in one transaction.
SUB_UNIT_BYTES = 32 << 20
#: The rate (bytes/s of WAL chunks) a lane's transaction is assumed to reach at least: a unit larger than
#: ``transaction.timeout.ms`` at this rate goes in parts from its first try (60 s: 960 MiB).
PARTS_RATE = 16 << 20
PARTIAL_RECORD_VERSION = 2
_MASK64 = (1 << 64) - 1
_PREC = struct.Struct(">4sHqQqIIQqH")  # magic, version, base batch, base digest32, batch, k, K, digest, ms, run length


@dataclass(frozen=True)
class Partial:
    """A partial marker: buckets ``0..k`` of ``count`` of ``batch``'s unit are committed; ``digest`` sums their
    terms."""

    batch: int
    k: int
    count: int
    digest: int


def bucket_count(unit_bytes: int, limit: int | None = None) -> int:
    """How many sub-units a unit of ``unit_bytes`` is published in (1: one transaction, as any small unit).

    ``limit``: :data:`SUB_UNIT_BYTES` as this module holds it when called.
    """
    cap = SUB_UNIT_BYTES if limit is None else limit
    return max(1, -(-int(unit_bytes) // max(1, int(cap))))


def txn_timeout_ms(kafka_conf_items: tuple[tuple[str, str], ...]) -> int:
    """The lanes' ``transaction.timeout.ms`` (librdkafka's default 60,000 unless set)."""
    try:
        return int(dict(kafka_conf_items).get("transaction.timeout.ms", 60000))
    except (TypeError, ValueError):
        return 60000


def whole_limit(transaction_timeout_ms: int) -> int:
    """The WAL bytes above which a unit goes in parts from its first try."""
    return max(SUB_UNIT_BYTES, int(transaction_timeout_ms / 1000 * PARTS_RATE))


def part_bytes(unit_bytes: int, transaction_timeout_ms: int) -> int:
    """The WAL bytes of one part: a quarter of :func:`whole_limit` for a unit above it; :data:`SUB_UNIT_BYTES` for
    one below it that went in parts because a try of it failed (the broker slower than :data:`PARTS_RATE`)."""
    limit = whole_limit(transaction_timeout_ms)
    return max(SUB_UNIT_BYTES, limit // 4) if unit_bytes > limit else SUB_UNIT_BYTES


def in_parts(unit_bytes: int, transaction_timeout_ms: int, failed_before: bool) -> bool:
    """Whether a unit with no part committed yet goes in parts (see the module)."""
    return unit_bytes > whole_limit(transaction_timeout_ms) or (failed_before and unit_bytes > SUB_UNIT_BYTES)


def terms(fps: np.ndarray, occs: np.ndarray) -> np.ndarray:
    """Each record's term of the unit digest (their sum mod 2**64 is :func:`...fingerprint.mix_pairs`)."""
    return mix_each(fps, occs)


def buckets(fps: np.ndarray, occs: np.ndarray, count: int) -> np.ndarray:
    """Each record's sub-unit: its (fingerprint, occurrence) mixed, modulo ``count`` (order-independent)."""
    if count <= 1:
        return np.zeros(len(fps), dtype=np.int64)
    return (terms(fps, occs) % np.uint64(count)).astype(np.int64)


def encode_partial(p: Partial) -> str:
    """The metadata of a partial marker's offset commit (a complete marker's has none): JSON, its CRC-32 last."""
    body = json.dumps({"rks": 1, "b": p.batch, "k": p.k, "K": p.count, "d": f"{p.digest:016x}"},
                      separators=(",", ":"))
    return f'{body[:-1]},"c":"{zlib.crc32(body.encode()):08x}"}}'


def decode_partial(metadata: str | None) -> Partial | None:
    """The partial marker an offset's metadata holds; ``None`` for none (a complete marker's offset).

    The lane group's offsets are this sink's alone, so metadata that is not a
    partial marker this version writes is never read as none: a lane whose
    proof cannot be read publishes and skips nothing on it. Anything after a
    NUL is not the metadata (the terminator the commit carries, see
    ``rks_producer.c``).

    Raises:
        ValueError: the metadata is not a partial marker (its reason).
    """
    text = (metadata or "").split("\0", 1)[0]
    if not text:
        return None
    try:
        m = json.loads(text)
        crc = m.pop("c")
        version = m.get("rks")
        batch, k, count, digest = int(m["b"]), int(m["k"]), int(m["K"]), int(m["d"], 16)
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ValueError(f"not a partial marker ({type(exc).__name__}: {exc})") from exc
    if version != 1:
        raise ValueError(f"a partial marker of format {version!r}, which this version does not read")
    if crc != f"{zlib.crc32(json.dumps(m, separators=(',', ':')).encode()):08x}":
        raise ValueError("a partial marker whose checksum does not match")
    if batch < 0 or not 0 <= k < count - 1 or not 0 <= digest <= _MASK64:
        raise ValueError(f"a partial marker out of range (batch={batch} k={k} K={count})")  # the last part: complete
    return Partial(batch, k, count, digest)


def encode_partial_record(base: tuple[int, int] | None, p: Partial, run: str, written_ms: int) -> bytes:
    """A marker record (format 2) of a partial commit: the lane's last complete ``(batch, digest32)`` (``None``:
    none) and the partial marker; ``RKSM | u16 2 | ... | run | crc32``."""
    r = run.encode()
    b, d = base if base is not None else (-1, 0)
    body = _PREC.pack(b"RKSM", PARTIAL_RECORD_VERSION, b, d, p.batch, p.k, p.count, p.digest, written_ms, len(r)) + r
    return body + struct.pack(">I", zlib.crc32(body))


def decode_partial_record(raw: bytes) -> tuple[tuple[int, int] | None, Partial, str, int]:
    """``(base, partial, run, written_ms)`` of a format-2 marker record.

    Raises:
        ValueError: the bytes are not one (its reason).
    """
    if len(raw) < _PREC.size + 4 or zlib.crc32(raw[:-4]) != struct.unpack(">I", raw[-4:])[0]:
        raise ValueError(f"not a partial marker record: {len(raw)} bytes, or a checksum that does not match")
    magic, version, b, d, batch, k, count, digest, ms, n = _PREC.unpack_from(raw)
    if magic != b"RKSM" or version != PARTIAL_RECORD_VERSION or len(raw) != _PREC.size + n + 4:
        raise ValueError(f"not a partial marker record: magic {magic!r} format {version}, {len(raw)} bytes")
    if batch < 0 or not 0 <= k < count - 1 or b < -1 or d >= 1 << 32:
        raise ValueError(f"a partial marker record out of range (batch={batch} k={k} K={count} base={b})")
    try:
        run = raw[_PREC.size:_PREC.size + n].decode()
    except UnicodeDecodeError as exc:
        raise ValueError(f"a partial marker record whose run is not UTF-8 ({exc})") from exc
    return (None if b < 0 else (b, d)), Partial(batch, k, count, digest), run, ms
