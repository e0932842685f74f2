"""Tier 3: a drop-in for ``format("kafka")``: the same DataFrame and options through Spark's sink and ours.

Spark's own Kafka sink (the connector matching PySpark's version) and each
entry point of this sink (``sink.write(df)``, ``foreachBatch(sink)``, the data
source ``recoverable-kafka``) write the same DataFrame with the same options
into the same output topic; the records are told apart by this sink's id header
(its sink name leads the id; Spark's records have none) and compared record by
record (each value is unique): topic, partition (for keyed records and records
with a partition column), key, value and the user's headers.

DataFrames: the Kafka source's own (key, value, topic, partition, offset,
timestamp, timestampType, headers: the extra columns ignored, the ``topic``
option over the ``topic`` column), and a key / value / headers one with a
``topic`` column and no option (the column routes each row).
"""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest

from spark_recoverable_sink import RecoverableKafkaDataSource, RecoverableKafkaSink

from ..kafka_helpers import ID_HEADER, create_topic, produce_all, read_topic
from ..record_ids import id_run

pytestmark = pytest.mark.spark

N = 3000
#: The source records' timestamps: an hour before the test (far from any write's time, well inside the test
#: broker's retention: records stamped years ago would be deleted by retention as soon as they are written).
OLD_MS = int(time.time() * 1000) - 3_600_000


def _produce_source(bootstrap: str, topic: str) -> None:
    produce_all(bootstrap, topic, ({"key": None if i % 7 == 0 else b"k%d" % (i % 50), "value": b"v%d" % i,
                                    "partition": i % 3, "timestamp": OLD_MS + i,
                                    "headers": [("h", b"x%d" % i), ("n", None)] if i % 3 == 0 else None}
                                   for i in range(N)), linger_ms=5)


def _by_writer(bootstrap: str, topics: list[str], expected: int) -> dict[str, dict[bytes, Any]]:
    """value -> (topic, partition, key, user headers, timestamp), per writer: ``spark``, or the run key of the sink's
    ids (each entry point writes under a run of its own)."""
    out: dict[str, dict[bytes, Any]] = {}
    for r in read_topic(bootstrap, topics, expected=expected).records:
        rid = r.rid
        writer = "spark" if rid is None else id_run(rid)
        user = tuple((k, v) for k, v in r.headers if k != ID_HEADER)
        assert r.value not in out.setdefault(writer, {}), f"{writer} wrote {r.value!r} twice"
        out[writer][r.value] = (r.topic, r.partition, r.key, user, r.timestamp)
    return out


def _same_as_spark(got: dict[str, dict[bytes, Any]], writer: str, keyless_partition: bool) -> None:
    """``writer``'s records equal Spark's, value by value (a keyless record's partition: only if it was given)."""
    spark, ours = got["spark"], got[writer]
    assert set(ours) == set(spark), f"{writer}: {len(set(spark) - set(ours))} missing, {len(set(ours) - set(spark))} extra"
    differ = []
    for value, (topic, part, key, headers, _ts) in spark.items():
        o = ours[value]
        if (o[0], o[2], o[3]) != (topic, key, headers) or ((key is not None or keyless_partition) and o[1] != part):
            differ.append((value, (topic, part, key, headers), o[:4]))
    assert not differ, f"{writer}: {len(differ)} records differ from Spark's sink, e.g. {differ[:3]}"


def _write_all(spark: Any, df_batch: Any, df_stream: Any, bootstrap: str, topic: str | None, tag: str,
               wal_dir: str, chk: str) -> list[str]:
    """Spark's sink and the three entry points of ours, the same DataFrame and options; the sinks' names."""
    opts = {"kafka.bootstrap.servers": bootstrap, **({"topic": topic} if topic else {})}
    df_batch.write.format("kafka").options(**opts).save()
    names = [f"{tag}w", f"{tag}fb", f"{tag}ds"]
    RecoverableKafkaSink(names[0], {"bootstrap.servers": bootstrap}, topic=topic, wal_dir=wal_dir).write(df_batch)
    fb = RecoverableKafkaSink(names[1], {"bootstrap.servers": bootstrap}, topic=topic, wal_dir=wal_dir)
    df_stream.writeStream.foreachBatch(fb).option("checkpointLocation", chk).trigger(availableNow=True) \
        .start().awaitTermination(300)
    spark.dataSource.register(RecoverableKafkaDataSource)
    df_batch.write.format("recoverable-kafka").options(**opts, name=names[2], wal_dir=wal_dir).mode("append").save()
    return names


def test_the_kafka_source_dataframe_lands_as_spark_writes_it(spark, broker, tmp_path):
    bs = broker.bootstrap
    src, out, stamped = (f"par-{k}-{uuid.uuid4().hex[:6]}" for k in ("src", "out", "stamped"))
    for t in (src, out, stamped):
        create_topic(bs, t, partitions=3)  # the partition column is used: as many partitions as the source
    _produce_source(bs, src)

    def read(stream: bool) -> Any:
        r = (spark.readStream if stream else spark.read).format("kafka").option("kafka.bootstrap.servers", bs) \
            .option("subscribe", src).option("includeHeaders", "true")
        return r.option("startingOffsets", "earliest").load()

    batch = read(False)
    assert batch.columns == ["key", "value", "topic", "partition", "offset", "timestamp", "timestampType", "headers"]
    tag = f"p{uuid.uuid4().hex[:5]}"
    names = _write_all(spark, batch, read(True), bs, out, tag, str(tmp_path / "wal"), str(tmp_path / "chk"))
    got = _by_writer(bs, [out], expected=N * 4)
    assert len(got) == 1 + len(names) and len(got["spark"]) == N and all(t == out for t, *_ in got["spark"].values())
    back = read_topic(bs, src, expected=N).records  # the source's own topic column: nothing written back there
    assert len(back) == N and all(r.rid is None for r in back)
    for name in (w for w in got if w != "spark"):
        _same_as_spark(got, name, keyless_partition=True)  # the partition column is the source's: every record
        assert all(ts != OLD_MS + int(v[1:]) for v, (*_x, ts) in got[name].items()), f"{name} wrote source timestamps"
    assert all(ts != OLD_MS + int(v[1:]) for v, (*_x, ts) in got["spark"].items())

    # Writing the source's timestamps is the user's explicit choice
    name = f"{tag}ts"
    RecoverableKafkaSink(name, {"bootstrap.servers": bs}, topic=stamped, wal_dir=str(tmp_path / "wal"),
                         write_timestamp=True).write(batch)
    (got,) = _by_writer(bs, [stamped], expected=N).values()
    assert all(ts == OLD_MS + int(v[1:]) for v, (*_x, ts) in got.items())


def test_a_topic_column_routes_each_row_as_in_spark(spark, broker, tmp_path):
    from pyspark.sql import functions as F

    bs = broker.bootstrap
    a, b = (f"par-route-{k}-{uuid.uuid4().hex[:6]}" for k in "ab")
    create_topic(bs, a, partitions=4)
    create_topic(bs, b, partitions=2)
    rows = spark.range(0, N, 1, 3).select(
        F.when(F.col("id") % 5 == 0, F.lit(None)).otherwise(F.concat(F.lit("k"), (F.col("id") % 40).cast("string")))
        .alias("key"),
        F.concat(F.lit("v"), F.col("id").cast("string")).cast("binary").alias("value"),
        F.when(F.col("id") % 2 == 0, F.lit(a)).otherwise(F.lit(b)).alias("topic"),
        F.array(F.struct(F.lit("src").alias("key"), F.col("id").cast("string").cast("binary").alias("value")))
        .alias("headers"),
        F.col("id").alias("extra"))
    names = _write_all(spark, rows, _as_stream(spark, rows, tmp_path), bs, None, f"r{uuid.uuid4().hex[:5]}",
                       str(tmp_path / "wal"), str(tmp_path / "chk"))
    got = _by_writer(bs, [a, b], expected=N * 4)
    assert {t for t, *_ in got["spark"].values()} == {a, b} and len(got) == 1 + len(names)
    for name in (w for w in got if w != "spark"):
        _same_as_spark(got, name, keyless_partition=False)


def _as_stream(spark: Any, rows: Any, tmp_path: Any) -> Any:
    """``rows`` as a streaming DataFrame of one batch (a file source over them, same schema)."""
    path = str(tmp_path / "rows")
    rows.write.parquet(path)
    return spark.readStream.schema(rows.schema).parquet(path)
