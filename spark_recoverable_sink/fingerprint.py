"""Fingerprints of records, occurrence numbers among equal ones, and order-independent digests of sets of them.

Computed by the native extension when it loads (:mod:`.native`), else by
the reference implementation here (the ``xxhash`` package per value, the
rest in numpy); both give the same numbers, bit for bit (a test checks it),
so workers of one cluster agree whichever they run.

The fingerprint of a record (``uint64``) folds one XXH64 per column, in the
order topic (seed 1), partition (2), key (3), value (4), headers (5),
timestamp (6), over the columns the chunk has:

* null: ``0x9E3779B97F4A7C15 ^ seed``; bytes and strings: ``XXH64(bytes, seed)``;
  partition and timestamp: ``XXH64(int64 little-endian, seed)``; headers:
  ``XXH64`` of ``u32le len(key) | key | i32le len(value) or -1 | value`` per header;
* fold: ``acc = 0x27D4EB2F165667C5``; per column ``acc = rotl64(acc ^ h * P2, 31) * P1 + P4``;
  then XXH64's final avalanche.
"""

from __future__ import annotations

import struct
from typing import Any

import numpy as np
import pyarrow as pa

from .native import library

__all__ = ["fingerprints", "fingerprints_py", "new_occurrences", "mix_pairs", "mix_each", "SEEDS"]

_P1, _P2, _P3, _P4, _P5 = (0x9E3779B97F4A7C15, 0xC2B2AE3D27D4EB4F, 0x165667B19E3779F9, 0x85EBCA77C2B2AE63,
                           0x27D4EB2F165667C5)
SEEDS = {"topic": 1, "partition": 2, "key": 3, "value": 4, "headers": 5, "timestamp": 6}
_KINDS = (("topic", "bin"), ("partition", "int"), ("key", "bin"), ("value", "bin"), ("headers", "headers"),
          ("timestamp", "int"))


def _cols(batch: pa.RecordBatch) -> dict[str, Any]:
    names = batch.schema.names
    return {n: (batch.column(n) if n in names else None) for n, _k in _KINDS}


def fingerprints(batch: pa.RecordBatch) -> np.ndarray:
    """One ``uint64`` fingerprint per record of a normalised batch (native when it loads)."""
    c = _cols(batch)
    native = library.module()
    if native is None:
        return fingerprints_py(batch)
    out = np.empty(batch.num_rows, dtype=np.uint64)
    native.fingerprints_into(out, library.column(c["value"]), library.column(c["key"]),
                             library.column(c["topic"]), library.column(c["partition"], "int32"),
                             library.column(c["timestamp"], "int64"), library.headers_column(c["headers"]))
    return out


def _canonical_headers(entries: list) -> bytes:
    parts = []
    for e in entries:
        if e is None:
            continue  # a null entry carries no header
        k = (e.get("key") or "").encode()
        v = e.get("value")
        parts.append(struct.pack("<I", len(k)) + k)
        parts.append(struct.pack("<i", -1) if v is None else struct.pack("<i", len(v)) + bytes(v))
    return b"".join(parts)


def fingerprints_py(batch: pa.RecordBatch) -> np.ndarray:
    """The reference implementation (one ``xxhash`` call per value; the fold in numpy)."""
    import xxhash

    def hashes(a: Any, seed: int, kind: str) -> np.ndarray:
        h = xxhash.xxh64_intdigest
        out = []
        for v in a.to_pylist():
            if v is None:
                out.append(_P1 ^ seed)
            elif kind == "int":
                out.append(h(struct.pack("<q", v), seed))
            elif kind == "headers":
                out.append(h(_canonical_headers(v), seed))
            else:
                out.append(h(v.encode() if isinstance(v, str) else v, seed))
        return np.array(out, dtype=np.uint64)

    c = _cols(batch)
    u = np.uint64
    acc = np.full(batch.num_rows, _P5, dtype=np.uint64)
    with np.errstate(over="ignore"):
        for name, kind in _KINDS:
            if c[name] is None:
                continue
            x = acc ^ (hashes(c[name], SEEDS[name], kind) * u(_P2))
            acc = ((x << u(31)) | (x >> u(33))) * u(_P1) + u(_P4)
        return _avalanche(acc)


def _avalanche(acc: np.ndarray) -> np.ndarray:
    u = np.uint64
    with np.errstate(over="ignore"):
        acc = acc ^ (acc >> u(33))
        acc = acc * u(_P2)
        acc = acc ^ (acc >> u(29))
        acc = acc * u(_P3)
        return acc ^ (acc >> u(32))


class _Occurrences:
    """The reference occurrence counter: sorted runs of (fingerprint, count), merged as they double."""

    def __init__(self) -> None:
        self._runs: list[tuple[np.ndarray, np.ndarray]] = []

    def number(self, fps: np.ndarray) -> np.ndarray:
        """For each fingerprint, in order: how many earlier ones (this call and every earlier one) are equal."""
        n = len(fps)
        if n == 0:
            return np.zeros(0, dtype=np.uint32)
        order = np.argsort(fps, kind="stable")
        srt = fps[order]
        first = np.ones(n, dtype=bool)
        first[1:] = srt[1:] != srt[:-1]
        starts = np.flatnonzero(first)
        group = np.cumsum(first) - 1
        occ = np.arange(n, dtype=np.int64) - starts[group]
        uniq = srt[starts]
        prior = np.zeros(len(uniq), dtype=np.int64)
        for keys, counts in self._runs:
            at = np.minimum(np.searchsorted(keys, uniq), len(keys) - 1)
            prior += np.where(keys[at] == uniq, counts[at], 0)
        occ += prior[group]
        out = np.empty(n, dtype=np.uint32)
        out[order] = occ
        self._runs.append((uniq, np.diff(np.append(starts, n)).astype(np.int64)))
        while len(self._runs) >= 2 and len(self._runs[-2][0]) <= 2 * len(self._runs[-1][0]):
            (k1, c1), (k2, c2) = self._runs.pop(), self._runs.pop()
            keys, counts = np.concatenate([k2, k1]), np.concatenate([c2, c1])
            o = np.argsort(keys, kind="stable")
            keys, counts = keys[o], counts[o]
            head = np.ones(len(keys), dtype=bool)
            head[1:] = keys[1:] != keys[:-1]
            self._runs.append((keys[head], np.add.reduceat(counts, np.flatnonzero(head))))
        return out


#: A native occurrence table larger than this moves to a mapped file in ``spill_dir`` (:func:`new_occurrences`).
SPILL_ABOVE = 32 << 20


def new_occurrences(spill_dir: str | None = None) -> Any:
    """A counter of occurrences for one task's partition (native when it loads).

    With ``spill_dir`` the native table, once past :data:`SPILL_ABOVE` bytes
    (about 1.5 M distinct records), is a shared mapping of an unlinked file
    there: its pages are file-backed, written back and evicted by the kernel
    under memory pressure, so a worker's anonymous memory does not grow with
    the partition (its number() then raises OSError, e.g. ENOSPC, when the
    file cannot be made). The Python reference keeps its table in memory.
    """
    native = library.module()
    if native is None or not hasattr(native, "Occurrences"):
        return _Occurrences()
    return native.Occurrences(spill_dir, SPILL_ABOVE) if spill_dir else native.Occurrences()


def mix_each(fps: np.ndarray, occs: np.ndarray) -> np.ndarray:
    """``avalanche(fp ^ occ * P1)`` per (fingerprint, occurrence): the terms :func:`mix_pairs` sums."""
    with np.errstate(over="ignore"):
        return _avalanche(np.asarray(fps, np.uint64) ^ (np.asarray(occs, np.uint64) * np.uint64(_P1)))


def mix_pairs(fps: np.ndarray, occs: np.ndarray, seed: int = 0) -> int:
    """``seed + sum(avalanche(fp ^ occ * P1))`` mod 2**64: an order-independent digest of (fingerprint, occurrence)."""
    native = library.module()
    if native is not None and hasattr(native, "unit_digest"):
        return int(native.unit_digest(np.ascontiguousarray(fps, np.uint64), np.ascontiguousarray(occs, np.uint32),
                                      seed))
    with np.errstate(over="ignore"):
        mixed = _avalanche(fps.astype(np.uint64) ^ (occs.astype(np.uint64) * np.uint64(_P1)))
        return int((int(mixed.sum(dtype=np.uint64)) + seed) % (1 << 64))
