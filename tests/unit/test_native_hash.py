"""Tier 1: the native hashing agrees with the package's references, on inputs test_ids.py does not reach.

* XXH64 (written from the xxHash specification) against the ``xxhash`` package;
* fingerprints (C) against :func:`spark_recoverable_sink.fingerprint.fingerprints_py`
  over random columns with nulls, empties, unicode topics, extreme partitions and
  timestamps, null header keys/values/entries, any subset of columns, sliced and
  large layouts, and one row computed by hand from the written specification;
* the C occurrence counter against :class:`spark_recoverable_sink.fingerprint._Occurrences`
  and a plain-dict definition, with the edge keys 0 and 2**64-1, through growth,
  refusing arrays of the wrong kind and concurrent calls;
* ``mix_pairs`` (C ``unit_digest``) against its numpy reference path and a pure-int definition.

Order independence, accumulation over chunks and normalised batches are in test_ids.py.
"""

from __future__ import annotations

import os
import random
import threading

import numpy as np
import pyarrow as pa
import pytest
import xxhash

from spark_recoverable_sink import fingerprint
from spark_recoverable_sink.fingerprint import (
    _Occurrences,
    fingerprints,
    fingerprints_py,
    mix_pairs,
)
from spark_recoverable_sink.native import library
from spark_recoverable_sink.schema import HEADERS_TYPE

pytestmark = pytest.mark.skipif(not library.available(),
                                reason=f"native extension not built: {library.why_unavailable()}")

M64 = (1 << 64) - 1
EDGE = np.array([0, M64, 1, M64 - 1, 1 << 63, (1 << 63) - 1], dtype=np.uint64)
COLUMNS = ("value", "key", "topic", "partition", "timestamp", "headers")


def native():
    return library.module()


def test_xxh64_matches_the_xxhash_package():
    rng = random.Random(1)
    for n in list(range(80)) + [255, 256, 1000, 4099]:
        data = bytes(rng.randrange(256) for _ in range(n))
        for seed in (0, 1, 6, 2**63 + 5, M64):
            assert native().xxh64(data, seed) == xxhash.xxh64_intdigest(data, seed), (n, seed)


def random_batch(n: int, seed: int) -> pa.RecordBatch:
    rng = random.Random(seed)

    def maybe(v, p=0.15):
        return None if rng.random() < p else v

    def blob():
        return os.urandom(rng.choice([0, 0, 1, 3, 8, 31, 32, 33, 64, 100]))

    def entry():
        if rng.random() < 0.05:
            return None  # a null struct entry: skipped
        return {"key": maybe(rng.choice(["k", "", "long-key-" * 5]), 0.05), "value": maybe(blob(), 0.2)}

    return pa.RecordBatch.from_arrays([
        pa.array([maybe(blob()) for _ in range(n)], pa.binary()),
        pa.array([maybe(blob(), 0.3) for _ in range(n)], pa.binary()),
        pa.array([maybe(rng.choice(["a", "topic-b", "ü-topic", ""])) for _ in range(n)], pa.string()),
        pa.array([maybe(rng.choice([0, 1, 2, -1, 2**31 - 1, -2**31])) for _ in range(n)], pa.int32()),
        pa.array([maybe(rng.choice([0, 1, -1, 1_700_000_000_123, 2**62, -2**63])) for _ in range(n)], pa.int64()),
        pa.array([maybe([entry() for _ in range(rng.randrange(0, 4))]) for _ in range(n)], HEADERS_TYPE),
    ], names=list(COLUMNS))


@pytest.mark.parametrize("seed", range(4))
def test_random_columns_agree(seed):
    b = random_batch(500, seed)
    got = fingerprints(b)
    assert got.dtype == np.uint64 and len(got) == 500
    assert np.array_equal(got, fingerprints_py(b))


def test_every_subset_of_columns_agrees():
    b = random_batch(200, 7)
    rng = random.Random(3)
    for _ in range(12):
        chosen = [c for c in COLUMNS if rng.random() < 0.5] or ["value"]
        sub = b.select(chosen)
        assert np.array_equal(fingerprints(sub), fingerprints_py(sub)), chosen


def test_sliced_and_large_layouts_agree_with_the_plain_rows():
    b = random_batch(300, 11)
    sliced = b.slice(41, 200)
    want = fingerprints(b)[41:241]  # the same rows hash the same whatever the physical layout
    assert np.array_equal(fingerprints(sliced), want)
    assert np.array_equal(fingerprints_py(sliced), want)
    large_headers = pa.large_list(pa.struct([("key", pa.large_string()), ("value", pa.large_binary())]))
    large = pa.RecordBatch.from_arrays([
        sliced.column("value").cast(pa.large_binary()), sliced.column("key").cast(pa.large_binary()),
        sliced.column("topic").cast(pa.large_string()), sliced.column("partition"), sliced.column("timestamp"),
        sliced.column("headers").cast(large_headers)], names=list(COLUMNS))
    assert np.array_equal(fingerprints(large), want)
    assert np.array_equal(fingerprints_py(large), want)


def test_chunked_and_dictionary_columns_through_the_buffers():
    b = random_batch(120, 5)
    want = fingerprints(b.select(["value", "topic"]))
    out = np.empty(120, np.uint64)
    values = pa.chunked_array([b.column("value").slice(0, 50), b.column("value").slice(50)])
    topics = b.column("topic").dictionary_encode()
    native().fingerprints_into(out, library.column(values), None, library.column(topics), None, None, None)
    assert np.array_equal(out, want)


def test_one_row_by_hand_from_the_specification():
    def rotl(x: int, r: int) -> int:
        return ((x << r) | (x >> (64 - r))) & M64

    acc = 0x27D4EB2F165667C5
    # key b"k" (seed 3), a null value (seed 4), timestamp 7 (seed 6): in the fold's column order
    for h in (xxhash.xxh64_intdigest(b"k", 3), 0x9E3779B97F4A7C15 ^ 4,
              xxhash.xxh64_intdigest((7).to_bytes(8, "little", signed=True), 6)):
        acc = (rotl(acc ^ (h * 0xC2B2AE3D27D4EB4F & M64), 31) * 0x9E3779B97F4A7C15 + 0x85EBCA77C2B2AE63) & M64
    acc ^= acc >> 33
    acc = acc * 0xC2B2AE3D27D4EB4F & M64
    acc ^= acc >> 29
    acc = acc * 0x165667B19E3779F9 & M64
    acc ^= acc >> 32
    b = pa.RecordBatch.from_arrays([pa.array([None], pa.binary()), pa.array([b"k"]), pa.array([7], pa.int64())],
                                   names=["value", "key", "timestamp"])
    assert int(fingerprints(b)[0]) == int(fingerprints_py(b)[0]) == acc


# --- occurrences ------------------------------------------------------------------------------

def by_definition(calls):
    """Per call, each row's count of earlier equal fingerprints (all calls), row by row with a dict."""
    seen: dict[int, int] = {}
    out = []
    for fps in calls:
        row = []
        for f in fps.tolist():
            row.append(seen.get(f, 0))
            seen[f] = seen.get(f, 0) + 1
        out.append(np.array(row, dtype=np.uint32))
    return out, len(seen)


@pytest.mark.parametrize("seed", range(2))
def test_occurrences_agree_with_the_definition_and_the_reference(seed):
    rng = np.random.default_rng(seed)
    pool = np.concatenate([EDGE, rng.integers(0, M64, 3000, dtype=np.uint64, endpoint=True)])
    calls = []
    for k in range(10):
        size = int(rng.choice([0, 1, 7, 500, 4000, 20000]))
        fps = rng.choice(pool[: int(rng.integers(1, len(pool)))], size).astype(np.uint64)  # many repeats
        if k % 3 == 0 and size:
            fps[rng.integers(0, size, 5)] = rng.choice(EDGE, 5)
        calls.append(fps)
    want, distinct = by_definition(calls)
    c, ref = native().Occurrences(), _Occurrences()
    for fps, w in zip(calls, want):
        a = c.number(fps)
        assert a.dtype == np.uint32 and np.array_equal(a, w)
        assert np.array_equal(ref.number(fps), w)
    assert len(c) == distinct


def test_occurrences_edge_keys_zero_and_max():
    c = native().Occurrences()  # an empty slot is marked by its count, so the key 0 is a key like any other
    assert len(c) == 0 and c.number(np.zeros(0, np.uint64)).tolist() == []
    assert c.number(np.array([0, M64, 0, 0, M64, 5, 0], np.uint64)).tolist() == [0, 0, 1, 2, 1, 0, 3]
    assert c.number(np.array([M64, 0, 7], np.uint64)).tolist() == [2, 4, 0]
    assert len(c) == 4


def test_occurrences_keep_their_counts_while_the_table_grows():
    c, ref = native().Occurrences(), _Occurrences()
    seq = np.arange(100_000, dtype=np.uint64)
    high = np.arange(30_000, dtype=np.uint64) << np.uint64(40)  # differ only in their high bits
    for fps in (seq, high, seq[::-1].copy(), high[:1000], np.concatenate([seq[:10], EDGE])):
        assert np.array_equal(c.number(fps), ref.number(fps))
    assert len(c) == 100_000 + 30_000 - 1 + 4  # high[0] == 0 is in seq; EDGE adds 4 new
    assert c.nbytes >= len(c) * 16 / 0.7


def test_occurrences_refuse_arrays_of_the_wrong_kind():
    c = native().Occurrences()
    for bad in (np.array([1, 2], np.int64), np.array([1, 2], np.uint32), np.arange(6, dtype=np.uint64)[::2],
                np.zeros((2, 2), np.uint64), b"12345678", [1, 2]):
        with pytest.raises(TypeError):
            c.number(bad)
    assert len(c) == 0
    base = np.array([1, 2, 1, 2], dtype=np.uint64)
    assert c.number(base[1:]).tolist() == [0, 0, 1]  # an offset view is contiguous: accepted


def test_occurrences_refuse_concurrent_calls_or_run_them_whole():
    c = native().Occurrences()
    big = np.random.default_rng(0).integers(0, 1000, 2_000_000, dtype=np.uint64)
    errors = []

    def run():
        try:
            c.number(big)
        except RuntimeError as e:
            errors.append(e)

    threads = [threading.Thread(target=run) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all("in use" in str(e) for e in errors)
    done = 3 - len(errors)  # every call that ran counted all its rows, none half
    assert c.number(big[:1])[0] == done * int((big == big[0]).sum())


# --- unit digest ------------------------------------------------------------------------------

def by_definition_digest(fps, occs, seed=0):
    acc = seed
    for f, o in zip(fps.tolist(), occs.tolist()):
        h = f ^ (o * 0x9E3779B97F4A7C15 & M64)
        h ^= h >> 33
        h = h * 0xC2B2AE3D27D4EB4F & M64
        h ^= h >> 29
        h = h * 0x165667B19E3779F9 & M64
        h ^= h >> 32
        acc += h
    return acc & M64


def test_mix_pairs_native_and_reference_paths_agree(monkeypatch):
    rng = np.random.default_rng(5)
    fps = np.concatenate([EDGE, rng.integers(0, M64, 5000, dtype=np.uint64, endpoint=True)])
    occs = rng.integers(0, 2**32, len(fps), dtype=np.uint64).astype(np.uint32)
    occs[:3] = [0, 2**32 - 1, 1]
    seeds = (0, 1, M64, 2**63 + 17)
    fast = [mix_pairs(fps, occs, s) for s in seeds]
    short = mix_pairs(fps[:200], occs[:200], 9)
    empty = mix_pairs(np.zeros(0, np.uint64), np.zeros(0, np.uint32), 42)
    monkeypatch.setattr(library, "module", lambda: None)  # the numpy reference path of fingerprint.py
    assert fingerprint.new_occurrences().__class__ is _Occurrences
    assert fast == [mix_pairs(fps, occs, s) for s in seeds]
    assert all(0 <= d <= M64 for d in fast)
    assert short == mix_pairs(fps[:200], occs[:200], 9) == by_definition_digest(fps[:200], occs[:200], 9)
    assert empty == 42
    monkeypatch.undo()
    assert native().unit_digest(fps, occs) == fast[0]  # the seed defaults to 0
    assert native().unit_digest(fps, occs, seed=-1) == fast[2]  # taken mod 2**64


def test_unit_digest_refuses_mismatched_arrays():
    fps = np.arange(3, dtype=np.uint64)
    with pytest.raises(ValueError, match="occs has 2 rows, expected 3"):
        native().unit_digest(fps, np.zeros(2, np.uint32))
    with pytest.raises(TypeError):
        native().unit_digest(fps, np.zeros(3, np.uint64))
    with pytest.raises(TypeError):
        native().unit_digest(fps.astype(np.int64), np.zeros(3, np.uint32))
    with pytest.raises(TypeError):
        native().unit_digest(fps, np.zeros(3, np.uint32), 1.5)
