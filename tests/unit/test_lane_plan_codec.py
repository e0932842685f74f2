"""Tier 1: a lane plan's offset (delivery/exactly_once/plan.py): what it holds, and what it cannot."""

from __future__ import annotations

import pytest

from spark_recoverable_sink.delivery.exactly_once.markers import MAX_BATCH
from spark_recoverable_sink.delivery.exactly_once.plan import (
    LANE_BITS,
    Plan,
    decode_plan,
    decode_plan_record,
    encode_plan,
    encode_plan_record,
)


@pytest.mark.parametrize("plan", [Plan(0, 0), Plan(0, 8), Plan(17, 1), Plan(MAX_BATCH, (1 << LANE_BITS) - 1)])
def test_a_plan_reads_back_from_its_offset(plan):
    off = encode_plan(plan)
    assert 0 < off < 1 << 63
    assert decode_plan(off) == plan


def test_no_offset_and_small_offsets_hold_no_plan():
    assert decode_plan(None) is None
    assert decode_plan(-1001) is None  # librdkafka's "no committed offset"
    assert decode_plan((1 << LANE_BITS) - 1) is None


@pytest.mark.parametrize("plan", [Plan(-1, 4), Plan(MAX_BATCH + 1, 4), Plan(0, 1 << LANE_BITS), Plan(0, -1)])
def test_what_an_offset_cannot_hold_is_refused(plan):
    with pytest.raises(ValueError):
        encode_plan(plan)


@pytest.mark.parametrize("plan", [Plan(0, 0), Plan(0, 8), Plan(17, 1), Plan(MAX_BATCH, (1 << LANE_BITS) - 1)])
def test_a_plan_reads_back_from_its_record(plan):
    assert decode_plan_record(encode_plan_record(plan)) == plan


def test_a_plan_record_is_read_strictly():
    raw = encode_plan_record(Plan(3, 4))
    for bad in (raw[:-1], raw + b"\0", raw[:6] + b"\x01" + raw[7:], b"RKSM" + raw[4:], b""):
        with pytest.raises(ValueError):
            decode_plan_record(bad)
