"""Tier 2: keyed records land on the partition Kafka's Java client picks (as ``format("kafka")`` does).

Kafka's Java ``DefaultPartitioner`` / ``BuiltInPartitioner`` puts a keyed
record on ``toPositive(Utils.murmur2(keyBytes)) % numPartitions``. The
reference below follows that public algorithm and is checked against the
vectors of Kafka's own ``UtilsTest.testMurmur2``.
"""

from __future__ import annotations

import uuid

import pyarrow as pa
import pytest

from spark_recoverable_sink.config import SinkConfig
from spark_recoverable_sink.task.writer import write_partition

from ..kafka_helpers import create_topic, read_topic

pytestmark = pytest.mark.broker

_M = 0x5BD1E995
_MASK = 0xFFFFFFFF


def java_murmur2(data: bytes) -> int:
    """Kafka's ``Utils.murmur2`` (seed 0x9747b28c), as a signed 32-bit int."""
    length = len(data)
    h = (0x9747B28C ^ length) & _MASK
    for i in range(length // 4):
        k = int.from_bytes(data[4 * i:4 * i + 4], "little")
        k = (k * _M) & _MASK
        k ^= k >> 24
        k = (k * _M) & _MASK
        h = (h * _M) & _MASK
        h ^= k
    tail = length & ~3
    rest = length % 4
    if rest == 3:
        h ^= data[tail + 2] << 16
    if rest >= 2:
        h ^= data[tail + 1] << 8
    if rest >= 1:
        h ^= data[tail]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def java_partition(key: bytes, partitions: int) -> int:
    """``Utils.toPositive(Utils.murmur2(key)) % numPartitions``."""
    return (java_murmur2(key) & 0x7FFFFFFF) % partitions


def test_reference_matches_kafka_utils_test_vectors():
    # Kafka clients/src/test/java/org/apache/kafka/common/utils/UtilsTest.java, testMurmur2
    vectors = {
        b"21": -973932308,
        b"foobar": -790332482,
        b"a-little-bit-long-string": -985981536,
        b"a-little-bit-longer-string": -1486304829,
        b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
        b"abc": 479470107,
    }
    assert {k: java_murmur2(k) for k in vectors} == vectors


def test_producer_conf_defaults_to_the_java_partitioner_and_keeps_the_users():
    cfg = SinkConfig.build("p", {"bootstrap.servers": "x:1"}, "/tmp/w")
    assert cfg.producer_conf()["partitioner"] == "murmur2_random"
    mine = SinkConfig.build("p", {"bootstrap.servers": "x:1", "partitioner": "consistent_random"}, "/tmp/w")
    assert mine.producer_conf()["partitioner"] == "consistent_random"


def test_keyed_records_land_where_the_java_client_puts_them(broker, tmp_path):
    topic, partitions = f"murmur-{uuid.uuid4().hex[:6]}", 7
    create_topic(broker.bootstrap, topic, partitions)
    cfg = SinkConfig.build("murmur", {"bootstrap.servers": broker.bootstrap}, str(tmp_path), topic=topic,
                           ack_timeout_s=30)
    keys = [f"key-{i}".encode() for i in range(300)] + ["clé-ü".encode(), b"\x00\xff", b"21", b"abc"]
    rb = pa.RecordBatch.from_pydict({"key": keys, "value": [b"v"] * len(keys)})
    report = write_partition(cfg, 1, 0, 0, iter([rb]), run="r")
    assert report.acked == len(keys)
    got = read_topic(broker.bootstrap, topic, expected=len(keys))
    assert len(got.records) == len(keys)
    wrong = [(r.key, r.partition, java_partition(r.key, partitions)) for r in got.records
             if r.partition != java_partition(r.key, partitions)]
    assert not wrong, f"{len(wrong)} of {len(keys)} keys on another partition than Kafka's Java client's: {wrong[:5]}"
    assert len({r.partition for r in got.records}) == partitions
