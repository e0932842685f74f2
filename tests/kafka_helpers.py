"""Reading a topic back completely, and creating topics, on the real test broker.

The test broker's watermark offsets are wrong, so a topic is counted by
consuming it from the beginning of every partition until it has been quiet
for a while (or until an expected count is reached and then quiet briefly).
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

ID_HEADER = "rks-id"


def create_topic(bootstrap: str, name: str, partitions: int = 3) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for _t, fut in admin.create_topics([NewTopic(name, partitions, 1)]).items():
        fut.result(15)
    # Wait until the metadata shows every partition.
    end = time.monotonic() + 15
    while time.monotonic() < end:
        md = admin.list_topics(name, timeout=5)
        t = md.topics.get(name)
        if t is not None and t.error is None and len(t.partitions) == partitions:
            return
        time.sleep(0.1)
    raise RuntimeError(f"topic {name} did not appear")


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
        for k, v in self.headers:
            if k == ID_HEADER:
                return v.decode() if v is not None else None
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
    """Every record of ``topics``, read with ``assign`` from the beginning."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    names = [topics] if isinstance(topics, str) else list(topics)
    c = Consumer({
        "bootstrap.servers": bootstrap, "group.id": f"reader-{time.monotonic_ns()}",
        "enable.auto.commit": False, "auto.offset.reset": "earliest", "isolation.level": isolation,
        "fetch.max.bytes": 52428800,
    })
    try:
        tps = []
        for name in names:
            md = c.list_topics(name, timeout=10)
            tps += [TopicPartition(name, p, OFFSET_BEGINNING) for p in md.topics[name].partitions]
        c.assign(tps)
        out = TopicContents()
        start = last = time.monotonic()
        while time.monotonic() - start < timeout_s:
            msgs = c.consume(10000, 0.5)
            for m in msgs:
                if m.error():
                    out.errors.append(f"{m.topic()}[{m.partition()}]: {m.error()}")
                    continue
                out.records.append(Record(m.topic(), m.partition(), m.offset(), m.key(), m.value(),
                                          list(m.headers() or []), m.timestamp()[1]))
            now = time.monotonic()
            if msgs:
                last = now
            quiet = now - last
            if expected is not None and len(out.records) >= expected and quiet >= min(1.0, idle_s):
                break
            if quiet >= idle_s and (expected is None or len(out.records) >= expected):
                break
            if expected is not None and quiet >= max(idle_s, 15.0):
                break  # nothing more is coming
        return out
    finally:
        c.close()


def header_dict(r: Any) -> dict[str, Any]:
    return {k: v for k, v in r.headers}
