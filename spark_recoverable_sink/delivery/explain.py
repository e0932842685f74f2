"""Dead-letter reasons that say what to change.

librdkafka's texts name the error, not the cause: ``Local: Unknown
partition`` does not say how many partitions the topic has, ``Message size
too large`` does not say whose limit. :func:`explain` adds that, from the
record and the configuration; the error code stays the client's.
"""

from __future__ import annotations

import time
from typing import Any, Callable

from ..config import SinkConfig

__all__ = ["explain", "PartitionCounts"]

_DEFAULT_MESSAGE_MAX_BYTES = 1_000_000  # librdkafka's default message.max.bytes


def _codes() -> dict[str, int]:
    from confluent_kafka import KafkaError

    names = ("_UNKNOWN_PARTITION", "UNKNOWN_TOPIC_OR_PART", "_UNKNOWN_TOPIC", "MSG_SIZE_TOO_LARGE",
             "_MSG_SIZE_TOO_LARGE", "RECORD_LIST_TOO_LARGE", "TOPIC_AUTHORIZATION_FAILED")
    return {n: getattr(KafkaError, n) for n in names if hasattr(KafkaError, n)}


class PartitionCounts:
    """Partition counts of topics, asked of the broker through the producer, kept for a few seconds."""

    def __init__(self, producer: Callable[[], Any], ttl_s: float = 10.0, timeout_s: float = 2.0) -> None:
        self._producer = producer
        self._ttl_s = ttl_s
        self._timeout_s = timeout_s
        self._known: dict[str, tuple[float, int | None]] = {}

    def __call__(self, topic: str) -> int | None:
        hit = self._known.get(topic)
        if hit is not None and time.monotonic() - hit[0] < self._ttl_s:
            return hit[1]
        count: int | None = None
        try:
            md = self._producer().list_topics(topic, timeout=self._timeout_s)
            t = md.topics.get(topic)
            if t is not None and t.error is None:
                count = len(t.partitions)
        except Exception:  # an explanation is best effort; the error code stays exact
            count = None
        self._known[topic] = (time.monotonic(), count)
        return count


def explain(config: SinkConfig, code: int, text: str, topic: str, partition: int | None, size: int,
            partitions_of: Callable[[str], int | None] | None = None) -> str:
    """``text`` plus what to change, for the errors whose cause a user cannot see in it."""
    c = _codes()
    if code == c.get("_UNKNOWN_PARTITION"):
        count = partitions_of(topic) if partitions_of is not None else None
        has = f"has {count} partition(s), 0..{count - 1}" if count else "has fewer partitions"
        return (f"{text}: the partition column is {partition} but topic {topic!r} {has}; fix the partition "
                "column (or leave it null to let the partitioner choose), or add partitions to the topic")
    if code in (c.get("UNKNOWN_TOPIC_OR_PART"), c.get("_UNKNOWN_TOPIC")):
        return (f"{text}: topic {topic!r} does not exist and the broker does not create it; create the topic, "
                "or fix the topic option / topic column")
    if code == c.get("TOPIC_AUTHORIZATION_FAILED"):
        return f"{text}: the client may not write to topic {topic!r}; grant WRITE on it to the sink's principal"
    if code in (c.get("MSG_SIZE_TOO_LARGE"), c.get("_MSG_SIZE_TOO_LARGE"), c.get("RECORD_LIST_TOO_LARGE")):
        conf = config.producer_conf()
        try:
            limit = int(conf.get("message.max.bytes", _DEFAULT_MESSAGE_MAX_BYTES))
        except ValueError:
            limit = _DEFAULT_MESSAGE_MAX_BYTES
        if size + 1024 >= limit:  # the client counts some framing too
            return (f"{text}: the record is {size} bytes (key, value and headers), at or over the producer's "
                    f"message.max.bytes={limit}; raise message.max.bytes (the Java client's max.request.size) in "
                    "kafka_conf (and the topic's max.message.bytes if needed) or send smaller values")
        return (f"{text}: the record is {size} bytes, within the producer's message.max.bytes={limit}, so the "
                f"broker refused it: raise topic {topic!r}'s max.message.bytes (or the broker's "
                "message.max.bytes), or send smaller values")
    return text
