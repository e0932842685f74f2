"""Exactly-once through Spark: read_committed readers see every row once, through task retries and restarts."""

from __future__ import annotations

import os
import uuid

import pytest

from spark_recoverable_sink import RecoverableKafkaSink

from ..kafka_helpers import create_topic, read_topic
from .test_sink import _parquet_source

pytestmark = pytest.mark.spark

RC = "read_committed"


def _eo_sink(broker, tmp_path, topic, name=None, **kw):
    return RecoverableKafkaSink(name or f"eo-{uuid.uuid4().hex[:8]}", {"bootstrap.servers": broker.bootstrap},
                                topic=topic, wal_dir=str(tmp_path / "wal"), guarantee="exactly_once", **kw)


def _start(spark, fn, src: str, chk: str):
    stream = spark.readStream.schema("key string, value binary").option("maxFilesPerTrigger", 1).parquet(src)
    q = stream.writeStream.foreachBatch(fn).option("checkpointLocation", chk).trigger(availableNow=True).start()
    try:
        q.awaitTermination(600)
    except Exception:  # a failed query: the test reads q.exception()
        pass
    return q


def _assert_each_once(broker, topic: str, n: int) -> None:
    got = read_topic(broker.bootstrap, topic, expected=n, isolation=RC)
    keys = sorted(r.key for r in got.records)
    assert len(keys) == n, f"read_committed saw {len(keys)} records for {n} rows"
    assert keys == sorted(str(i).encode() for i in range(n)), "a row is missing or duplicated"
    assert len({r.rid for r in got.records}) == n


def _forget_last_commit(chk: str) -> int:
    """Make Spark re-run the last batch: as if the query stopped after the Kafka commit, before its own."""
    commits = os.path.join(chk, "commits")
    last = max(int(f) for f in os.listdir(commits) if f.isdigit())
    for f in (str(last), f".{last}.crc"):
        if os.path.exists(os.path.join(commits, f)):
            os.unlink(os.path.join(commits, f))
    return last


def test_clean_stream_is_visible_exactly_once(spark, broker, topic, tmp_path):
    n = 9000
    src = _parquet_source(spark, tmp_path, n, files=3)
    sink = _eo_sink(broker, tmp_path, topic, ack_timeout_s=30)
    q = _start(spark, sink, src, str(tmp_path / "chk"))
    assert q.exception() is None, q.exception()
    assert sum(r.acked for r in sink.reports) == n and sum(r.pending for r in sink.reports) == 0
    _assert_each_once(broker, topic, n)


@pytest.mark.parametrize("point", ["eo.before_transaction", "eo.committed"])
def test_worker_killed_around_the_transaction_is_retried_exactly_once(spark, broker, topic, tmp_path, hooks, point):
    n = 9000
    src = _parquet_source(spark, tmp_path, n, files=3)
    sink = _eo_sink(broker, tmp_path, topic, ack_timeout_s=30)
    crash = hooks.crash(point, batch=1)  # the worker of one task of batch 1 dies (os._exit); Spark retries it
    q = _start(spark, sink, src, str(tmp_path / "chk"))
    assert q.exception() is None, q.exception()
    assert crash.fired(), "the fault never fired"
    assert any(p.spark_attempt > 0 for r in sink.reports for p in r.task_reports)
    # the dead worker's WAL still holds the unit: whoever adopts it finds the lane's marker (or commits it once)
    sink.drain(spark, timeout_s=30)
    _assert_each_once(broker, topic, n)


def test_restart_from_the_checkpoint_skips_what_kafka_already_has(spark, broker, topic, tmp_path):
    n = 9000
    src = _parquet_source(spark, tmp_path, n, files=3)
    name, chk = f"eo-{uuid.uuid4().hex[:6]}", str(tmp_path / "chk")
    q1 = _start(spark, _eo_sink(broker, tmp_path, topic, name=name, ack_timeout_s=30), src, chk)
    assert q1.exception() is None, q1.exception()
    last = _forget_last_commit(chk)
    again = _eo_sink(broker, tmp_path, topic, name=name, ack_timeout_s=30)
    q2 = _start(spark, again, src, chk)
    assert q2.exception() is None, q2.exception()
    assert q2.id == q1.id and [r.batch_id for r in again.reports] == [last]
    assert again.reports[0].rows > 0 and again.reports[0].pending == 0
    _assert_each_once(broker, topic, n)


def test_a_rerun_with_other_rows_fails_loudly_instead_of_mixing(spark, broker, tmp_path):
    topic = f"eo-mix-{uuid.uuid4().hex[:6]}"
    create_topic(broker.bootstrap, topic, 2)
    n = 6000
    src = _parquet_source(spark, tmp_path, n, files=2)
    name, chk = f"eo-{uuid.uuid4().hex[:6]}", str(tmp_path / "chk")
    q1 = _start(spark, _eo_sink(broker, tmp_path, topic, name=name, ack_timeout_s=30), src, chk)
    assert q1.exception() is None, q1.exception()
    _forget_last_commit(chk)
    sink = _eo_sink(broker, tmp_path, topic, name=name, ack_timeout_s=30)

    def other_rows(df, batch_id):  # not the same rows: a non-deterministic step before the sink
        sink(df.filter("key != '1' and key != '4000' and key != '5999'"), batch_id)

    q2 = _start(spark, other_rows, src, chk)
    assert q2.exception() is not None, "the mismatched re-run was written"
    said = str(q2.exception())
    assert "ExactlyOnceMismatchError" in said and "must bring the same records" in said, said
    assert "another digest" in said  # the marker proves the unit by its records' ids, not only by its batch
    _assert_each_once(broker, topic, n)  # nothing of the mismatched re-run is visible


def test_a_write_without_a_run_id_names_records_by_position_and_a_retried_lane_is_skipped(spark, broker, topic,
                                                                                          tmp_path, hooks, caplog):
    """``write()`` without ``run_id`` of rows read in a fixed order is never run again: each Spark partition is a lane
    whose records are named by position (no content fingerprint per record). A task whose worker dies once its
    transaction committed is retried: the retry reads its partition in the same order, the lane's marker proves
    the unit (its digest over the positions), and nothing is published twice."""
    import logging

    from pyspark.sql import functions as F

    n = 6000
    df = spark.range(0, n, 1, 3).select(F.col("id").cast("string").cast("binary").alias("key"),
                                        F.concat(F.lit("v"), F.col("id").cast("string")).cast("binary").alias("value"))
    sink = _eo_sink(broker, tmp_path, topic, ack_timeout_s=30)
    crash = hooks.crash("eo.committed", batch=4, lane=1)
    with caplog.at_level(logging.INFO, logger="spark_recoverable_sink.sink"):
        report = sink.write(df, batch_id=4)
    said = [r.getMessage() for r in caplog.records if f"sink={sink.config.name} ids=" in r.getMessage()]
    assert said and "ids=position" in said[0] and "never run again" in said[0], said
    assert crash.fired(), "the fault never fired"
    assert any(p.spark_attempt > 0 for p in report.task_reports), "premise: a task was retried"
    sink.drain(spark, timeout_s=30)
    _assert_each_once(broker, topic, n)
