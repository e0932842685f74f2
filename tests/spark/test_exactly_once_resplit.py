"""Exactly-once when a re-run of a batch brings its records split otherwise (real Spark, Apache Kafka).

Spark's Kafka source does not give a Kafka partition the same Spark
partition when a batch is re-run from its offset log (measured: the first
run put Kafka partitions 3, 2, 1, 0 in Spark partitions 0..3, the re-run
0, 1, 2, 3). The sink re-splits every exactly-once batch into
``exactly_once_lanes`` partitions by Spark's hash of each record's key (its
``(topic, partition)`` when a partition column places it, its value when it
has no key), so a lane's unit holds the same records however the input was
split. Here the re-runs bring the same records in another number of
partitions and in reverse order, or after the topic gained partitions.
"""

from __future__ import annotations

import uuid

import pytest

from spark_recoverable_sink.delivery.exactly_once.plan import forget_plans
from spark_recoverable_sink.driver import split as split_module
from spark_recoverable_sink.errors import ExactlyOnceMismatchError

from ..kafka_helpers import create_topic, read_topic
from .test_exactly_once import _assert_each_once, _eo_sink
from ..record_ids import id_scope

pytestmark = pytest.mark.spark

N = 12000
SCHEMA = "key string, value binary"


def _rows(n: int) -> list[tuple[str, bytes]]:
    return [(str(i), f"value-{i % 97}".encode()) for i in range(n)]  # values repeat: only the key tells rows apart


def test_a_batch_rerun_split_otherwise_is_skipped_not_refused(spark, broker, tmp_path):
    topic = f"eo-resplit-{uuid.uuid4().hex[:6]}"
    create_topic(broker.bootstrap, topic, 4)
    sink = _eo_sink(broker, tmp_path, topic, ack_timeout_s=30, exactly_once_lanes=4)
    first = sink.write(spark.createDataFrame(_rows(N), SCHEMA).repartition(5), batch_id=2, run_id="resplit")
    assert first.acked == N and first.pending == 0
    again = sink.write(spark.createDataFrame(_rows(N)[::-1], SCHEMA).repartition(3), batch_id=2, run_id="resplit")
    assert again.pending == 0 and again.acked == 0, again  # every lane's marker proves its unit: all skipped
    _assert_each_once(broker, topic, N)


def test_auto_lanes_are_the_session_s_cores_pinned_for_the_run(spark, broker, tmp_path, monkeypatch):
    """``exactly_once_lanes`` unset ("auto"): one lane per core (local[2]: 2 lane tasks, not 8), kept by the run
    when a restarted driver sees more cores."""
    topic = f"eo-resplit-{uuid.uuid4().hex[:6]}"
    create_topic(broker.bootstrap, topic, 4)
    sink = _eo_sink(broker, tmp_path, topic, ack_timeout_s=30)
    cores = spark.sparkContext.defaultParallelism
    first = sink.write(spark.createDataFrame(_rows(N), SCHEMA).repartition(5), batch_id=0, run_id="auto")
    assert first.acked == N and len(first.task_reports) == cores == 2, first
    forget_plans()  # a new driver, on a wider cluster
    monkeypatch.setattr(split_module, "_lane_cores", lambda df: 4)
    again = sink.write(spark.createDataFrame(_rows(N)[::-1], SCHEMA).repartition(3), batch_id=0, run_id="auto")
    assert again.pending == 0 and again.acked == 0 and len(again.task_reports) == 2, again  # skipped
    _assert_each_once(broker, topic, N)
    fresh = sink.write(spark.createDataFrame(_rows(10), SCHEMA), batch_id=0, run_id="auto-new")
    assert len(fresh.task_reports) == 4, "a new run takes the cores of now"


def test_a_batch_that_failed_halfway_and_reruns_split_otherwise_ends_exactly_once(spark, broker, tmp_path, hooks):
    topic = f"eo-resplit-{uuid.uuid4().hex[:6]}"
    create_topic(broker.bootstrap, topic, 4)
    sink = _eo_sink(broker, tmp_path, topic, ack_timeout_s=30, exactly_once_lanes=4, settle_timeout_s=60)
    crashes = [hooks.crash("eo.before_commit", batch=2, lane=1) for _ in range(3)]  # every attempt of lane 1
    with pytest.raises(Exception):
        sink.write(spark.createDataFrame(_rows(N), SCHEMA).repartition(5), batch_id=2, run_id="half")
    assert all(c.fired() for c in crashes), "lane 1's task was not killed on each of its attempts"
    again = sink.write(spark.createDataFrame(_rows(N)[::-1], SCHEMA).repartition(3), batch_id=2, run_id="half")
    assert again.pending == 0, again
    _assert_each_once(broker, topic, N)


def test_a_rerun_with_a_record_changed_is_still_refused(spark, broker, tmp_path):
    topic = f"eo-resplit-{uuid.uuid4().hex[:6]}"
    create_topic(broker.bootstrap, topic, 2)
    sink = _eo_sink(broker, tmp_path, topic, ack_timeout_s=30, exactly_once_lanes=4)
    sink.write(spark.createDataFrame(_rows(N), SCHEMA), batch_id=0, run_id="changed")
    changed = [(k, b"changed" if k == "7" else v) for k, v in _rows(N)]
    with pytest.raises(Exception) as caught:
        sink.write(spark.createDataFrame(changed, SCHEMA).repartition(3), batch_id=0, run_id="changed")
    assert ExactlyOnceMismatchError.__name__ in str(caught.value), caught.value
    _assert_each_once(broker, topic, N)  # nothing of the changed re-run is visible


def test_no_resplit_keeps_sparks_partitions_as_lanes_and_refuses_a_rerun_split_otherwise(spark, broker, tmp_path):
    """``exactly_once_lanes=0``: no shuffle, one lane per Spark partition; a re-run in another split is refused."""
    topic = f"eo-nosplit-{uuid.uuid4().hex[:6]}"
    create_topic(broker.bootstrap, topic, 4)
    sink = _eo_sink(broker, tmp_path, topic, ack_timeout_s=30, exactly_once_lanes=0)
    df = spark.createDataFrame(_rows(N), SCHEMA).repartition(5)
    first = sink.write(df, batch_id=3, run_id="nosplit")
    assert first.acked == N and len(first.task_reports) == 5, first  # Spark's 5 partitions, no re-split
    again = sink.write(df, batch_id=3, run_id="nosplit")  # the same split: every unit proven, skipped
    assert again.acked == 0 and again.pending == 0, again
    with pytest.raises(Exception) as caught:
        sink.write(spark.createDataFrame(_rows(N)[::-1], SCHEMA).repartition(3), batch_id=3, run_id="nosplit")
    assert ExactlyOnceMismatchError.__name__ in str(caught.value), caught.value
    _assert_each_once(broker, topic, N)


def test_a_keys_records_go_through_one_lane_in_their_input_order(spark, broker, tmp_path):
    """Each key's records share a lane (the lane is in the id) and keep their input order in Kafka; records a
    partition column places share the lane of their (topic, partition)."""
    from pyspark.sql import functions as F

    topic = f"eo-keys-{uuid.uuid4().hex[:6]}"
    create_topic(broker.bootstrap, topic, 4)
    sink = _eo_sink(broker, tmp_path, topic, ack_timeout_s=30, exactly_once_lanes=4)
    df = spark.range(0, N, 1, 3).select(
        F.when(F.col("id") % 10 == 0, F.lit(None)).otherwise((F.col("id") % 40).cast("string")).alias("key"),
        F.col("id").cast("string").cast("binary").alias("value"),
        F.when(F.col("id") % 10 == 0, (F.col("id") % 4).cast("int")).alias("partition"))
    assert sink.write(df, batch_id=1, run_id="keys").acked == N
    got = read_topic(broker.bootstrap, topic, expected=N, isolation="read_committed").records
    assert len(got) == N
    lanes: dict[object, set] = {}
    last: dict[tuple, int] = {}
    for r in got:  # in offset order per partition
        lane = id_scope(r.rid)
        group = ("key", r.key) if r.key is not None else ("partition", r.partition)
        lanes.setdefault(group, set()).add(lane)
        seq = int(r.value)
        if r.key is not None:
            assert last.get((r.partition, r.key), -1) < seq, f"key {r.key!r}: {seq} after {last[(r.partition, r.key)]}"
            last[(r.partition, r.key)] = seq
    assert all(len(v) == 1 for v in lanes.values()), {k: v for k, v in lanes.items() if len(v) > 1}
    assert len({next(iter(v)) for v in lanes.values()}) == 4, "the keys spread over every lane"


def test_a_rerun_after_the_topic_gained_partitions_moves_no_record(spark, broker, tmp_path):
    """Lanes do not depend on the topic's partition count: a re-run of a committed batch after the topic grew is
    proven by its lanes' markers and skipped (the lanes of a destination partition would all have moved)."""
    from confluent_kafka.admin import AdminClient, NewPartitions

    topic = f"eo-grow-{uuid.uuid4().hex[:6]}"
    create_topic(broker.bootstrap, topic, 2)
    sink = _eo_sink(broker, tmp_path, topic, ack_timeout_s=30, exactly_once_lanes=4)
    assert sink.write(spark.createDataFrame(_rows(N), SCHEMA).repartition(5), batch_id=4, run_id="grow").acked == N
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_partitions([NewPartitions(topic, 6)])[topic].result(30)
    again = sink.write(spark.createDataFrame(_rows(N)[::-1], SCHEMA).repartition(3), batch_id=4, run_id="grow")
    assert again.acked == 0 and again.pending == 0 and again.skipped == N, again
    _assert_each_once(broker, topic, N)


def test_the_lane_pass_asks_no_broker_anything(spark, tmp_path):
    """Lanes are a JVM expression of each record: computing them needs no broker (a topic column's topics, a
    fresh worker during an outage). The re-split stage runs with no broker at all: every row in some lane,
    each (topic, key) in one."""
    from pyspark.sql import functions as F

    from spark_recoverable_sink.config import SinkConfig
    from spark_recoverable_sink.driver.split import _by_lane, _with_lane

    config = SinkConfig.build("nobroker", {"bootstrap.servers": "127.0.0.1:1"}, str(tmp_path / "wal"),
                              guarantee="exactly_once", exactly_once_lanes=4)
    df = spark.range(0, 6000, 1, 3).select(
        (F.col("id") % 97).cast("string").alias("key"), F.col("id").cast("string").alias("value"),
        F.concat(F.lit("t"), (F.col("id") % 3).cast("string")).alias("topic"))  # a topic column, no option
    lanes = _by_lane(_with_lane(df, config), config, 4).select("topic", "key", F.spark_partition_id().alias("lane"))
    rows = lanes.collect()
    assert len(rows) == 6000
    by_key: dict[tuple, set] = {}
    for r in rows:
        by_key.setdefault((r.topic, r.key), set()).add(r.lane)
    assert all(len(v) == 1 for v in by_key.values())
    assert {r.lane for r in rows} == {0, 1, 2, 3}


def test_a_committed_batch_is_refused_a_rerun_with_another_lane_count(spark, broker, tmp_path):
    """A re-run of a batch its lanes committed, with exactly_once_lanes changed in between, is refused before
    anything is produced: without the lane plan, the lanes the first run did not have (4..7) hold no marker and
    publish records lanes 0..3 already committed (duplicates to read_committed readers). Set back, the re-run is
    skipped. (DESIGN.md, "Units that do not depend on how Spark split the batch": the lane plan.)"""
    from spark_recoverable_sink.errors import ConfigError

    topic = f"eo-replan-{uuid.uuid4().hex[:6]}"
    create_topic(broker.bootstrap, topic, 4)
    sink = _eo_sink(broker, tmp_path, topic, ack_timeout_s=30, exactly_once_lanes=4, settle_timeout_s=60)
    first = sink.write(spark.createDataFrame(_rows(N), SCHEMA).repartition(5), batch_id=2, run_id="replan")
    assert first.acked == N and first.pending == 0
    wider = _eo_sink(broker, tmp_path, topic, ack_timeout_s=30, exactly_once_lanes=8, settle_timeout_s=60,
                     name=sink.name)
    with pytest.raises(ConfigError, match="exactly_once_lanes=4"):
        wider.write(spark.createDataFrame(_rows(N), SCHEMA).repartition(3), batch_id=2, run_id="replan")
    _assert_each_once(broker, topic, N)  # the refused re-run published nothing
    again = sink.write(spark.createDataFrame(_rows(N)[::-1], SCHEMA).repartition(3), batch_id=2, run_id="replan")
    assert again.pending == 0 and again.acked == 0, again
    _assert_each_once(broker, topic, N)
