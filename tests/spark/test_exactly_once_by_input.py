"""Tier 3: exactly-once lanes named by their input (no shuffle), through a query stopped mid-batch and re-run.

Spark's Kafka source (4 partitions) into ``foreachBatch(sink)`` with
``exactly_once_lanes`` left at ``"auto"`` on 2 cores: each Spark partition
reads one Kafka range, so the run pins a lane per input (no re-split), each
lane named by its range's rank among the batch's ranges. In batch 1 the lane
of rank 3 is parked before its commit while the other three commit; the query
is stopped there and started again from its checkpoint: Spark re-runs batch 1
with its ranges at other partition indexes (the Kafka source does not keep
their order). The lanes that committed must be skipped (their markers prove
the same records), the parked one published once (by the re-run or by whoever
adopts the stopped worker's unit from its WAL), and a ``read_committed`` reader
must see every input record exactly once.
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

import pytest

from spark_recoverable_sink import RecoverableKafkaSink

from ..kafka_helpers import create_topic, produce_all, read_topic
from ..record_ids import POSITION, id_kind

pytestmark = pytest.mark.spark

N, PARTS = 8000, 4


def _lane_batch(bootstrap: str, group: str) -> int | None:
    """The batch a lane's marker offset says it committed last (``None``: none)."""
    from confluent_kafka import Consumer, TopicPartition

    from spark_recoverable_sink.delivery.exactly_once.markers import decode_offset

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "isolation.level": "read_committed"})
    try:
        (tp,) = c.committed([TopicPartition("rks-markers", 0)], timeout=10)
        m = decode_offset(tp.offset if tp.offset >= 0 else None, tp.metadata)
        return None if m is None else m.batch
    finally:
        c.close()


def _query(spark: Any, broker: Any, src: str, sink: Any, chk: str) -> Any:
    df = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", broker.bootstrap)
          .option("subscribe", src).option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", N // 4)
          .load().select("key", "value"))
    return df.writeStream.foreachBatch(sink).option("checkpointLocation", chk).trigger(availableNow=True).start()


def test_a_lane_per_input_skips_what_committed_and_publishes_the_rest_once(spark, broker, tmp_path, hooks):
    src, out = f"eoi-in-{uuid.uuid4().hex[:6]}", f"eoi-out-{uuid.uuid4().hex[:6]}"
    create_topic(broker.bootstrap, src, partitions=PARTS)
    create_topic(broker.bootstrap, out, partitions=3)
    produce_all(broker.bootstrap, src, ({"key": b"k%d" % (i % 97), "value": b"v%d" % i, "partition": i % PARTS}
                                        for i in range(N)))
    name, chk = f"eoi-{uuid.uuid4().hex[:6]}", str(tmp_path / "chk")

    def sink() -> RecoverableKafkaSink:
        return RecoverableKafkaSink(name, {"bootstrap.servers": broker.bootstrap}, topic=out,
                                    wal_dir=str(tmp_path / "wal"), guarantee="exactly_once", ack_timeout_s=30)

    parked = hooks.park("eo.before_commit", batch=1, lane=3, timeout_s=300)
    q = _query(spark, broker, src, sink(), chk)
    try:
        parked.wait(240)
        with open(tmp_path / "chk" / "metadata") as f:
            run = json.load(f)["id"].replace("-", "")[:16]
        lanes = [f"rks-eo.{name}:{run}:{lane}" for lane in range(PARTS)]
        deadline = time.monotonic() + 120
        while any(_lane_batch(broker.bootstrap, g) != 1 for g in lanes[:3]):  # the other three lanes commit
            assert time.monotonic() < deadline, "premise: lanes 0-2 of batch 1 never committed"
            time.sleep(0.5)
        assert _lane_batch(broker.bootstrap, lanes[3]) != 1, "premise: lane 3 of batch 1 is not committed"
        q.stop()  # the batch is cut: its lane 3 not committed, the others are
    finally:
        parked.release()
    again = sink()
    q2 = _query(spark, broker, src, again, chk)
    q2.awaitTermination(300)
    assert q2.exception() is None, q2.exception()
    assert again.reports and again.reports[0].batch_id == 1, [r.batch_id for r in again.reports]
    assert again.reports[0].skipped > 0, "the re-run skipped the lanes that committed"
    got = read_topic(broker.bootstrap, out, expected=N, isolation="read_committed").records
    values = sorted(r.value for r in got)
    assert len(values) == N and set(values) == {b"v%d" % i for i in range(N)}, \
        f"{len(values) - len(set(values))} duplicates, {N - len(set(values))} missing"
    assert {id_kind(r.rid) for r in got} == {POSITION} and len({r.rid for r in got}) == N
