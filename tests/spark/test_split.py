"""Tier 3: record ids that hold across a re-run of a batch after a restart mid-batch, for each way a batch is split.

Each case streams a Kafka topic of 4 partitions (Spark's Kafka source) through
a transformation into ``foreachBatch(sink)``. The first time batch 1 runs,
the ``foreachBatch`` function fails right after the sink published the batch
(as a driver dying before Spark logs the batch's commit); the query is started
again from its checkpoint, and Spark re-runs batch 1 from its offset log (its
Kafka ranges at other partition indexes: the index order of a Kafka source's
re-run is not kept). Every record of batch 1 is then in the topic twice
(premise). Judged as a consumer that drops duplicates by ``rks-id`` sees it:
every output value under exactly one id, every id with one value, and
nothing missing. The test also checks how the sink split the batch
(:mod:`spark_recoverable_sink.driver.split`): by the records' position in
their Kafka range (no shuffle), by content in each partition of the user's
own hash exchange, or re-split where neither holds.
"""

from __future__ import annotations

import logging
import uuid
from collections import defaultdict
from typing import Any, Callable

import pytest

from spark_recoverable_sink import RecoverableKafkaSink

from ..kafka_helpers import create_topic, produce_all, read_topic
from ..record_ids import CONTENT, POSITION, id_kind

pytestmark = pytest.mark.spark

N, PARTS = 4000, 4


class _FailOnce:
    """``foreachBatch``: the sink, then, the first time batch 1 runs, a failure after it returned."""

    def __init__(self, sink: RecoverableKafkaSink) -> None:
        self.sink = sink
        self.failed = False

    def __call__(self, df: Any, batch_id: int) -> None:
        self.sink(df, batch_id)
        if batch_id == 1 and not self.failed:
            self.failed = True
            raise RuntimeError("the driver dies after the batch was published, before Spark logs its commit")


def _source(broker: Any) -> str:
    topic = f"split-in-{uuid.uuid4().hex[:6]}"
    create_topic(broker.bootstrap, topic, partitions=PARTS)
    produce_all(broker.bootstrap, topic, ({"key": b"k%d" % (i % 50), "value": b"v%d" % i, "partition": i % PARTS}
                                          for i in range(N)))
    return topic


def _run(spark: Any, broker: Any, tmp_path: Any, caplog: Any,
         transform: Callable[[Any], Any], source_opts: dict[str, str] | None = None,
         output_mode: str = "append") -> tuple[list[Any], str]:
    """The query run to its end twice (failing once at batch 1); the output topic's records and the ids line."""
    src, out = _source(broker), f"split-out-{uuid.uuid4().hex[:6]}"
    create_topic(broker.bootstrap, out, partitions=3)
    name = f"split-{uuid.uuid4().hex[:6]}"
    sink = RecoverableKafkaSink(name, {"bootstrap.servers": broker.bootstrap}, topic=out,
                                wal_dir=str(tmp_path / "wal"))
    fn = _FailOnce(sink)
    reader = spark.readStream.format("kafka").option("kafka.bootstrap.servers", broker.bootstrap) \
        .option("subscribe", src).option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", N // 4)
    for k, v in (source_opts or {}).items():
        reader = reader.option(k, v)
    df = transform(reader.load())
    with caplog.at_level(logging.INFO, logger="spark_recoverable_sink.sink"):
        for attempt in range(2):
            q = df.writeStream.foreachBatch(fn).outputMode(output_mode) \
                .option("checkpointLocation", str(tmp_path / "chk")).trigger(availableNow=True).start()
            try:
                q.awaitTermination(300)
            except Exception:  # noqa: BLE001 - the first run's failure, checked below
                pass
            if attempt == 0:
                assert fn.failed and q.exception() is not None, "premise: the query failed at batch 1"
            else:
                assert q.exception() is None, q.exception()
    said = [r.getMessage() for r in caplog.records if f"sink={name} ids=" in r.getMessage()]
    return read_topic(broker.bootstrap, out, expected=N).records, " ".join(said)


def _deduplicated(records: list[Any]) -> dict[bytes | None, str]:
    """value -> its one id, as a consumer dropping duplicates by rks-id keeps them; asserts no value under two ids
    and no id with two values."""
    ids_of: dict[bytes | None, set[str]] = defaultdict(set)
    values_of: dict[str, set[bytes | None]] = defaultdict(set)
    for r in records:
        assert r.rid is not None
        ids_of[r.value].add(r.rid)
        values_of[r.rid].add(r.value)
    two_ids = {v: i for v, i in ids_of.items() if len(i) > 1}
    assert not two_ids, f"{len(two_ids)} values under two ids (duplicates a consumer cannot drop)"
    two_values = {i: v for i, v in values_of.items() if len(v) > 1}
    assert not two_values, f"{len(two_values)} ids shared by two values (a consumer would drop a record)"
    return {v: next(iter(i)) for v, i in ids_of.items()}


def _check_copy(records: list[Any], want: set[bytes]) -> None:
    kept = _deduplicated(records)
    assert set(kept) == want, f"{len(want - set(kept))} values missing"
    assert len(records) > len(want), "premise: batch 1 was published twice"


ALL = {b"v%d" % i for i in range(N)}


def test_the_kafka_source_alone_is_named_by_position_in_its_ranges(spark, broker, tmp_path, caplog):
    records, said = _run(spark, broker, tmp_path, caplog, lambda d: d.select("key", "value"))
    assert "ids=position" in said and "named input" in said, said
    assert {id_kind(r.rid) for r in records} == {POSITION}
    _check_copy(records, ALL)


def test_a_filter_and_a_projection_keep_the_position(spark, broker, tmp_path, caplog):
    records, said = _run(spark, broker, tmp_path, caplog,
                         lambda d: d.where("value not like '%7'").selectExpr("key", "concat(value, 'x') as value"))
    assert "ids=position" in said, said
    _check_copy(records, {v + b"x" for v in ALL if not v.endswith(b"7")})


def test_min_partitions_splits_ranges_and_keeps_the_position(spark, broker, tmp_path, caplog):
    records, said = _run(spark, broker, tmp_path, caplog, lambda d: d.select("key", "value"),
                         source_opts={"minPartitions": "10"})
    assert "ids=position" in said, said
    _check_copy(records, ALL)


def test_after_a_user_groupby_each_partition_is_named_by_its_content(spark, broker, tmp_path, caplog):
    from pyspark.sql import functions as F

    records, said = _run(spark, broker, tmp_path, caplog,
                         lambda d: d.groupBy("key").agg(F.count("*").alias("n"))
                         .select("key", F.concat_ws(":", F.col("key").cast("string"), "n").alias("value")),
                         output_mode="update")
    assert "ids=content" in said and "hash exchange" in said, said
    assert {id_kind(r.rid) for r in records} == {CONTENT}
    kept = _deduplicated(records)  # each batch's updated counts: one id each, whatever the run
    assert {v.split(b":")[0] for v in kept if v} == {b"k%d" % i for i in range(50)}
    assert len(records) > len(kept), "premise: batch 1 was published twice"


def test_after_a_round_robin_repartition_the_batch_is_re_split(spark, broker, tmp_path, caplog):
    records, said = _run(spark, broker, tmp_path, caplog, lambda d: d.select("key", "value").repartition(3))
    assert "ids=place" in said and "round-robin" in said, said
    _check_copy(records, ALL)


def test_a_file_source_is_named_by_position_in_its_file_splits(spark, broker, tmp_path, caplog):
    """Files as the source (one file per trigger): each partition reads a file split, named by its path, start and
    length, so a re-run of a batch gives its records the ids they had."""
    import json

    src = tmp_path / "src"
    src.mkdir()
    for f in range(3):
        with open(src / f"part-{f}.json", "w") as fh:
            fh.writelines(json.dumps({"key": f"k{i % 50}", "value": f"v{i}"}) + "\n" for i in range(f * 500, f * 500 + 500))
    out = f"split-out-{uuid.uuid4().hex[:6]}"
    create_topic(broker.bootstrap, out, partitions=3)
    name = f"split-{uuid.uuid4().hex[:6]}"
    fn = _FailOnce(RecoverableKafkaSink(name, {"bootstrap.servers": broker.bootstrap}, topic=out,
                                        wal_dir=str(tmp_path / "wal")))
    df = spark.readStream.schema("key string, value string").option("maxFilesPerTrigger", 1).json(str(src))
    with caplog.at_level(logging.INFO, logger="spark_recoverable_sink.sink"):
        for attempt in range(2):
            q = df.writeStream.foreachBatch(fn).option("checkpointLocation", str(tmp_path / "chk")) \
                .trigger(availableNow=True).start()
            try:
                q.awaitTermination(300)
            except Exception:  # noqa: BLE001 - the first run's failure, checked below
                pass
            assert (q.exception() is not None) == (attempt == 0), q.exception()
    said = " ".join(r.getMessage() for r in caplog.records if f"sink={name} ids=" in r.getMessage())
    assert "ids=position" in said, said
    records = read_topic(broker.bootstrap, out, expected=1500).records
    _check_copy(records, {b"v%d" % i for i in range(1500)})
