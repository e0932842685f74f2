"""Tier 3: the README's migration example, a Kafka source's DataFrame written with ``format("recoverable-kafka")``
and its options unchanged, restarted mid-batch: de-duplicated on ``rks-id``, every input record once.

The example's chain (``kafka.bootstrap.servers``, ``topic``, ``name``,
``checkpointLocation``) as the README writes it, plus what the test needs
around it: a WAL directory of its own, ``maxOffsetsPerTrigger`` on the source
(several batches) and an ``availableNow`` trigger (the query ends). The first
run is stopped while a task of batch 1 has its records in the WAL and the
topic (parked at ``task.after_commit``); the restart re-runs batch 1 from the
offset log, its Kafka ranges at other partition indexes. No id option is
given: the data source names each record by its input's topic, partition and
offset (the columns a Kafka source's DataFrame carries).
"""

from __future__ import annotations

import uuid
from collections import defaultdict
from typing import Any

import pytest

from ..kafka_helpers import create_topic, produce_all, read_topic
from ..record_ids import KEY, id_kind

pytestmark = pytest.mark.spark

N, PARTS = 6000, 4


def _start(spark: Any, bs: str, src: str, out: str, name: str, chk: str, wal: str) -> Any:
    df = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", bs).option("subscribe", src)
          .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", N // 3).load())
    return (df.writeStream.format("recoverable-kafka")  # the README's example, from here
            .option("kafka.bootstrap.servers", bs).option("topic", out)
            .option("name", name)
            .option("checkpointLocation", chk)
            .option("wal_dir", wal).trigger(availableNow=True).start())


def test_the_readme_migration_example_keeps_its_ids_across_a_restart_mid_batch(spark, broker, tmp_path, hooks):
    from spark_recoverable_sink.driver.datasource import RecoverableKafkaDataSource

    spark.dataSource.register(RecoverableKafkaDataSource)
    bs = broker.bootstrap
    src, out = f"mig-in-{uuid.uuid4().hex[:6]}", f"mig-out-{uuid.uuid4().hex[:6]}"
    create_topic(bs, src, partitions=PARTS)
    create_topic(bs, out, partitions=PARTS)
    produce_all(bs, src, ({"key": b"k%d" % (i % 41), "value": b"v%d" % i, "partition": i % PARTS} for i in range(N)))
    name, chk, wal = f"mig-{uuid.uuid4().hex[:6]}", str(tmp_path / "chk"), str(tmp_path / "wal")

    parked = hooks.park("task.after_commit", batch=1, timeout_s=300)
    q = _start(spark, bs, src, out, name, chk, wal)
    try:
        parked.wait(240)
        q.stop()  # batch 1 cut: some of its records are in the topic, its commit is not logged
    finally:
        parked.release()
    q2 = _start(spark, bs, src, out, name, chk, wal)
    q2.awaitTermination(300)
    assert q2.exception() is None, q2.exception()

    records = read_topic(bs, out, expected=N).records
    assert len(records) > N, "premise: part of batch 1 was written by both runs"
    ids_of: dict[bytes | None, set[str]] = defaultdict(set)
    for r in records:
        assert r.rid is not None
        ids_of[r.value].add(r.rid)
    twice = {v: i for v, i in ids_of.items() if len(i) > 1}
    assert not twice, f"{len(twice)} input records under two ids: a consumer de-duplicating by rks-id keeps both"
    assert {id_kind(r.rid) for r in records} == {KEY}, "named by the input's topic, partition and offset"
    assert set(ids_of) == {b"v%d" % i for i in range(N)}
    assert len({next(iter(i)) for i in ids_of.values()}) == N, "two records share an id"
