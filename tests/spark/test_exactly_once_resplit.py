"""Exactly-once when a re-run of a batch brings its records split otherwise (real Spark, Apache Kafka).

Spark's Kafka source does not give a Kafka partition the same Spark
partition when a batch is re-run from its offset log (measured: the first
run put Kafka partitions 3, 2, 1, 0 in Spark partitions 0..3, the re-run
0, 1, 2, 3). The sink re-splits every exactly-once batch by each record's
destination partition into ``exactly_once_lanes`` partitions, so a lane's
unit holds the same records however the input was split. Here the re-runs bring
the same records in another number of partitions and in reverse order.
"""

from __future__ import annotations

import uuid

import pytest

from spark_recoverable_sink.errors import ExactlyOnceMismatchError

from ..kafka_helpers import create_topic
from .test_exactly_once import _assert_each_once, _eo_sink

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


def test_a_batch_that_failed_halfway_and_reruns_split_otherwise_ends_exactly_once(spark, broker, tmp_path, hooks):
    topic = f"eo-resplit-{uuid.uuid4().hex[:6]}"
    create_topic(broker.bootstrap, topic, 4)
    sink = _eo_sink(broker, tmp_path, topic, ack_timeout_s=30, exactly_once_lanes=4, settle_timeout_s=60)
    crashes = [hooks.crash("eo.before_commit", batch=2, partition=1) for _ in range(3)]  # every attempt of lane 1
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
    assert first.acked == N and len(first.partition_reports) == 5, first  # Spark's 5 partitions, no re-split
    again = sink.write(df, batch_id=3, run_id="nosplit")  # the same split: every unit proven, skipped
    assert again.acked == 0 and again.pending == 0, again
    with pytest.raises(Exception) as caught:
        sink.write(spark.createDataFrame(_rows(N)[::-1], SCHEMA).repartition(3), batch_id=3, run_id="nosplit")
    assert ExactlyOnceMismatchError.__name__ in str(caught.value), caught.value
    _assert_each_once(broker, topic, N)
