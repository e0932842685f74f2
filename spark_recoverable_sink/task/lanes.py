"""Exactly-once: the lane of each record, computed in the tasks before the driver re-splits the batch by it.

A lane must hold the same records on every run of a batch, however Spark
split them (DESIGN.md, "Units that do not depend on how Spark split the
batch"), and one lane must write each Kafka partition, so that a partition
receives an input partition's records in their order. So a record's lane is
its destination: (topic, partition), with the partition the producer's
partitioner will choose for its key (:mod:`..delivery.partitions`), or its
partition column. A keyless record under a ``_random`` partitioner, which
may land on any partition, takes the lane of the partition its value would
hash to (it is not pinned there: Kafka keeps no order for keyless records
across partitions).

Where it runs: a ``mapInArrow`` step of the executors, ahead of the
shuffle. What pickles: the config and the partition count of the sink's
topic, read by the driver once per batch (:func:`driver_counts`), so that
every task of a batch computes lanes from the same count. A topic column's
other topics are read once per topic and worker process. A count that
changes between two runs of a batch changes its lanes: the re-run is
refused as a mismatch.
"""

from __future__ import annotations

import threading
import zlib
from typing import Any, Iterable, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..config import SinkConfig
from ..delivery.partitions import murmur2, partitions_of
from ..errors import ConfigError

__all__ = ["LaneTagger", "LANE_COLUMN", "driver_counts", "lane_values", "partition_count"]

LANE_COLUMN = "_rks_lane"
_counts: dict[tuple[str, str], int] = {}
_counts_lock = threading.Lock()


def partition_count(config: SinkConfig, topic: str, timeout_s: float = 30.0, fresh: bool = False) -> int:
    """The partition count of ``topic`` (cached per process; ``fresh`` reads it again and updates the cache).

    Raises:
        ConfigError: the topic does not exist (exactly-once needs its partitions before writing).
        confluent_kafka.KafkaException: no broker answered within ``timeout_s``.
    """
    key = (config.producer_conf().get("bootstrap.servers", ""), topic)
    with _counts_lock:
        if key in _counts and not fresh:
            return _counts[key]
    from confluent_kafka.admin import AdminClient

    from ..delivery.exactly_once.markers import client_conf

    md = AdminClient(client_conf(config)).list_topics(topic, timeout=timeout_s)
    t = md.topics.get(topic)
    if t is None or t.error is not None or not t.partitions:
        raise ConfigError("topic", f"{topic!r} was not found on the broker ({t.error if t else 'no metadata'}): "
                                   "exactly-once splits a batch by the partitions of its topics, create it first")
    with _counts_lock:
        _counts[key] = len(t.partitions)
    return _counts[key]


def driver_counts(config: SinkConfig, timeout_s: float = 5.0) -> dict[str, int]:
    """Driver, once per batch: the sink topic's partition count, read fresh, for every task of the batch.

    When no broker answers within ``timeout_s`` the count read last is kept
    (a batch during an outage waits in the WALs like any other); with none
    read yet the batch fails.

    Raises:
        ConfigError: the topic does not exist.
        confluent_kafka.KafkaException: no broker answered and no count was read before.
    """
    if not config.topic:
        return {}
    from confluent_kafka import KafkaException

    key = (config.producer_conf().get("bootstrap.servers", ""), config.topic)
    try:
        return {config.topic: partition_count(config, config.topic, timeout_s, fresh=True)}
    except KafkaException:
        with _counts_lock:
            if key not in _counts:
                raise
            return {config.topic: _counts[key]}


def _spark_hash_int(value: int) -> int:
    """Spark's ``hash()`` of an int column (Murmur3_x86_32.hashInt, seed 42), as a signed int."""
    def rotl(x: int, r: int) -> int:
        return ((x << r) | (x >> (32 - r))) & 0xFFFFFFFF

    k = rotl((value & 0xFFFFFFFF) * 0xCC9E2D51 & 0xFFFFFFFF, 15) * 0x1B873593 & 0xFFFFFFFF
    h = (rotl(42 ^ k, 13) * 5 + 0xE6546B64) & 0xFFFFFFFF
    h ^= 4
    h = (h ^ (h >> 16)) * 0x85EBCA6B & 0xFFFFFFFF
    h = (h ^ (h >> 13)) * 0xC2B2AE35 & 0xFFFFFFFF
    h ^= h >> 16
    return h - (1 << 32) if h >= 1 << 31 else h


def lane_tags(lanes: int) -> np.ndarray:
    """For each lane index, an int that Spark's hash partitioning into ``lanes`` partitions sends there."""
    tags = np.full(lanes, -1, dtype=np.int64)
    found, v = 0, 0
    while found < lanes:  # bounded: each index is hit within a few times ``lanes`` tries (the hash is uniform)
        i = _spark_hash_int(v) % lanes
        if tags[i] < 0:
            tags[i], found = v, found + 1
        v += 1
    return tags


def lane_values(batch: pa.RecordBatch, config: SinkConfig, counts: Any = None, lanes: int = 0) -> pa.Array:
    """Each record's lane tag: its destination ``(topic, partition)`` numbered ``crc32(topic) + partition``, modulo
    ``lanes`` (or ``config.exactly_once_lanes``), as the int Spark's hash partitioning sends to that lane.

    Column names are matched in any case (Spark's are). A row with no topic
    at all takes lane 0 (the writer refuses it, naming the record).
    """
    counts = counts or (lambda topic: partition_count(config, topic))
    lanes = lanes or config.exactly_once_lanes
    partitioner = config.producer_conf().get("partitioner", "murmur2_random")
    batch = pa.RecordBatch.from_arrays(batch.columns, names=[c.lower() for c in batch.schema.names])
    names = batch.schema.names
    n = batch.num_rows
    if "topic" in names:
        topic_col = batch.column("topic").cast(pa.string()).fill_null(config.topic or "")
        codes = topic_col.dictionary_encode()
        uniq = codes.dictionary.to_pylist()
        inverse = np.asarray(codes.indices, dtype=np.int64)
        order = np.argsort(inverse, kind="stable")
        groups = np.split(order, np.searchsorted(inverse[order], np.arange(1, len(uniq))))
    else:
        uniq, groups = [config.topic or ""], [np.arange(n)]
    out = np.zeros(n, dtype=np.int64)
    parts = (np.asarray(batch.column("partition").cast(pa.int64()).fill_null(-1)) if "partition" in names
             else np.full(n, -1, dtype=np.int64))
    for topic, rows in zip(uniq, groups):
        if not topic:
            continue  # lane 0: the writer raises InvalidRecordError naming it
        count = counts(topic)
        chosen = parts[rows]
        free = np.nonzero(chosen < 0)[0]
        if len(free):
            sub = batch.take(pa.array(rows[free]))
            keys = sub.column("key") if "key" in names else pa.nulls(len(free), pa.binary())
            by_key = partitions_of(keys, count, partitioner).astype(np.int64)
            keyless = by_key < 0
            if keyless.any():  # placed at random by librdkafka: the lane of its value's first 64 bytes
                values = sub.column("value").take(pa.array(np.nonzero(keyless)[0]))
                values = pc.binary_slice(values.cast(pa.binary()) if not pa.types.is_binary(values.type) else values,
                                         0, 64)
                by_key[keyless] = (murmur2(values) & np.uint32(0x7FFFFFFF)).astype(np.int64) % count
            chosen[free] = by_key
        out[rows] = (zlib.crc32(topic.encode()) + chosen) % lanes
    return pa.array(lane_tags(lanes)[out].astype(np.int32), pa.int32())


class LaneTagger:
    """Picklable ``mapInArrow`` function: every batch with its records' lanes appended (:data:`LANE_COLUMN`)."""

    def __init__(self, config: SinkConfig, counts: dict[str, int] | None = None) -> None:
        self.config = config
        self.counts = dict(counts or {})  # topic -> partition count, read by the driver for this batch

    def count(self, topic: str) -> int:
        """The batch's count of ``topic`` (the driver's), else this worker's (:func:`partition_count`)."""
        return self.counts[topic] if topic in self.counts else partition_count(self.config, topic)

    def __call__(self, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            yield batch.append_column(pa.field(LANE_COLUMN, pa.int32(), nullable=False),
                                      lane_values(batch, self.config, self.count))
