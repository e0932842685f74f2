"""Tier 1: when the marker topic is checked (once per process), and what a task's driver id changes.

The checks themselves (exists, compacted, its id) run against the broker:
tests/broker/test_exactly_once_markers.py. Here the check is replaced by a
recording one, to pin down the caching rules.
"""

from __future__ import annotations

import pytest

from spark_recoverable_sink.config import SinkConfig
from spark_recoverable_sink.delivery.exactly_once import topic


@pytest.fixture
def checks(monkeypatch):
    """Every check made: the ``expect`` it was given; it answers with the id queued in ``ids``."""
    made: list[str | None] = []
    ids = ["id-1"]

    def check(config, timeout_s, expect):
        made.append(expect)
        return ids[0]

    monkeypatch.setattr(topic, "_check", check)
    topic.forget_marker_topics()
    yield made, ids
    topic.forget_marker_topics()


def _cfg(name: str = "mt") -> SinkConfig:
    return SinkConfig.build(name, {"bootstrap.servers": "127.0.0.1:1"}, "/tmp/unused-mt", topic="t",
                            guarantee="exactly_once")


def test_checked_once_per_process_and_again_after_a_failed_batch(checks):
    made, _ids = checks
    cfg = _cfg()
    assert topic.known_marker_topic_id(cfg) is None
    assert topic.marker_topic_id(cfg, 1.0) == "id-1" and topic.marker_topic_id(cfg, 1.0) == "id-1"
    assert made == [None]  # once; nobody's id to hold it to: a missing topic may be created
    assert topic.known_marker_topic_id(cfg) == "id-1"
    assert topic.known_marker_topic_id(_cfg("other-sink")) == "id-1"  # the topic's, whichever sink asks
    topic.forget_marker_topic(cfg)  # the driver after a failed batch: the next is a query's first
    assert topic.marker_topic_id(cfg, 1.0) == "id-1" and made == [None, None]


def test_a_task_carrying_the_drivers_id_holds_the_check_to_it(checks):
    made, ids = checks
    cfg = _cfg()
    topic.expect_marker_topic(cfg, "id-1")
    assert topic.marker_topic_id(cfg, 1.0) == "id-1" and made == ["id-1"]  # a missing topic is not created
    topic.expect_marker_topic(cfg, "id-1")  # the same topic: nothing checked again
    assert topic.marker_topic_id(cfg, 1.0) == "id-1" and made == ["id-1"]
    # The driver checked another topic of that name (a query restarted after the topic was deleted): this
    # worker's own check is forgotten, and the next one is held to the driver's id.
    ids[0] = "id-2"
    topic.expect_marker_topic(cfg, "id-2")
    assert topic.known_marker_topic_id(cfg) is None
    assert topic.marker_topic_id(cfg, 1.0) == "id-2" and made == ["id-1", "id-2"]
