"""Tier 3: the sink on real Spark (local[2,3], task retries allowed) and the real broker."""

from __future__ import annotations

import datetime as dt
import os
import uuid

import pytest
from chispa import assert_df_equality
from pyspark.sql import functions as F
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from spark_recoverable_sink import RecoverableKafkaSink, SchemaError

from ..kafka_helpers import create_topic, read_topic

pytestmark = pytest.mark.spark

HEADERS = ArrayType(StructType([StructField("key", StringType()), StructField("value", BinaryType())]))


def _sink(broker, tmp_path, name=None, **kw):
    return RecoverableKafkaSink(name=name or f"s-{uuid.uuid4().hex[:8]}",
                                kafka_conf={"bootstrap.servers": broker.bootstrap},
                                wal_dir=str(tmp_path / "wal"), **kw)


def _records_df(spark, records):
    """Kafka records read back, as a DataFrame, for chispa comparisons."""
    schema = StructType([StructField("topic", StringType()), StructField("partition", IntegerType()),
                         StructField("key", BinaryType()), StructField("value", BinaryType())])
    rows = [(r.topic, r.partition, r.key, r.value) for r in records]
    return spark.createDataFrame(rows, schema)


def test_null_empty_binary_and_string_round_trip(spark, broker, topic, tmp_path):
    schema = StructType([StructField("key", StringType()), StructField("value", BinaryType()),
                         StructField("partition", IntegerType())])
    rows = [("k1", b"v1", 0), (None, b"v2", 0), ("", b"", 1), ("k4", None, 1), ("k\u00e9", b"\x00\xff", 2)]
    df = spark.createDataFrame(rows, schema)
    sink = _sink(broker, tmp_path, topic=topic)
    report = sink.write(df, batch_id=1)
    assert (report.rows, report.acked, report.pending) == (5, 5, 0)
    got = read_topic(broker.bootstrap, topic, expected=5)
    expected = spark.createDataFrame(
        [(topic, p, None if k is None else k.encode(), v) for k, v, p in rows],
        "topic string, partition int, key binary, value binary")
    assert_df_equality(_records_df(spark, got.records), expected, ignore_row_order=True)


def test_string_value_and_per_row_topic_partition_headers_timestamp(spark, broker, tmp_path):
    t1, t2 = f"a-{uuid.uuid4().hex[:6]}", f"b-{uuid.uuid4().hex[:6]}"
    create_topic(broker.bootstrap, t1, 2)
    create_topic(broker.bootstrap, t2, 3)
    ts = dt.datetime(2024, 5, 6, 7, 8, 9, 123000)
    df = (spark.range(300)
          .withColumn("topic", F.when(F.col("id") % 2 == 0, F.lit(t1)).otherwise(F.lit(t2)))
          .withColumn("partition", F.when(F.col("id") % 2 == 0, (F.col("id") % 2).cast("int"))
                      .otherwise((F.col("id") % 3).cast("int")))
          .withColumn("key", F.col("id").cast("string"))
          .withColumn("value", F.concat(F.lit("v"), F.col("id").cast("string")))
          .withColumn("headers", F.array(F.struct(F.lit("h").alias("key"),
                                                  F.col("id").cast("string").cast("binary").alias("value"))))
          .withColumn("timestamp", F.lit(ts).cast(TimestampType()))
          .drop("id"))
    sink = _sink(broker, tmp_path, name="perrow")
    report = sink.write(df, batch_id=3)
    assert report.rows == 300 and report.acked == 300
    got = read_topic(broker.bootstrap, [t1, t2], expected=300)
    assert len(got.distinct_ids()) == 300 and got.duplicates() == 0
    for r in got.records:
        i = int(r.key)
        assert r.topic == (t1 if i % 2 == 0 else t2)
        assert r.partition == (0 if i % 2 == 0 else i % 3)
        assert r.value == b"v%d" % i
        hdrs = dict(r.headers)
        assert hdrs["h"] == str(i).encode()
        assert hdrs["rks-id"].startswith(b"perrow:3:")
        assert r.timestamp == int(ts.replace(tzinfo=dt.datetime.now().astimezone().tzinfo).timestamp() * 1000)


def test_wrong_schema_fails_before_any_task_runs(spark, broker, topic, tmp_path):
    sink = _sink(broker, tmp_path, topic=topic)
    tracker = spark.sparkContext.statusTracker()
    spark.sparkContext.setJobGroup("schema-check", "schema check")
    try:
        bad = spark.range(10).selectExpr("cast(id as string) as value", "id as extra")
        with pytest.raises(SchemaError) as ei:
            sink.write(bad)
        assert ei.value.column == "extra" and ei.value.actual == "bigint"
        with pytest.raises(SchemaError, match="'value'"):
            sink.write(spark.range(3).selectExpr("cast(id as string) as key"))
        with pytest.raises(SchemaError, match="partition"):
            sink.write(spark.range(3).selectExpr("cast(id as string) as value", "id as partition"))
        assert list(tracker.getJobIdsForGroup("schema-check")) == []
    finally:
        spark.sparkContext.setJobGroup(None, None)  # type: ignore[arg-type]
    assert not os.path.exists(tmp_path / "wal")


def _parquet_source(spark, tmp_path, n: int, files: int) -> str:
    src = str(tmp_path / "src")
    (spark.range(n).repartition(files)
     .selectExpr("cast(id as string) as key", "cast(concat('v-', cast(id as string)) as binary) as value")
     .write.parquet(src))
    return src


def _stream(spark, sink, src: str, chk: str):
    stream = spark.readStream.schema("key string, value binary").option("maxFilesPerTrigger", 1).parquet(src)
    q = stream.writeStream.foreachBatch(sink).option("checkpointLocation", chk).trigger(availableNow=True).start()
    q.awaitTermination(600)
    assert q.exception() is None, q.exception()
    return q


def test_worker_killed_mid_task_loses_nothing(spark, broker, topic, tmp_path, hooks):
    n = 24000
    src = _parquet_source(spark, tmp_path, n, files=4)
    sink = _sink(broker, tmp_path, topic=topic, name="killmid", ack_timeout_s=30)
    crash = hooks.crash("task.mid_task", after_rows=3000)  # the first worker past 3000 rows dies (os._exit)
    _stream(spark, sink, src, str(tmp_path / "chk"))
    assert crash.fired(), "the fault never fired"
    got = read_topic(broker.bootstrap, topic, expected=n)
    keys = {r.key for r in got.records}
    assert keys == {str(i).encode() for i in range(n)}
    assert any(p.spark_attempt > 0 for r in sink.reports for p in r.partition_reports)
    print(f"killmid: rows={n} received={len(got.records)} duplicates={got.duplicates()}")


def test_worker_killed_after_commit_before_acks_is_replayed(spark, broker, topic, tmp_path, hooks):
    n = 24000
    src = _parquet_source(spark, tmp_path, n, files=4)
    sink = _sink(broker, tmp_path, topic=topic, name="killcommit", ack_timeout_s=0)
    crash = hooks.crash("task.after_commit", after_rows=1)  # the first worker to commit dies before its acks
    _stream(spark, sink, src, str(tmp_path / "chk"))
    assert crash.fired(), "the fault never fired"
    # A later batch on the same WAL directory adopts the dead worker's slot.
    sink.write(spark.createDataFrame([("late", b"late")], "key string, value binary"), batch_id=10**6)
    got = read_topic(broker.bootstrap, topic, expected=n + 1)
    keys = {r.key for r in got.records}
    assert {str(i).encode() for i in range(n)} <= keys
    assert sum(r.replayed for r in sink.reports) > 0
