"""Tier 1: the partition librdkafka's partitioners give keyed records, computed for whole columns.

murmur2 against Apache Kafka's own vectors (UtilsTest.testMurmur2 of the
Java client); the broker tier checks the partitions against librdkafka's.
"""

from __future__ import annotations

import zlib

import numpy as np
import pyarrow as pa
import pytest

from spark_recoverable_sink.delivery.partitions import murmur2, partitions_of

KAFKA_VECTORS = {  # org.apache.kafka.common.utils.UtilsTest.testMurmur2
    b"21": -973932308,
    b"foobar": -790332482,
    b"a-little-bit-long-string": -985981536,
    b"a-little-bit-longer-string": -1486304829,
    b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    b"abc": 479470107,
}


def test_murmur2_is_kafkas_for_every_length_in_one_column():
    keys = pa.array(list(KAFKA_VECTORS), pa.binary())
    got = murmur2(keys).view(np.int32).tolist()
    assert got == list(KAFKA_VECTORS.values())


@pytest.mark.parametrize("kind", [pa.binary(), pa.large_binary(), pa.string()])
def test_a_sliced_column_of_any_binary_kind_hashes_its_own_values(kind):
    values = [b"x" * 9, None, b"21", b"foobar", b"abc"]
    col = pa.array([v.decode() if v is not None and kind == pa.string() else v for v in values], kind).slice(2)
    assert murmur2(col).view(np.int32).tolist() == [-973932308, -790332482, 479470107]


def test_partitions_follow_the_partitioner_and_nulls_are_left_to_it():
    keys = pa.array([b"21", None, b"foobar"], pa.binary())
    want = [(-973932308 & 0x7FFFFFFF) % 7, -1, (-790332482 & 0x7FFFFFFF) % 7]
    assert partitions_of(keys, 7, "murmur2_random").tolist() == want
    assert partitions_of(keys, 7, "consistent_random").tolist() == [zlib.crc32(b"21") % 7, -1,
                                                                     zlib.crc32(b"foobar") % 7]
    assert partitions_of(keys, 7, "murmur2")[1] == (murmur2(pa.array([b""]))[0] & 0x7FFFFFFF) % 7
    empty = pa.array([b""], pa.binary())  # librdkafka: hashed by murmur2_random, random under consistent_random
    assert partitions_of(empty, 7, "murmur2_random")[0] >= 0 and partitions_of(empty, 7, "consistent_random")[0] == -1
    with pytest.raises(ValueError, match="fnv1a"):
        partitions_of(keys, 7, "fnv1a_random")


def test_a_records_lane_is_its_destination_whatever_batch_or_order_it_comes_in():
    from spark_recoverable_sink.config import SinkConfig
    from spark_recoverable_sink.task.lanes import lane_values

    cfg = SinkConfig.build("lanes", {"bootstrap.servers": "127.0.0.1:1"}, "/tmp/unused-lanes", topic="orders",
                           guarantee="exactly_once")
    counts = {"orders": 6, "audit": 3}.__getitem__
    rows = {"key": [b"21", None, b"foobar", b"21", None], "value": [b"a", b"v", b"b", b"c", b"v"],
            "topic": ["orders", None, "audit", "audit", "orders"], "partition": [None, None, None, 2, None]}
    batch = pa.RecordBatch.from_pydict(rows)
    lanes = lane_values(batch, cfg, counts).to_pylist()
    assert lanes[1] == lanes[4]  # equal keyless records: one lane
    assert lanes[0] != lanes[3]  # same key, other topic (and an explicit partition)
    shuffled = pa.RecordBatch.from_pydict({k: v[::-1] for k, v in rows.items()})
    assert lane_values(shuffled, cfg, counts).to_pylist() == lanes[::-1]
    one = pa.RecordBatch.from_pydict({k: v[:1] for k, v in rows.items()})
    assert lane_values(one, cfg, counts).to_pylist() == lanes[:1]
    # the lane of a keyed record is its partition: two keys on one partition share it
    same = [k for k in (b"k%d" % i for i in range(200))
            if partitions_of(pa.array([k]), 6, "murmur2_random")[0] == partitions_of(pa.array([b"21"]), 6,
                                                                                       "murmur2_random")[0]]
    keyed = pa.RecordBatch.from_pydict({"key": [b"21", same[1]], "value": [b"x", b"y"]})
    a, b = lane_values(keyed, cfg, counts).to_pylist()
    assert a == b


def test_lanes_spread_a_topics_partitions_evenly_and_read_columns_in_any_case():
    from spark_recoverable_sink.config import SinkConfig
    from spark_recoverable_sink.task.lanes import _spark_hash_int, lane_tags, lane_values

    cfg = SinkConfig.build("lanes", {"bootstrap.servers": "127.0.0.1:1"}, "/tmp/unused-lanes", topic="orders",
                           guarantee="exactly_once", exactly_once_lanes=4)
    # Spark's hash() of an int: values Spark 4.2 returns for hash(cast(v as int)) (checked on 101 values)
    assert [_spark_hash_int(v) for v in (0, 977, -977)] == [933211791, -1036286874, 973929568]
    assert sorted(_spark_hash_int(int(t)) % 4 for t in lane_tags(4)) == [0, 1, 2, 3]
    batch = pa.RecordBatch.from_pydict({"Partition": [0, 1, 2, 3, None], "VALUE": [b"a", b"b", b"c", b"d", b"e"]})
    tags = lane_values(batch, cfg, {"orders": 4}.__getitem__).to_pylist()
    assert sorted(set(tags[:4])) == sorted(lane_tags(4).tolist())  # 4 partitions, 4 lanes: one each


def test_every_task_of_a_batch_uses_the_drivers_partition_count_not_its_workers_stale_one():
    from spark_recoverable_sink.config import SinkConfig
    from spark_recoverable_sink.task import lanes as lanes_mod

    cfg = SinkConfig.build("lanes", {"bootstrap.servers": "127.0.0.1:1"}, "/tmp/unused-lanes", topic="grown",
                           guarantee="exactly_once", exactly_once_lanes=16)
    key = ("127.0.0.1:1", "grown")
    lanes_mod._counts[key] = 2  # this worker read the topic before it grew to 12 partitions
    try:
        batch = pa.RecordBatch.from_pydict({"key": [b"k%d" % i for i in range(300)], "value": [b"v"] * 300})
        got = lanes_mod.LaneTagger(cfg, {"grown": 12})([batch])
        tags = next(iter(got)).column(lanes_mod.LANE_COLUMN).to_pylist()
        assert tags == lanes_mod.lane_values(batch, cfg, {"grown": 12}.__getitem__).to_pylist()
        assert len(set(tags)) > 2  # 12 partitions' lanes, not the stale 2
        # the driver's read: no broker answers, the count read last stands in (a batch during an outage)
        assert lanes_mod.driver_counts(cfg, timeout_s=0.5) == {"grown": 2}
        del lanes_mod._counts[key]
        with pytest.raises(Exception, match="(?i)timed out|transport|broker"):
            lanes_mod.driver_counts(cfg, timeout_s=0.5)  # none read before: the batch fails
    finally:
        lanes_mod._counts.pop(key, None)


def test_the_arrow_udf_gives_each_record_the_lane_of_the_whole_row():
    """driver/resplit.py's Arrow UDF sees only the key, topic, partition and a keyless value's head: same lanes."""
    from spark_recoverable_sink.config import SinkConfig
    from spark_recoverable_sink.driver.resplit import VALUE_HEAD, LaneColumn
    from spark_recoverable_sink.task.lanes import lane_values

    cfg = SinkConfig.build("lanes", {"bootstrap.servers": "127.0.0.1:1"}, "/tmp/unused-lanes", topic="orders",
                           guarantee="exactly_once", exactly_once_lanes=8)
    counts = {"orders": 6, "audit": 3}
    n = 400
    keys = [None if i % 5 == 0 else b"k%d" % i for i in range(n)]
    values = [(b"v%d-" % i) * (40 if i % 2 else 1) for i in range(n)]  # some longer than the head
    topics = [None if i % 3 else "audit" for i in range(n)]
    parts = [i % 3 if i % 7 == 0 else None for i in range(n)]
    whole = pa.RecordBatch.from_pydict({"key": pa.array(keys, pa.binary()), "value": values,
                                        "topic": pa.array(topics, pa.string()),
                                        "partition": pa.array(parts, pa.int32())})
    heads = pa.array([v[:VALUE_HEAD] if k is None else None for k, v in zip(keys, values)], pa.binary())
    got = LaneColumn(cfg, counts)(whole.column("key"), whole.column("topic"), whole.column("partition"), heads)
    assert got.to_pylist() == lane_values(whole, cfg, counts.__getitem__).to_pylist()
    assert len(set(got.to_pylist())) > 3
