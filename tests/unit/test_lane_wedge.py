"""Tier 1: a lane producer that wedged (librdkafka #5456 after a broker restart) gets the process's older lane
producers replaced at their next unit, instead of each wedging in turn for the call's whole bound.

Scenario 06's exactly-once case shows the cost on the real broker: before, most of the 8 lanes wedged one after
the other (12 s each) after the restart; here the pool's rule is pinned down with stand-in clients.
"""

from __future__ import annotations

import pytest

from spark_recoverable_sink.config import SinkConfig
from spark_recoverable_sink.delivery.exactly_once import lane as lanes_mod


class _Client:
    def close(self):
        pass


@pytest.fixture
def pool(monkeypatch):
    monkeypatch.setattr(lanes_mod, "marker_topic_id", lambda config, timeout_s: "id")
    monkeypatch.setattr(lanes_mod, "open_engine", lambda config, conf, error_cb=None: _Client())
    monkeypatch.setattr("confluent_kafka.Consumer", lambda conf: _Client())
    cfg = SinkConfig.build("w", {"bootstrap.servers": "127.0.0.1:1"}, "/tmp/unused-w", topic="t",
                           guarantee="exactly_once")
    return lanes_mod.LanePool(cfg)


def test_lanes_born_before_a_wedge_are_replaced_at_their_next_use_and_later_ones_kept(pool):
    a, b, c = pool.get("a"), pool.get("b"), pool.get("c")
    c.state, c.owner = lanes_mod.LaneState.OPEN, ("slot", "attempt")  # a transaction open: never swapped under it
    pool.drop("a", wedged=True)
    assert pool.get("b") is not b, "a lane born before the wedge is replaced"
    assert pool.get("c") is c, "a lane with its transaction open is left to its unit"
    fresh = pool.get("a")
    assert fresh is not a and pool.get("a") is fresh and pool.get("b") is pool.get("b"), "born after: kept"


def test_a_drop_for_another_reason_replaces_no_other_lane(pool):
    b = pool.get("b")
    pool.drop("a")
    assert pool.get("b") is b
