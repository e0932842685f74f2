"""Tier 1: sub-units of a unit too large for one transaction (delivery/exactly_once/subunits.py)."""

from __future__ import annotations

import numpy as np

from spark_recoverable_sink.delivery.exactly_once.subunits import (
    SUB_UNIT_BYTES,
    Partial,
    bucket_count,
    buckets,
    decode_partial,
    encode_partial,
)
from spark_recoverable_sink.fingerprint import mix_pairs


def test_a_records_bucket_does_not_depend_on_order_and_buckets_sum_to_the_unit_digest():
    rng = np.random.default_rng(7)
    fps = rng.integers(0, 2**63, 20000, dtype=np.int64).astype(np.uint64)
    occs = (np.arange(20000) % 3).astype(np.uint32)
    b = buckets(fps, occs, 5)
    order = rng.permutation(20000)
    assert (buckets(fps[order], occs[order], 5) == b[order]).all()
    assert set(np.bincount(b).tolist()) and min(np.bincount(b)) > 3500  # spread over every bucket
    parts = sum(mix_pairs(fps[b == k], occs[b == k]) for k in range(5)) % (1 << 64)
    assert parts == mix_pairs(fps, occs)  # the partial markers' digests add up to the complete one's


def test_the_bucket_count_follows_the_units_size():
    assert bucket_count(0) == 1 and bucket_count(SUB_UNIT_BYTES) == 1
    assert bucket_count(SUB_UNIT_BYTES + 1) == 2 and bucket_count(10 * SUB_UNIT_BYTES) == 10
    assert (buckets(np.zeros(3, np.uint64), np.arange(3, dtype=np.uint32), 1) == 0).all()


def test_partial_markers_round_trip_and_anything_else_is_not_one():
    p = Partial(2, 7, 0xFEDCBA9876543210)
    assert decode_partial(encode_partial(p)) == p
    for bad in ("", None, "x", "{}", '{"rks":2,"k":0,"K":2,"d":"0"}', '{"rks":1,"k":6,"K":7,"d":"0"}',
                '{"rks":1,"k":"a","K":7,"d":"0"}', "[1]"):
        assert decode_partial(bad) is None, bad
