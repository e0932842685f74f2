"""Tier 1: sub-units of a unit too large for one transaction (delivery/exactly_once/subunits.py)."""

from __future__ import annotations

import numpy as np
import pytest

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


def _signed(body: str) -> str:
    import zlib

    return f'{body[:-1]},"c":"{zlib.crc32(body.encode()):08x}"}}'


def test_partial_markers_round_trip_and_anything_else_is_refused_not_read_as_none():
    p = Partial(41, 2, 7, 0xFEDCBA9876543210)
    text = encode_partial(p)
    assert decode_partial(text) == p
    assert decode_partial(text + "\0") == p and decode_partial(text + "\0xx\udcff") == p  # the terminator ends it
    assert decode_partial("") is None and decode_partial(None) is None and decode_partial("\0junk") is None
    flipped = text.replace('"b":41', '"b":42')
    assert flipped != text
    for bad, why in [("x", "not a partial"), ("{}", "not a partial"), ("[1]", "not a partial"),
                     (text + "xx", "not a partial"), (flipped, "checksum"),
                     ('{"rks":1,"b":1,"k":0,"K":2,"d":"0"}', "not a partial"),  # no checksum
                     (_signed('{"rks":2,"b":1,"k":0,"K":2,"d":"0"}'), "format 2"),
                     (_signed('{"rks":1,"b":1,"k":6,"K":7,"d":"0"}'), "out of range"),
                     (_signed('{"rks":1,"b":1,"k":"a","K":7,"d":"0"}'), "not a partial"),
                     (_signed('{"rks":1,"k":0,"K":2,"d":"0"}'), "not a partial"),
                     (_signed('{"rks":1,"b":-1,"k":0,"K":2,"d":"0"}'), "out of range")]:
        with pytest.raises(ValueError, match=why):
            decode_partial(bad)


def test_a_partial_marker_rides_on_the_lanes_unchanged_offset_and_reads_back_with_it():
    from spark_recoverable_sink.delivery.exactly_once.markers import decode_offset, encode_offset

    p = Partial(9, 1, 4, 0x1234)
    m = decode_offset(encode_offset(8, 77), encode_partial(p))
    assert (m.batch, m.digest32, m.partial, m.latest) == (8, 77, p, 9)
    assert m.proves(8, 77)  # the complete marker of batch 8 still proves batch 8
    assert m != decode_offset(encode_offset(8, 77))  # a part committed elsewhere is a move of the lane
    first = decode_offset(0, encode_partial(Partial(0, 0, 2, 5)))  # the run's first batch, in part
    assert (first.batch, first.latest) == (-1, 0)
    assert decode_offset(0) is None and decode_offset(0, "") is None
    with pytest.raises(ValueError):
        decode_offset(encode_offset(8, 77), "not ours")


def test_a_partial_marker_record_holds_the_lanes_last_complete_unit_and_is_checked():
    from spark_recoverable_sink.delivery.exactly_once.markers import decode_record
    from spark_recoverable_sink.delivery.exactly_once.subunits import encode_partial_record

    p = Partial(12, 3, 9, 2**64 - 5)
    raw = encode_partial_record((11, 0xABCDEF01), p, "run-1", 1_700_000_000_000)
    m, ms = decode_record(raw)
    assert (m.batch, m.digest32, m.partial, m.run, m.source, ms) == (11, 0xABCDEF01, p, "run-1", "record",
                                                                     1_700_000_000_000)
    none, _ = decode_record(encode_partial_record(None, p, "r", 1))
    assert (none.batch, none.latest) == (-1, 12)
    with pytest.raises(ValueError, match="checksum"):
        decode_record(raw[:-1] + bytes([raw[-1] ^ 1]))
    with pytest.raises(ValueError, match="checksum"):
        decode_record(raw[:20])


def test_the_committer_publishes_the_rest_of_a_batch_its_lane_committed_in_part():
    from spark_recoverable_sink.config import SinkConfig
    from spark_recoverable_sink.delivery.exactly_once.markers import Marker
    from spark_recoverable_sink.delivery.exactly_once.commit import MISMATCH, SKIPPED, Committer, Unit
    from spark_recoverable_sink.wal.format import AttemptKey

    cfg = SinkConfig.build("parts", {"bootstrap.servers": "127.0.0.1:1"}, "/tmp/unused-parts", topic="t",
                           guarantee="exactly_once")
    c = Committer(cfg)

    def unit(batch, own):
        return Unit(None, AttemptKey(batch, 0, 1), "r", rows=5, chunks=[], digest=42, own=own)

    in_part = Marker(4, 7, partial=Partial(5, 0, 3, 11))
    assert c.decide(unit(5, True), in_part) is None  # the rest of batch 5 is published (.parts)
    assert c.decide(unit(6, True), in_part) is None
    assert c.decide(unit(4, False), Marker(4, 42, partial=Partial(5, 0, 3, 11))) == SKIPPED
    assert c.decide(unit(3, False), in_part) == SKIPPED  # batch 5 began: batch 3 ended before it
    mine = unit(3, True)
    assert c.decide(mine, in_part) == MISMATCH and "later batch (5)" in mine.why
    c.close()


def test_a_new_lane_count_is_refused_for_a_batch_a_lane_committed_only_in_part(monkeypatch):
    import pytest

    from spark_recoverable_sink.config import SinkConfig
    from spark_recoverable_sink.delivery.exactly_once import plan
    from spark_recoverable_sink.delivery.exactly_once.markers import Marker
    from spark_recoverable_sink.errors import ConfigError

    cfg = SinkConfig.build("parts", {"bootstrap.servers": "127.0.0.1:1"}, "/tmp/unused-parts", topic="t",
                           guarantee="exactly_once", exactly_once_lanes=4)
    monkeypatch.setattr(plan, "lane_markers", lambda *a, **k: {0: Marker(-1, 0, partial=Partial(7, 0, 2, 1)),
                                                               1: None})
    with pytest.raises(ConfigError, match=r"lanes \[0\] hold batch 7"):
        plan._check_change(cfg, "r", 7, plan.Plan(0, 2), 1.0, records={})  # no marker record: the offset's part
    plan._check_change(cfg, "r", 8, plan.Plan(0, 2), 1.0, records={})  # a later batch: nothing of it was produced


def test_a_unit_that_fits_one_transaction_stays_whole_unless_a_try_of_it_failed():
    from spark_recoverable_sink.delivery.exactly_once.subunits import PARTS_RATE, in_parts, part_bytes, whole_limit

    assert whole_limit(60000) == 60 * PARTS_RATE  # 960 MiB
    assert not in_parts(500 << 20, 60000, False)  # a lane of 500 MiB: one transaction, as before parts
    assert in_parts(500 << 20, 60000, True)  # its whole try failed (a slow broker): parts of SUB_UNIT_BYTES
    assert bucket_count(500 << 20, part_bytes(500 << 20, 60000)) == 16
    assert in_parts(2 << 30, 60000, False)  # above the limit: parts at once, of a quarter of it
    assert bucket_count(2 << 30, part_bytes(2 << 30, 60000)) == 9
    assert not in_parts(SUB_UNIT_BYTES, 60000, True)  # never parts of a unit no larger than one part
    assert whole_limit(1000) == SUB_UNIT_BYTES
