"""Tier 3: the sink on real Spark (local[2,3], task retries allowed) and the real broker."""

from __future__ import annotations

import datetime as dt
import os
import uuid
from collections import Counter

import pyarrow as pa
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

from spark_recoverable_sink import ConfigError, RecoverableKafkaSink, SchemaError

from ..java_settings import PRODUCTION
from ..kafka_helpers import create_topic, read_topic
from ..record_ids import id_batch, id_run, ids_of, run_of

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
    sink = _sink(broker, tmp_path, name="perrow", write_timestamp=True)
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
        rid = hdrs["rks-id"].hex()
        assert id_run(rid) == run_of("perrow", report.run) and id_batch(rid) == 3
        assert r.timestamp == int(ts.replace(tzinfo=dt.datetime.now().astimezone().tzinfo).timestamp() * 1000)


def test_java_producer_settings_write_through_sink_write(spark, broker, topic, tmp_path):
    sink = RecoverableKafkaSink(name=f"s-{uuid.uuid4().hex[:8]}", kafka_conf={"bootstrap.servers": broker.bootstrap,
                                                                              **PRODUCTION},
                                wal_dir=str(tmp_path / "wal"), topic=topic)
    df = spark.range(2000).selectExpr("cast(id as string) as key", "repeat('x', 300) as value")
    report = sink.write(df, batch_id=1)
    assert (report.rows, report.acked, report.pending) == (2000, 2000, 0)
    got = read_topic(broker.bootstrap, topic, expected=2000)
    assert sorted(int(r.key) for r in got.records) == list(range(2000)) and got.duplicates() == 0


def test_wrong_schema_fails_before_any_task_runs(spark, broker, topic, tmp_path):
    sink = _sink(broker, tmp_path, topic=topic)
    tracker = spark.sparkContext.statusTracker()
    spark.sparkContext.setJobGroup("schema-check", "schema check")
    try:
        bad = spark.range(10).selectExpr("cast(id as string) as value", "id as key", "id as extra")
        with pytest.raises(SchemaError) as ei:
            sink.write(bad)
        assert ei.value.column == "key" and ei.value.actual == "bigint"  # 'extra' is ignored, as Spark's sink does
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
    assert any(p.spark_attempt > 0 for r in sink.reports for p in r.task_reports)
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


# -- record ids unique across runs (issue 7.2) ----------------------------------------------------


def _ids_by_key(records) -> dict[bytes, str]:
    out = {}
    for r in records:
        assert out.setdefault(r.key, r.rid) == r.rid, f"key {r.key!r} arrived with two ids"
    return out


def _new_topic(broker, prefix: str, partitions: int = 2) -> str:
    name = f"{prefix}-{uuid.uuid4().hex[:6]}"
    create_topic(broker.bootstrap, name, partitions)
    return name


def test_ids_differ_between_queries_and_repeat_when_a_query_restarts_from_its_checkpoint(spark, broker, tmp_path):
    n = 3000
    src = _parquet_source(spark, tmp_path, n, files=3)  # three batches of one file each
    name = f"runs-{uuid.uuid4().hex[:6]}"
    first, rerun, other = (_new_topic(broker, p) for p in ("q1", "q1again", "q2"))
    chk1, chk2 = str(tmp_path / "chk1"), str(tmp_path / "chk2")
    q1 = _stream(spark, _sink(broker, tmp_path, name=name, topic=first), src, chk1)
    # Forget that the last batch committed: the restart re-runs it, same offsets, same query id.
    commits = os.path.join(chk1, "commits")
    last = max(int(f) for f in os.listdir(commits) if f.isdigit())
    for f in (str(last), f".{last}.crc"):
        if os.path.exists(os.path.join(commits, f)):
            os.unlink(os.path.join(commits, f))
    again_sink = _sink(broker, tmp_path, name=name, topic=rerun)
    q1b = _stream(spark, again_sink, src, chk1)
    q2 = _stream(spark, _sink(broker, tmp_path, name=name, topic=other), src, chk2)  # same sink name, new query
    assert q1.id == q1b.id != q2.id
    a = _ids_by_key(read_topic(broker.bootstrap, first, expected=n).records)
    b = _ids_by_key(read_topic(broker.bootstrap, other, expected=n).records)
    rerun_rows = sum(r.rows for r in again_sink.reports)
    assert [r.batch_id for r in again_sink.reports] == [last] and rerun_rows > 0
    c = _ids_by_key(read_topic(broker.bootstrap, rerun, expected=rerun_rows).records)
    assert len(a) == len(b) == n and len(set(a.values())) == n
    assert not set(a.values()) & set(b.values()), "two queries of one sink name share record ids"
    assert {id_run(i) for i in a.values()} == {run_of(name, q1.id.replace("-", "")[:16])}
    assert {id_run(i) for i in b.values()} == {run_of(name, q2.id.replace("-", "")[:16])}
    # the re-run batch gave every row the id it had the first time
    assert c == {k: a[k] for k in c} and {id_batch(i) for i in c.values()} == {last}


def test_each_write_gets_its_own_ids_and_a_run_id_reproduces_them(spark, broker, tmp_path):
    # A record's id covers its content, the topic column included: each pair of writes goes to one topic
    # (same rows, same content), so only the run can tell their ids apart.
    fresh, rerun = _new_topic(broker, "w-fresh"), _new_topic(broker, "w-rerun")
    sink = _sink(broker, tmp_path, name=f"writes-{uuid.uuid4().hex[:6]}")
    df = spark.range(0, 400, 1, 2).selectExpr("cast(id as string) as key", "cast(id as string) as value")
    for t, run in ((fresh, None), (fresh, None), (rerun, "backfill-2024.05.06"), (rerun, "backfill-2024.05.06")):
        sink.write(df.withColumn("topic", F.lit(t)), batch_id=4, run_id=run)

    # two write() calls without run_id: every row twice, under two ids that differ in their run only
    two_writes = read_topic(broker.bootstrap, fresh, expected=800).records
    ids_per_key: dict[bytes, set[str]] = {}
    for r in two_writes:
        ids_per_key.setdefault(r.key, set()).add(r.rid)
    assert len(two_writes) == 800 and set(ids_per_key) == {str(i).encode() for i in range(400)}
    assert all(len(v) == 2 for v in ids_per_key.values()), "two write() calls share record ids"
    runs = {id_run(rid) for v in ids_per_key.values() for rid in v}
    assert len(runs) == 2, runs
    for v in ids_per_key.values():
        a, b = sorted(v)
        assert a[:2] + a[18:] == b[:2] + b[18:] and id_run(a) != id_run(b), (a, b)

    # two write() calls with one run_id: every row twice, under the same id
    same_run = read_topic(broker.bootstrap, rerun, expected=800).records
    assert len(same_run) == 800
    ids = {}
    for r in same_run:
        ids.setdefault(r.key, set()).add(r.rid)
    assert set(ids) == {str(i).encode() for i in range(400)}
    assert all(len(v) == 1 for v in ids.values()), "a re-run with the same run_id did not reproduce the ids"
    assert set(Counter(r.rid for r in same_run).values()) == {2}, "a row not written exactly twice"
    three = _ids_by_key(same_run)
    assert len(set(three.values())) == 400
    assert all(id_run(i) == run_of(sink.name, "backfill-2024.05.06") and id_batch(i) == 4 for i in three.values())
    with pytest.raises(ConfigError, match="run_id"):
        sink.write(df.withColumn("topic", F.lit(fresh)), run_id="a:b")


def _tasks_of(spark, group: str) -> list[int]:
    tracker = spark.sparkContext.statusTracker()
    return [tracker.getStageInfo(s).numTasks for j in tracker.getJobIdsForGroup(group)
            for s in tracker.getJobInfo(j).stageIds]


def test_a_batch_of_more_partitions_than_cores_runs_one_task_per_core_and_keeps_each_partitions_ids(
        spark, broker, tmp_path):
    # record_ids="partition": 8 Spark partitions on local[2,3]: at-least-once writes them in 2 tasks
    # (coalesce_tasks, the default), and
    # every record keeps the id its own partition gives it (equal records included: their occurrences).
    parts, per_part = 8, 500
    topic = _new_topic(broker, "coalesce")
    df = spark.range(0, parts * per_part, 1, parts).selectExpr("cast(id % 300 as string) as key",
                                                              "cast(id % 7 as string) as value")
    rows = df.rdd.glom().collect()
    sink = _sink(broker, tmp_path, name=f"coal-{uuid.uuid4().hex[:6]}", topic=topic, record_ids="partition")
    spread = _sink(broker, tmp_path, name=sink.name, topic=topic, coalesce_tasks=False, record_ids="partition")
    schema = pa.schema([("key", pa.string()), ("value", pa.string())])
    expected: set[str] = set()
    for run, s, tasks in (("coalesced", sink, 2), ("spread", spread, parts)):
        spark.sparkContext.setJobGroup(run, run)
        try:
            report = s.write(df, batch_id=2, run_id=run)
        finally:
            spark.sparkContext.setJobGroup(None, None)  # type: ignore[arg-type]
        assert _tasks_of(spark, run) == [tasks]
        assert [(p.origin, p.rows, p.acked) for p in report.task_reports] == [
            (i, per_part, per_part) for i in range(parts)]
        expected |= {rid for i, part in enumerate(rows) for rid in ids_of(
            sink.name, run, 2, i, [pa.RecordBatch.from_pylist([r.asDict() for r in part], schema)], topic)}
    got = read_topic(broker.bootstrap, topic, expected=2 * parts * per_part).records
    assert len(got) == 2 * parts * per_part and {r.rid for r in got} == expected
    by_run = {run: sorted(r.rid[18:] for r in got if id_run(r.rid) == run_of(sink.name, run))
              for run in ("coalesced", "spread")}
    assert by_run["coalesced"] == by_run["spread"], "coalescing changed record ids"


def test_a_batch_of_no_more_partitions_than_cores_is_left_as_spark_split_it(spark, tmp_path):
    # Tagging rows with their partition costs a JVM projection and an Arrow column per batch: only where the
    # coalesce merges partitions. A plan with a shuffle is sized only at run time, a file scan is not planned
    # twice: both tagged. Reading the plans runs no Spark job.
    from spark_recoverable_sink.config import SinkConfig
    from spark_recoverable_sink.driver.split import _one_task_per_core as one_task_per_core
    from spark_recoverable_sink.driver.split import _partitions_of as partitions_of
    from spark_recoverable_sink.task.coalesced import SOURCE_PARTITION

    config = SinkConfig.build("coal-plan", {"bootstrap.servers": "127.0.0.1:1"}, str(tmp_path), topic="t")
    two = spark.range(0, 100, 1, 2).selectExpr("cast(id as string) as value")
    eight = spark.range(0, 100, 1, 8).selectExpr("cast(id as string) as value")
    shuffled = two.groupBy("value").count().selectExpr("value")
    as_micro_batch = spark.createDataFrame(two.rdd, two.schema)  # foreachBatch hands over a LogicalRDD alike
    two.write.parquet(str(tmp_path / "pq"))
    files = spark.read.parquet(str(tmp_path / "pq"))
    sc = spark.sparkContext
    bus = sc._jsc.sc().listenerBus()
    bus.waitUntilEmpty()
    sc.setJobGroup("coal-plan", "coal-plan")
    try:
        assert [partitions_of(d) for d in (two, eight, shuffled, as_micro_batch, files)] == [2, 8, None, 2, None]
        assert one_task_per_core(two, config) is two and one_task_per_core(as_micro_batch, config) is as_micro_batch
        for tagged in (eight, shuffled, files):
            assert SOURCE_PARTITION in one_task_per_core(tagged, config).columns
        bus.waitUntilEmpty()
        assert list(sc.statusTracker().getJobIdsForGroup("coal-plan")) == [], "reading the plans ran a job"
    finally:
        sc.setJobGroup(None, None)  # type: ignore[arg-type]


def test_record_ids_are_the_same_whatever_split_and_order_a_batch_has(spark, broker, tmp_path):
    # record_ids="content" (the default): the same rows in 8 partitions, then in 3 in another order (as Spark's
    # Kafka source re-runs a batch with another split), give the same ids; equal rows in different partitions
    # get different occurrences (450 distinct rows, each about 9 times), so a consumer dropping duplicates by id
    # keeps every row.
    from pyspark.sql import functions as F

    topic = _new_topic(broker, "split")
    base = spark.range(0, 4000, 1, 8).selectExpr("cast(id % 50 as string) as key", "cast(id % 90 as string) as value")
    other = base.withColumn("o", F.xxhash64("key", "value")).repartition(3, "value").sortWithinPartitions("o") \
        .drop("o")
    name = f"split-{uuid.uuid4().hex[:6]}"
    for df in (base, other):
        report = _sink(broker, tmp_path, name=name, topic=topic).write(df, batch_id=4, run_id="same")
        assert report.rows == 4000 and report.acked == 4000
    got = read_topic(broker.bootstrap, topic, expected=8000).records
    by_id: dict[str, set] = {}
    for r in got:
        by_id.setdefault(r.rid, set()).add((r.key, r.value))
    assert len(by_id) == 4000, f"{len(by_id)} distinct ids for 4000 rows written twice"
    assert all(len(v) == 1 for v in by_id.values()), "an id names two different records"
    assert all(n == 2 for n in Counter(r.rid for r in got).values()), "a row's two writes got different ids"
