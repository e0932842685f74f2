"""Tier 3: real Spark (local[2,3]) and the real broker."""

from __future__ import annotations

import pytest

from spark_recoverable_sink import RecoverableKafkaSink

from ..kafka_helpers import read_topic

pytestmark = pytest.mark.spark


def _write_parquet_batches(spark, path: str, n: int, files: int) -> None:
    df = spark.range(n).selectExpr(
        "cast(id as string) as key",
        "cast(concat('value-', cast(id as string)) as binary) as value",
        f"cast(id % {files} as int) as f",
    )
    df.write.partitionBy("f").parquet(path)


def test_streaming_rows_arrive_once_each_with_keys_values(spark, broker, topic, tmp_path):
    n = 30000
    src = str(tmp_path / "src")
    _write_parquet_batches(spark, src, n, files=3)
    sink = RecoverableKafkaSink(
        name="stream-basic", kafka_conf={"bootstrap.servers": broker.bootstrap}, topic=topic,
        wal_dir=str(tmp_path / "wal"), ack_timeout_s=30.0,
    )
    stream = (spark.readStream.schema("key string, value binary, f int").option("maxFilesPerTrigger", 1)
              .parquet(src).drop("f"))
    q = (stream.writeStream.foreachBatch(sink).option("checkpointLocation", str(tmp_path / "chk"))
         .trigger(availableNow=True).start())
    q.awaitTermination(300)
    assert q.exception() is None
    reports = list(sink.reports)
    assert sum(r.rows for r in reports) == n
    assert len(reports) >= 2
    got = read_topic(broker.bootstrap, topic, expected=n)
    ids = got.distinct_ids()
    assert len(ids) == n
    assert got.duplicates() == 0
    assert sorted(int(r.key) for r in got.records) == list(range(n))
    for r in got.records[:100]:
        assert r.value == b"value-" + r.key
