"""Reading the topic back: a live reader noting when each row arrived, and the tally of a full read."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any, Iterable

READER_CLIENT_ID = "rks-reader"


class LiveReader:
    """Consumes topics from the beginning in a thread; notes when each key was first seen.

    A consumer of the test broker has been seen to skip a run of offsets the
    broker holds, for good (a fresh consumer returns them; see
    ``kafka_helpers._read_gaps_again``). So while :meth:`wait_for` still misses
    keys and nothing new has arrived for a while, the reader reads its topics
    again from offset 0 with a fresh consumer and fresh metadata (after 5 s
    of quiet, then 10, 20, 40, 40, ...): a key found only then counts as seen
    at that moment, so a skip costs seconds, never a whole wait.
    """

    def __init__(self, bootstrap: str, topics: str | list[str]) -> None:
        self.bootstrap = bootstrap
        self.topics = [topics] if isinstance(topics, str) else list(topics)
        self.first_seen: dict[bytes, float] = {}
        self.records = 0  # distinct (topic, partition, offset) read
        self.rereads = 0  # fresh re-reads started
        self.reread_failures = 0  # of them, failed (broker unreachable)
        self.reread_keys = 0  # keys the live consumer skipped and a re-read found
        self._offsets: set[tuple[str, int, int]] = set()
        self._stop = threading.Event()
        self._recheck = threading.Event()
        self._thread = threading.Thread(target=self._run, name="live-reader", daemon=True)
        self._cv = threading.Condition()
        self._last_new = time.monotonic()  # when a key was last seen for the first time
        self.error: BaseException | None = None
        self.errors: list[str] = []  # per-message errors the consumer reported (never skipped silently)

    def start(self) -> "LiveReader":
        self._thread.start()
        return self

    def _consumer(self, tag: str) -> Any:
        from confluent_kafka import Consumer

        return Consumer({
            "bootstrap.servers": self.bootstrap, "group.id": f"{tag}-{time.monotonic_ns()}",
            "client.id": READER_CLIENT_ID, "enable.auto.commit": False, "auto.offset.reset": "earliest",
            "fetch.max.bytes": 52428800, "topic.metadata.refresh.interval.ms": 2000,
            "reconnect.backoff.max.ms": 1000,
        })

    def _partitions(self, c: Any, wait_s: float) -> list[Any]:
        """Every partition of the topics, from offset 0 (see kafka_helpers.read_topic); waits for metadata."""
        from confluent_kafka import TopicPartition

        tps = []
        end = time.monotonic() + wait_s
        for name in self.topics:
            while True:
                md = c.list_topics(name, timeout=10)
                t = md.topics.get(name)
                if t is not None and t.error is None and t.partitions:
                    break
                if time.monotonic() > end:
                    raise RuntimeError(f"topic {name} has no metadata")
                time.sleep(0.2)
            tps += [TopicPartition(name, p, 0) for p in t.partitions]
        return tps

    def _note(self, msgs: list[Any], reread: bool) -> None:
        now = time.time()
        with self._cv:
            new_key = False
            for m in msgs:
                if m.error():
                    if not reread:
                        self.errors.append(str(m.error()))
                    continue
                at = (m.topic(), m.partition(), m.offset())
                if at in self._offsets:
                    continue
                self._offsets.add(at)
                self.records += 1
                k = m.key()
                if k is not None and k not in self.first_seen:
                    self.first_seen[k] = now
                    new_key = True
                    self.reread_keys += reread
            if new_key:
                self._last_new = time.monotonic()
                self._cv.notify_all()

    def _reread(self) -> None:
        """Read every partition again from offset 0 with a fresh consumer, until 2 s pass with nothing new.

        Fresh metadata, so a partition the live consumer's metadata lacked is
        read too. A re-read that fails (the broker down during a fault) is
        counted and tried again at the next quiet spell; the live consumer
        goes on.
        """
        from confluent_kafka import KafkaException

        self.rereads += 1
        c = self._consumer("live-reread")
        try:
            c.assign(self._partitions(c, 5))
            last = start = time.monotonic()
            while not self._stop.is_set() and time.monotonic() - last < 2.0 and time.monotonic() - start < 60:
                msgs = c.consume(10000, 0.5)
                if msgs:
                    last = time.monotonic()
                    self._note(msgs, reread=True)
        except (KafkaException, RuntimeError):
            self.reread_failures += 1
        finally:
            c.close()

    def _run(self) -> None:
        try:
            c = self._consumer("live")
            c.assign(self._partitions(c, 30))
            while not self._stop.is_set():
                if self._recheck.is_set():
                    self._recheck.clear()
                    self._reread()
                self._note(c.consume(5000, 0.2), reread=False)
            c.close()
        except BaseException as exc:  # surfaced by wait_for / stop
            self.error = exc

    def wait_for(self, keys: Iterable[bytes], timeout_s: float) -> float | None:
        """Wait until every key in ``keys`` was seen; returns the time the last one arrived.

        While keys are missing and none arrived for 5 s (then 10, 20, ...),
        asks the reader thread to read the topics again (see the class).
        """
        want = set(keys)
        missing = set(want)
        end = time.monotonic() + timeout_s
        quiet_s, asked = 5.0, time.monotonic()
        with self._cv:
            while True:
                missing = {k for k in missing if k not in self.first_seen}
                if not missing:
                    return max((self.first_seen[k] for k in want), default=time.time())
                now = time.monotonic()
                left = end - now
                if left <= 0 or self.error is not None:
                    return None
                if now - max(self._last_new, asked) >= quiet_s:
                    self._recheck.set()
                    asked, quiet_s = now, min(quiet_s * 2, 40.0)
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
