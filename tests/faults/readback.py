"""Reading the topic back: a live reader noting when each row arrived, and the tally of a full read."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any, Iterable

READER_CLIENT_ID = "rks-reader"


class LiveReader:
    """Consumes topics from the beginning in a thread; notes when each key was first seen."""

    def __init__(self, bootstrap: str, topics: str | list[str]) -> None:
        self.bootstrap = bootstrap
        self.topics = [topics] if isinstance(topics, str) else list(topics)
        self.first_seen: dict[bytes, float] = {}
        self.records = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="live-reader", daemon=True)
        self._cv = threading.Condition()
        self.error: BaseException | None = None
        self.errors: list[str] = []  # per-message errors the consumer reported (never skipped silently)

    def start(self) -> "LiveReader":
        self._thread.start()
        return self

    def _run(self) -> None:
        from confluent_kafka import Consumer, TopicPartition

        try:
            c = Consumer({
                "bootstrap.servers": self.bootstrap, "group.id": f"live-{time.monotonic_ns()}",
                "client.id": READER_CLIENT_ID, "enable.auto.commit": False, "auto.offset.reset": "earliest",
                "fetch.max.bytes": 52428800, "topic.metadata.refresh.interval.ms": 2000,
                "reconnect.backoff.max.ms": 1000,
            })
            tps = []
            end = time.monotonic() + 30
            for name in self.topics:
                while True:
                    md = c.list_topics(name, timeout=10)
                    t = md.topics.get(name)
                    if t is not None and t.error is None and t.partitions:
                        break
                    if time.monotonic() > end:
                        raise RuntimeError(f"topic {name} has no metadata")
                    time.sleep(0.2)
                tps += [TopicPartition(name, p, 0) for p in t.partitions]  # offset 0: see kafka_helpers.read_topic
            c.assign(tps)
            while not self._stop.is_set():
                msgs = c.consume(5000, 0.2)
                now = time.time()
                with self._cv:
                    for m in msgs:
                        if m.error():
                            self.errors.append(str(m.error()))
                            continue
                        self.records += 1
                        k = m.key()
                        if k is not None and k not in self.first_seen:
                            self.first_seen[k] = now
                    if msgs:
                        self._cv.notify_all()
            c.close()
        except BaseException as exc:  # surfaced by wait_for / stop
            self.error = exc

    def wait_for(self, keys: Iterable[bytes], timeout_s: float) -> float | None:
        """Wait until every key in ``keys`` was seen; returns the time the last one arrived."""
        want = set(keys)
        missing = set(want)
        end = time.monotonic() + timeout_s
        with self._cv:
            while True:
                missing = {k for k in missing if k not in self.first_seen}
                if not missing:
                    return max((self.first_seen[k] for k in want), default=time.time())
                left = end - time.monotonic()
                if left <= 0 or self.error is not None:
                    return None
                self._cv.wait(min(1.0, left))

    def last_arrival(self, keys: Iterable[bytes]) -> float | None:
        with self._cv:
            ts = [self.first_seen.get(k) for k in keys]
        if any(t is None for t in ts):
            return None
        return max(ts, default=None)  # type: ignore[arg-type]

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(15)


def keys_of(rows: Iterable[int]) -> list[bytes]:
    return [str(i).encode() for i in rows]


@dataclass
class Tally:
    rows_sent: int
    records_read: int
    distinct_ids: int
    lost: int
    duplicates: int
    lost_sample: list[int]
    foreign: int  # records whose key is not one of the expected rows
    lost_rows: list[int] = field(default_factory=list, repr=False)
    per_partition: dict[int, int] = field(default_factory=dict)  # records read per Kafka partition
    errors: list[str] = field(default_factory=list)  # errors the reader's consumer reported
    # Offsets the reader never got, per Kafka partition: (first, last) ranges. Offsets are contiguous
    # here (no transactions, no compaction), so a gap is records the broker has and the reader skipped.
    offset_gaps: dict[int, list[tuple[int, int]]] = field(default_factory=dict)


def tally(contents: Any, expected_rows: Iterable[int]) -> Tally:
    """Count a full read against the row numbers that were sent (key = row number)."""
    from collections import Counter

    want = set(expected_rows)
    counts: Counter[int] = Counter()
    foreign = 0
    for r in contents.records:
        try:
            k = int(r.key)
        except (TypeError, ValueError):
            foreign += 1
            continue
        if k in want:
            counts[k] += 1
        else:
            foreign += 1
    lost = sorted(want - set(counts))
    per_partition = Counter(r.partition for r in contents.records)
    offsets: dict[int, set[int]] = {}
    for r in contents.records:
        offsets.setdefault(r.partition, set()).add(r.offset)
    gaps: dict[int, list[tuple[int, int]]] = {}
    for p, offs in offsets.items():
        expect = 0
        for o in sorted(offs):
            if o > expect:
                gaps.setdefault(p, []).append((expect, o - 1))
            expect = o + 1
    return Tally(
        rows_sent=len(want), records_read=len(contents.records), distinct_ids=len(counts), lost=len(lost),
        duplicates=sum(c - 1 for c in counts.values()), lost_sample=lost[:20], foreign=foreign, lost_rows=lost,
        per_partition=dict(sorted(per_partition.items())), errors=list(getattr(contents, "errors", []))[:20],
        offset_gaps=gaps,
    )


def read_back(bootstrap: str, topic: str, expected_rows: Iterable[int], reader: LiveReader | None = None,
              wait_s: float = 90.0, isolation: str = "read_uncommitted") -> Tally:
    """Wait (up to ``wait_s``) for every row to be visible, then read the topic back completely."""
    from tests.kafka_helpers import read_topic

    rows = list(expected_rows)
    if reader is not None:
        reader.wait_for(keys_of(rows), wait_s)
        seen = reader.records
        contents = read_topic(bootstrap, topic, expected=max(seen, len(rows)), idle_s=3.0, timeout_s=wait_s + 60,
                              isolation=isolation)
    else:
        contents = read_topic(bootstrap, topic, expected=len(rows), idle_s=5.0, timeout_s=wait_s + 60,
                              isolation=isolation)
    t = tally(contents, rows)
    if reader is not None:
        t.errors += reader.errors[:20]
    return t
