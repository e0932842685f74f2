"""The partition librdkafka's partitioner gives each keyed record, for a whole Arrow column at once.

Exactly-once re-splits every batch by the partition each record goes to
(:mod:`..task.lanes`), so that one lane writes each partition and a
partition receives an input partition's records in their order. That needs,
before anything is produced, the partition the producer's partitioner will
choose:

* ``murmur2_random`` (the sink's default: the Java client's choice) and
  ``murmur2``: Kafka's ``Utils.murmur2`` of the key (seed ``0x9747b28c``),
  made positive (``& 0x7fffffff``), modulo the partition count;
* ``consistent_random`` and ``consistent`` (librdkafka's own default): the
  CRC-32 of the key, modulo the partition count.

A key the partitioner places at random gets ``-1``: a null key under
``murmur2_random``, a null or empty key under ``consistent_random`` (as in
librdkafka's rdkafka_msg.c); the others hash a null key as the empty one. Vectorised with numpy: one pass per 4-byte
block of the longest key over the rows that have it, no per-record Python.
"""

from __future__ import annotations

import zlib

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..config import SUPPORTED_PARTITIONERS

__all__ = ["SUPPORTED_PARTITIONERS", "murmur2", "partitions_of"]


_M = np.uint32(0x5BD1E995)
_SEED = 0x9747B28C


def _buffers(keys: pa.Array) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(starts, lengths, data bytes) of a binary column (large or not; strings as their UTF-8 bytes)."""
    if pa.types.is_string(keys.type) or pa.types.is_large_string(keys.type):
        keys = keys.cast(pa.large_binary() if pa.types.is_large_string(keys.type) else pa.binary())
    width = np.int64 if pa.types.is_large_binary(keys.type) else np.int32
    _validity, offsets, data = keys.buffers()
    offs = np.frombuffer(offsets, dtype=width)[keys.offset: keys.offset + len(keys) + 1].astype(np.int64)
    raw = np.frombuffer(data, dtype=np.uint8) if data is not None else np.zeros(0, np.uint8)
    return offs[:-1], np.diff(offs), raw


def murmur2(keys: pa.Array) -> np.ndarray:
    """Kafka's ``Utils.murmur2`` of every value of a binary (or string) column, as uint32 (nulls: of no bytes)."""
    starts, lengths, raw = _buffers(keys)
    lengths = np.where(np.asarray(keys.is_null()), 0, lengths) if keys.null_count else lengths
    with np.errstate(over="ignore"):
        h = np.uint32(_SEED) ^ lengths.astype(np.uint32)
        blocks = lengths // 4
        for j in range(int(blocks.max()) if len(blocks) else 0):
            rows = np.nonzero(blocks > j)[0]
            at = starts[rows] + 4 * j
            k = (raw[at].astype(np.uint32) | (raw[at + 1].astype(np.uint32) << 8)
                 | (raw[at + 2].astype(np.uint32) << 16) | (raw[at + 3].astype(np.uint32) << 24))
            k = k * _M
            k ^= k >> np.uint32(24)
            k = k * _M
            h[rows] = (h[rows] * _M) ^ k
        tail = lengths % 4
        base = starts + 4 * blocks
        for extra, shift in ((3, 16), (2, 8)):
            rows = np.nonzero(tail >= extra)[0]
            h[rows] ^= raw[base[rows] + extra - 1].astype(np.uint32) << np.uint32(shift)
        rows = np.nonzero(tail >= 1)[0]
        h[rows] = (h[rows] ^ raw[base[rows]].astype(np.uint32)) * _M
        h ^= h >> np.uint32(13)
        h = h * _M
        h ^= h >> np.uint32(15)
    return h


def partitions_of(keys: pa.Array, count: int, partitioner: str) -> np.ndarray:
    """The partition (int32) ``partitioner`` gives each key among ``count`` partitions; ``-1`` for a null key
    under a ``_random`` partitioner.

    Raises:
        ValueError: ``partitioner`` is not one of :data:`SUPPORTED_PARTITIONERS`, or ``count`` < 1.
    """
    if partitioner not in SUPPORTED_PARTITIONERS:
        raise ValueError(f"partitioner {partitioner!r} is not one of {sorted(SUPPORTED_PARTITIONERS)}")
    if count < 1:
        raise ValueError(f"a topic has at least one partition, got {count}")
    if partitioner.startswith("murmur2"):
        hashed = (murmur2(keys) & np.uint32(0x7FFFFFFF)).astype(np.int64)
    else:
        values = keys.cast(pa.binary()).to_pylist() if not pa.types.is_binary(keys.type) else keys.to_pylist()
        hashed = np.fromiter((zlib.crc32(v or b"") for v in values), dtype=np.int64, count=len(values))
    out = (hashed % count).astype(np.int32)
    if partitioner == "consistent_random":  # librdkafka: an empty key (keylen 0) counts as no key here
        out[np.asarray(pc.fill_null(pc.equal(pc.binary_length(keys), 0), True))] = -1
    elif partitioner == "murmur2_random" and keys.null_count:  # only a null key (an empty one is hashed)
        out[np.asarray(keys.is_null())] = -1
    return out
