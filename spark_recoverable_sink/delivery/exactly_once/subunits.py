"""Exactly-once: a unit too large for one transaction, published as sub-units that a re-run forms alike.

A unit is published in one Kafka transaction, and a broker aborts a
transaction left open longer than ``transaction.timeout.ms``. A lane's unit
of millions of records (the first batch after a long stop without
``maxOffsetsPerTrigger``) would be aborted on every try. Such a unit is cut
into ``K`` *sub-units*, each committed in a transaction of its own with a
*partial* marker; the last commits the unit's complete marker.

A re-run must form the same sub-units whatever order its records come in, so
a sub-unit is not a run of chunks but a *bucket* of records:
:func:`buckets` gives each record ``mix(fingerprint, occurrence) mod K`` (the
same mix the unit digest sums, :func:`...fingerprint.mix_pairs`). ``K`` comes
from the unit's size when its first sub-unit is committed
(:func:`bucket_count`, at most :data:`SUB_UNIT_BYTES` of WAL chunks each) and
is written in every partial marker, so a re-run uses the marker's ``K``, not
its own count. A partial marker holds ``(batch, k, K, digest)``: buckets
``0..k`` are in Kafka, and ``digest`` is the sum of their records' pairs; a
re-run proves its buckets ``0..k`` hold exactly those records (the same sum),
then publishes buckets ``k+1..K-1``. Any unit size commits: each transaction
carries one bucket.

Where it runs: the executor, in a lane's commit step. Nothing here pickles.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np

from ...fingerprint import mix_each

__all__ = ["SUB_UNIT_BYTES", "Partial", "bucket_count", "buckets", "encode_partial", "decode_partial"]

#: The most WAL chunk bytes one sub-unit's transaction carries. 32 MiB in half the default transaction timeout
#: (30 s) needs about 1 MB/s from the broker: a unit no larger is published in one transaction, as before.
SUB_UNIT_BYTES = 32 << 20


@dataclass(frozen=True)
class Partial:
    """A partial marker's plan: buckets ``0..k`` of ``count`` are committed; ``digest`` sums their records."""

    k: int
    count: int
    digest: int


def bucket_count(unit_bytes: int, limit: int = SUB_UNIT_BYTES) -> int:
    """How many sub-units a unit of ``unit_bytes`` is published in (1: one transaction, as any small unit)."""
    return max(1, -(-int(unit_bytes) // max(1, int(limit))))


def buckets(fps: np.ndarray, occs: np.ndarray, count: int) -> np.ndarray:
    """Each record's sub-unit: its (fingerprint, occurrence) mixed, modulo ``count`` (order-independent)."""
    if count <= 1:
        return np.zeros(len(fps), dtype=np.int64)
    return (mix_each(fps, occs) % np.uint64(count)).astype(np.int64)


def encode_partial(p: Partial) -> str:
    """The metadata of a partial marker's offset commit (``""`` is a complete marker's)."""
    return json.dumps({"rks": 1, "k": p.k, "K": p.count, "d": f"{p.digest:016x}"}, separators=(",", ":"))


def decode_partial(metadata: str | None) -> Partial | None:
    """The plan a marker's metadata holds; ``None`` for a complete marker (or metadata that is not one of ours)."""
    if not metadata:
        return None
    try:
        m = json.loads(metadata)
        if m.get("rks") != 1:
            return None
        k, count, digest = int(m["k"]), int(m["K"]), int(m["d"], 16)
    except (ValueError, KeyError, TypeError, AttributeError):
        return None
    if not 0 <= k < count - 1:
        return None  # a last bucket commits the complete marker, never a partial one
    return Partial(k, count, digest)
