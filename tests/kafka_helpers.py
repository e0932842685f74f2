"""Reading a topic back completely, creating topics and filling them, on the test broker (Apache Kafka).

A topic is read from the beginning of every partition to its end as the
consumer's isolation level sees it (the high watermark, or the last stable
offset for read_committed: librdkafka reports each partition's end), then
for as long as the caller waits for more.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Iterable

from .record_ids import id_batch, id_scope

ID_HEADER = "rks-id"


def create_topic(bootstrap: str, name: str, partitions: int = 3, config: dict[str, str] | None = None) -> None:
    """Create ``name`` (replication factor 1, topic ``config``) and wait until its metadata shows every partition."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for _t, fut in admin.create_topics([NewTopic(name, partitions, 1, config=dict(config or {}))]).items():
        fut.result(15)
    # Wait until the metadata shows every partition.
    end = time.monotonic() + 15
    while time.monotonic() < end:
        md = admin.list_topics(name, timeout=5)
        t = md.topics.get(name)
        if t is not None and t.error is None and len(t.partitions) == partitions:
            from devtools.topics import wait_for_leaders

            wait_for_leaders(bootstrap, name, partitions)  # KAFKA-15591: no produce meets a leader not ready
            return
        time.sleep(0.1)
    raise RuntimeError(f"topic {name} did not appear")


def produce_all(bootstrap: str, topic: str, records: Iterable[dict[str, Any]], linger_ms: int = 20,
                timeout_s: float = 120.0) -> int:
    """Produce every record (``Producer.produce`` keyword arguments) and wait for all their acks; returns the count.

    librdkafka's local queue holds 100,000 records: a loop faster than the
    broker acks (a fresh broker on a loaded machine) meets ``BufferError``
    and waits for room, within ``timeout_s`` for the whole fill.

    Raises:
        AssertionError: no room or not every ack within ``timeout_s``, or a record that failed (its error).
    """
    from confluent_kafka import Producer

    failed: list[Any] = []

    def on_delivery(err: Any, _msg: Any) -> None:
        if err is not None:
            failed.append(err)

    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": linger_ms})
    deadline = time.monotonic() + timeout_s
    n = 0
    for rec in records:
        while True:
            try:
                p.produce(topic, on_delivery=on_delivery, **rec)
                break
            except BufferError:  # the local queue is full: serve acks until there is room
                assert time.monotonic() < deadline, f"{topic}: no room in the producer's queue within {timeout_s} s"
                p.poll(0.1)
        n += 1
        if n % 10000 == 0:
            p.poll(0)
    left = p.flush(max(1.0, deadline - time.monotonic()))
    assert left == 0, f"{topic}: {left} of {n} records not acked within {timeout_s} s"
    assert not failed, f"{topic}: {len(failed)} records failed, e.g. {failed[0]}"
    return n


@dataclass
class Record:
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]]
    timestamp: int

    @property
    def rid(self) -> str | None:
        """The record's id header in hex (ids are bytes: spark_recoverable_sink.ids), ``None`` without one."""
        for k, v in self.headers:
            if k == ID_HEADER:
                return v.hex() if v is not None else None
        return None


@dataclass
class TopicContents:
    records: list[Record] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)  # errors the consumer reported while reading

    def per_partition(self) -> dict[tuple[str, int], int]:
        return dict(sorted(Counter((r.topic, r.partition) for r in self.records).items()))

    @property
    def ids(self) -> Counter:
        return Counter(r.rid for r in self.records)

    def distinct_ids(self) -> set[str]:
        return {r.rid for r in self.records if r.rid is not None}

    def duplicates(self) -> int:
        return sum(c - 1 for c in self.ids.values() if c > 1)

    def by_id(self) -> dict[str, Record]:
        return {r.rid: r for r in self.records if r.rid is not None}


def read_topic(bootstrap: str, topics: str | list[str], expected: int | None = None,
               idle_s: float = 3.0, timeout_s: float = 120.0, isolation: str = "read_uncommitted") -> TopicContents:
    """Every record of ``topics``, read with ``assign`` from the beginning of every partition.

    Returns once ``expected`` records came and every partition was read to its
    end; without ``expected``, once every partition is at its end and nothing
    came for ``idle_s``; short of ``expected``, once every partition was read to
    its end and nothing new came for 15 s (or ``idle_s``), or at ``timeout_s``.
    (Not before every partition answered: under a loaded three-worker make test
    a read of two new topics got nothing in its first 15 s and returned empty.)
    """
    from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

    names = [topics] if isinstance(topics, str) else list(topics)
    c = Consumer({
        "bootstrap.servers": bootstrap, "group.id": f"reader-{time.monotonic_ns()}",
        "enable.auto.commit": False, "auto.offset.reset": "earliest", "isolation.level": isolation,
        "fetch.max.bytes": 52428800, "enable.partition.eof": True,
    })
    assigned: set[tuple[str, int]] = set()
    at_end: set[tuple[str, int]] = set()  # partitions read to their end (no record read since)

    def assign_new_partitions() -> None:
        # Metadata can list fewer partitions than the topic has right after it was created:
        # looked up again while records are missing, so a partition is never left unread.
        new = []
        for name in names:
            t = c.list_topics(name, timeout=10).topics.get(name)
            if t is None or t.error is not None:
                continue
            new += [TopicPartition(name, p, OFFSET_BEGINNING) for p in t.partitions if (name, p) not in assigned]
        if new:
            c.incremental_assign(new)
            assigned.update((tp.topic, tp.partition) for tp in new)

    try:
        assign_new_partitions()
        out = TopicContents()
        start = last = looked = time.monotonic()
        while time.monotonic() - start < timeout_s:
            if time.monotonic() - looked >= 2.0 and (expected is None or len(out.records) < expected):
                assign_new_partitions()
                looked = time.monotonic()
            msgs = c.consume(10000, 0.2)
            for m in msgs:
                err = m.error()
                if err is not None and err.code() == KafkaError._PARTITION_EOF:
                    at_end.add((m.topic(), m.partition()))
                    continue
                if err is not None:
                    out.errors.append(f"{m.topic()}[{m.partition()}]: {err}")
                    continue
                at_end.discard((m.topic(), m.partition()))
                out.records.append(Record(m.topic(), m.partition(), m.offset(), m.key(), m.value(),
                                          list(m.headers() or []), m.timestamp()[1]))
            now = time.monotonic()
            if any(not m.error() for m in msgs):
                last = now
            quiet = now - last
            everything = bool(assigned) and at_end >= assigned
            if expected is not None and len(out.records) >= expected and everything:
                break  # all that was expected, and every partition read to its end
            if quiet >= idle_s and everything and (expected is None or len(out.records) >= expected):
                break
            if expected is not None and quiet >= max(idle_s, 15.0) and everything:
                break  # nothing more is coming
        return out
    finally:
        c.close()


def header_dict(r: Any) -> dict[str, Any]:
    return {k: v for k, v in r.headers}


def wait_for_uncommitted(bootstrap: str, topic: str, batch: int, partition: int | None,
                         timeout_s: float = 30.0) -> int:
    """Wait until records of (``batch``, Spark ``partition``) are on the broker, read_uncommitted; returns how many.

    For a test that kills a worker inside its open transaction: the kill
    comes once the transaction holds records on the broker (ids of that
    batch in the scope of that partition), not after a guessed delay.
    ``partition=None``: any record of the batch, for a batch of one task
    whose ids are scoped by its input's name rather than its partition
    (exactly-once lanes named by their input).

    Raises:
        AssertionError: none within ``timeout_s``.
    """
    end = time.monotonic() + timeout_s
    while True:
        got = read_topic(bootstrap, topic, idle_s=0.2, timeout_s=10)
        n = sum(1 for r in got.records if r.rid and id_batch(r.rid) == batch
                and (partition is None or id_scope(r.rid) == partition))
        if n:
            return n
        if time.monotonic() > end:
            raise AssertionError(f"no record of batch {batch} partition {partition} reached {topic} in {timeout_s}s")
        time.sleep(0.2)
