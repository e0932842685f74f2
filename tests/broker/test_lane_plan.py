"""The lane plan on the real broker: a run's lane count pinned, changed only from a batch no lane committed.

Each test has a marker topic of its own; lane markers are set as a lane's
transaction sets them (the committed offset of the lane's group), by a plain
commit, so that no Spark is needed (tests/spark/test_exactly_once_resplit.py
has the end-to-end case).
"""

from __future__ import annotations

import dataclasses
import uuid

import pytest

from spark_recoverable_sink.delivery.admin import client_conf
from spark_recoverable_sink.delivery.exactly_once.markers import encode_offset, encode_record
from spark_recoverable_sink.delivery.exactly_once.names import lane_id
from spark_recoverable_sink.delivery.exactly_once.plan import Plan, forget_plans, pin_lanes, plan_group
from spark_recoverable_sink.delivery.exactly_once.topic import marker_topic_id
from spark_recoverable_sink.errors import ConfigError, MarkerError

from .test_exactly_once import _eo

pytestmark = pytest.mark.broker


def _expire(cfg, *groups: str) -> None:
    """What the broker does ``offsets.retention.minutes`` after a group's last commit: its offsets are gone."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": cfg.producer_conf()["bootstrap.servers"]})
    for _g, fut in admin.delete_consumer_groups(list(groups), request_timeout=30).items():
        fut.result(60)


def _record(cfg, key: str, value: bytes) -> None:
    """A record in the marker topic, as a lane's transaction writes its marker record (here without one)."""
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": cfg.producer_conf()["bootstrap.servers"]})
    p.produce(cfg.marker_topic, value, key, partition=0)
    assert p.flush(30) == 0


def _commit(cfg, group: str, offset: int) -> None:
    from confluent_kafka import Consumer, TopicPartition

    conf = client_conf(cfg)
    conf.update({"group.id": group, "enable.auto.commit": "false"})
    c = Consumer(conf)
    try:
        c.commit(offsets=[TopicPartition(cfg.marker_topic, 0, offset)], asynchronous=False)
    finally:
        c.close()


@pytest.fixture
def cfg(broker, topic, tmp_path):
    c = _eo(broker.bootstrap, str(tmp_path), topic, marker_topic=f"rks-plan-{uuid.uuid4().hex[:6]}",
            exactly_once_lanes=4)
    marker_topic_id(c, 30.0)  # created, as the driver's first check does
    forget_plans()
    yield c
    forget_plans()


def test_the_first_batch_pins_the_lane_count_and_a_new_driver_reads_it(cfg):
    assert pin_lanes(cfg, "r1", 3) == Plan(3, 4)
    forget_plans()  # a new driver process
    assert pin_lanes(cfg, "r1", 7) == Plan(3, 4), "the pinned plan is read back, not pinned anew"
    assert pin_lanes(cfg, "r2", 0) == Plan(0, 4), "each run has its own plan"


def test_another_lane_count_is_refused_for_a_batch_a_lane_committed_and_taken_from_the_next(cfg):
    pin_lanes(cfg, "r", 0)
    _commit(cfg, lane_id(cfg.name, "r", 2), encode_offset(5, 0xABCD))  # lane 2 committed batch 5
    wider = dataclasses.replace(cfg, exactly_once_lanes=8)
    forget_plans()
    with pytest.raises(ConfigError, match=r"exactly_once_lanes=4.*lanes \[2\]"):
        pin_lanes(wider, "r", 5)  # a re-run of batch 5 with 8 lanes
    assert pin_lanes(cfg, "r", 5) == Plan(0, 4), "the refusal changed nothing"
    assert pin_lanes(wider, "r", 6) == Plan(6, 8), "batch 6: no lane committed it, the count may change"
    forget_plans()
    _commit(cfg, lane_id(cfg.name, "r", 7), encode_offset(6, 1))  # lane 7 of the 8 committed batch 6
    with pytest.raises(ConfigError, match=r"exactly_once_lanes=8.*lanes \[7\]"):
        pin_lanes(cfg, "r", 6)  # back to 4 lanes for a re-run of batch 6: refused


def test_a_run_never_changes_to_or_from_spark_s_own_split(cfg):
    pin_lanes(cfg, "r", 0)
    forget_plans()
    with pytest.raises(ConfigError, match="exactly_once_lanes=0"):
        pin_lanes(dataclasses.replace(cfg, exactly_once_lanes=0), "r", 9)


def test_the_plan_group_is_no_lane_s(cfg):
    assert plan_group(cfg, "r") == f"rks-eo-plan.{cfg.name}:r"
    assert plan_group(cfg, "r") not in {lane_id(cfg.name, "r", n) for n in range(8)}


def test_auto_pins_the_cores_at_the_run_s_first_batch_and_keeps_the_run_s_plan_afterwards(cfg):
    auto = dataclasses.replace(cfg, exactly_once_lanes=None)
    asked: list[int] = []

    def cores(n: int | None):
        return lambda: asked.append(1) or n

    assert pin_lanes(auto, "r1", 0, cores=cores(2)) == Plan(0, 2), "a new run: the cores now"
    forget_plans()  # a restarted driver on a wider cluster keeps the run's lanes
    assert pin_lanes(auto, "r1", 4, cores=cores(16)) == Plan(0, 2)
    assert len(asked) == 1, "the cores are asked only for a run without a plan"
    assert pin_lanes(auto, "r2", 0, cores=cores(None)) == Plan(0, 8), "cores not told: 8 lanes"
    pin_lanes(cfg, "r3", 0)  # a run pinned with exactly_once_lanes=4
    forget_plans()
    assert pin_lanes(auto, "r3", 7, cores=cores(2)) == Plan(0, 4), "auto adopts an explicit run's count"


def test_an_explicit_count_after_auto_is_refused_for_a_batch_a_lane_committed(cfg):
    auto = dataclasses.replace(cfg, exactly_once_lanes=None)
    pin_lanes(auto, "r", 0, cores=lambda: 2)
    _commit(cfg, lane_id(cfg.name, "r", 1), encode_offset(3, 1))  # lane 1 of 2 committed batch 3
    forget_plans()
    with pytest.raises(ConfigError, match=r"exactly_once_lanes=2.*lanes \[1\]"):
        pin_lanes(cfg, "r", 3)  # its re-run with exactly_once_lanes=4


def test_auto_refuses_a_run_without_a_plan_whose_lanes_committed(cfg):
    """A run from before plans (8 lanes, the former default) or idle past the offsets' retention: "auto" on 2 cores
    would re-split a batch its lanes committed otherwise (lane 1 of 2 behind would publish what lane 5 of 8 has)."""
    auto = dataclasses.replace(cfg, exactly_once_lanes=None)
    _commit(cfg, lane_id(cfg.name, "old", 5), encode_offset(3, 1))  # lane 5 committed batch 3; no plan
    with pytest.raises(ConfigError, match=r"no lane plan, yet lanes \[5\] committed.*set exactly_once_lanes"):
        pin_lanes(auto, "old", 3, cores=lambda: 2)
    assert pin_lanes(dataclasses.replace(cfg, exactly_once_lanes=8), "old", 3) == Plan(3, 8), "told: pinned"
    forget_plans()
    assert pin_lanes(auto, "old", 4, cores=lambda: 2) == Plan(3, 8), "then auto adopts it"


def test_a_run_stopped_past_the_offsets_retention_keeps_its_lane_count_from_the_plan_record(cfg):
    """auto on 2 cores, lane 0 committed batch 3 (its marker record stays, its offset and the plan's expire);
    restarted on 4 cores: the plan record keeps 2 lanes, so no lane 2 or 3 publishes what lane 0 has."""
    auto = dataclasses.replace(cfg, exactly_once_lanes=None)
    assert pin_lanes(auto, "r", 0, cores=lambda: 2) == Plan(0, 2)
    _record(cfg, lane_id(cfg.name, "r", 0), encode_record(3, 100, 0xABCD, "r", 1))
    _expire(cfg, plan_group(cfg, "r"))
    forget_plans()  # the restarted driver
    assert pin_lanes(auto, "r", 3, cores=lambda: 4) == Plan(0, 2), "the plan record stands in for its offset"
    forget_plans()
    wider = dataclasses.replace(cfg, exactly_once_lanes=4)
    _expire(cfg, plan_group(cfg, "r"))
    with pytest.raises(ConfigError, match=r"exactly_once_lanes=2.*lanes \[0\]"):
        pin_lanes(wider, "r", 3)  # an explicit change under a batch lane 0's record shows committed


def test_auto_refuses_a_run_whose_plan_is_lost_when_a_lane_s_marker_record_shows_a_commit(cfg):
    """No plan offset or record, no lane offset (all expired or never there): a lane's marker record, which does
    not expire, still shows the run committed batches, and "auto" refuses before anything is produced."""
    auto = dataclasses.replace(cfg, exactly_once_lanes=None)
    _record(cfg, lane_id(cfg.name, "gone", 11), encode_record(3, 100, 0xABCD, "gone", 1))
    with pytest.raises(ConfigError, match=r"no lane plan, yet lanes \[11\] committed"):
        pin_lanes(auto, "gone", 3, cores=lambda: 4)


def test_a_plan_key_that_holds_no_plan_record_is_refused(cfg):
    _record(cfg, plan_group(cfg, "r"), b"not a plan")
    with pytest.raises(MarkerError, match="cannot be proven"):
        pin_lanes(dataclasses.replace(cfg, exactly_once_lanes=None), "r", 0, cores=lambda: 2)


def test_a_missing_marker_topic_reads_as_no_records_at_once(cfg):
    """A marker topic not created yet holds no marker: read as none, not waited on until the read's bound."""
    from spark_recoverable_sink.delivery.exactly_once.marker_reads import MarkerReader

    reader = MarkerReader(dataclasses.replace(cfg, marker_topic=f"rks-absent-{uuid.uuid4().hex[:6]}"))
    try:
        assert reader.latest_values(5.0) == {}
        assert reader.record(lane_id(cfg.name, "r", 0), 5.0) is None
    finally:
        reader.close()


def test_the_marker_topic_is_read_from_its_log_start_when_its_first_records_were_deleted(cfg):
    """Records before the log start are gone: the first read starts at the log start as the broker gives it, and a
    later read goes on from where the last one stopped. (A compacted topic refuses DeleteRecords, so the reader is
    given a topic of the delete policy here: the reader reads either alike.)"""
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    from spark_recoverable_sink.delivery.exactly_once.marker_reads import MarkerReader

    admin = AdminClient({"bootstrap.servers": cfg.producer_conf()["bootstrap.servers"]})
    cfg = dataclasses.replace(cfg, marker_topic=f"rks-deletable-{uuid.uuid4().hex[:6]}")
    for fut in admin.create_topics([NewTopic(cfg.marker_topic, 1, 1)]).values():
        fut.result(30)
    for n in range(3):
        _record(cfg, lane_id(cfg.name, "r", n), encode_record(n, 10, 0xAB, "r", 1))
    for fut in admin.delete_records([TopicPartition(cfg.marker_topic, 0, 2)], request_timeout=30).values():
        fut.result(60)  # offsets 0 and 1 (lanes 0 and 1) deleted
    reader = MarkerReader(cfg)
    try:
        assert sorted(reader.latest_values(10.0)) == [lane_id(cfg.name, "r", 2)]
        _record(cfg, lane_id(cfg.name, "r", 3), encode_record(3, 10, 0xAB, "r", 1))
        assert sorted(reader.latest_values(10.0)) == [lane_id(cfg.name, "r", n) for n in (2, 3)]
        assert reader.record(lane_id(cfg.name, "r", 3), 10.0)[0].batch == 3
    finally:
        reader.close()


def test_lane_markers_read_at_once_are_each_lane_s_own_and_an_unreadable_one_is_raised(cfg):
    """Many lanes' offsets read at once: each lane gets its own group's marker; one whose offset metadata is not a
    partial marker raises MarkerError naming that lane."""
    from confluent_kafka import Consumer, TopicPartition

    from spark_recoverable_sink.delivery.exactly_once.marker_reads import lane_markers

    for n in range(0, 12, 2):
        _commit(cfg, lane_id(cfg.name, "r", n), encode_offset(n + 100, n + 1))
    got = lane_markers(cfg, "r", range(12), 10.0)
    assert sorted(got) == list(range(12))
    for n in range(12):
        m = got[n]
        assert (None if m is None else (m.batch, m.digest32)) == ((n + 100, n + 1) if n % 2 == 0 else None), n
    conf = client_conf(cfg)
    conf.update({"group.id": lane_id(cfg.name, "r", 5), "enable.auto.commit": "false"})
    c = Consumer(conf)
    try:
        c.commit(offsets=[TopicPartition(cfg.marker_topic, 0, encode_offset(3, 1), metadata="not a marker")],
                 asynchronous=False)
    finally:
        c.close()
    with pytest.raises(MarkerError, match=f"lane {lane_id(cfg.name, 'r', 5)}"):
        lane_markers(cfg, "r", range(12), 10.0)
