"""Tier 2: the partition the sink computes for a key is the one librdkafka's partitioner gives it (Apache Kafka).

Exactly-once splits batches by the partition each record will go to
(``task/lanes.py``); if the two disagreed, two lanes would write one
partition and its order would no longer be an input partition's order.
"""

from __future__ import annotations

import uuid

import pyarrow as pa
import pytest
from confluent_kafka import Producer

from spark_recoverable_sink.delivery.partitions import partitions_of

from ..kafka_helpers import create_topic, read_topic

pytestmark = pytest.mark.broker

KEYS = [b"", b"a", b"ab", b"abc", b"21", "clé-é".encode()] + [b"k%d" % i * (i % 9 + 1) for i in range(600)]


@pytest.mark.parametrize("partitioner", ["murmur2_random", "murmur2", "consistent_random", "consistent"])
def test_the_computed_partition_of_every_key_is_librdkafkas(broker, partitioner):
    topic = f"parts-{partitioner}-{uuid.uuid4().hex[:6]}"
    create_topic(broker.bootstrap, topic, partitions=7)
    p = Producer({"bootstrap.servers": broker.bootstrap, "partitioner": partitioner, "linger.ms": 5})
    for k in KEYS:
        p.produce(topic, value=b"x", key=k)
    assert p.flush(30) == 0
    got = read_topic(broker.bootstrap, topic, expected=len(KEYS))
    actual = {bytes(r.key): r.partition for r in got.records}
    want = dict(zip(actual, partitions_of(pa.array(list(actual), pa.binary()), 7, partitioner).tolist()))
    placed_at_random = {k for k, p in want.items() if p < 0}
    assert placed_at_random == ({b""} if partitioner == "consistent_random" else set())
    assert {k: p for k, p in want.items() if p >= 0} == {k: p for k, p in actual.items() if k not in placed_at_random}
