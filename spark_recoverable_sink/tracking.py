"""In-memory ack tracking: one tracker per WAL chunk, one per task attempt.

Delivery callbacks run on the publisher's poller thread only; the task thread
hands a chunk over by setting ``sealed`` after its last ``produce`` call and
never touches the counters afterwards. That keeps the per-record callback a
plain increment, with no lock.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

from .encoding import AttemptKey, ChunkKey

if TYPE_CHECKING:  # pragma: no cover
    from .wal import Wal

__all__ = ["ChunkTracker", "AttemptTracker", "NON_RETRIABLE", "PRODUCER_RESET"]


def _non_retriable_codes() -> frozenset[int]:
    from confluent_kafka import KafkaError

    names = [
        "MSG_SIZE_TOO_LARGE", "_MSG_SIZE_TOO_LARGE", "RECORD_LIST_TOO_LARGE", "INVALID_RECORD",
        "TOPIC_AUTHORIZATION_FAILED", "CLUSTER_AUTHORIZATION_FAILED", "TOPIC_EXCEPTION",
        "_UNKNOWN_PARTITION", "_INVALID_ARG", "UNSUPPORTED_FOR_MESSAGE_FORMAT", "POLICY_VIOLATION",
        "INVALID_REQUIRED_ACKS", "_INVALID_TYPE", "TRANSACTIONAL_ID_AUTHORIZATION_FAILED",
        # the topic does not exist (after topic.metadata.propagation.max.ms) and is not auto-created
        "UNKNOWN_TOPIC_OR_PART", "_UNKNOWN_TOPIC",
    ]
    return frozenset(getattr(KafkaError, n) for n in names if hasattr(KafkaError, n))


#: Kafka error codes after which a record is dead-lettered instead of retried.
NON_RETRIABLE = _non_retriable_codes()


def _producer_reset_codes() -> frozenset[int]:
    from confluent_kafka import KafkaError

    names = [
        "PRODUCER_FENCED", "INVALID_PRODUCER_EPOCH", "OUT_OF_ORDER_SEQUENCE_NUMBER", "UNKNOWN_PRODUCER_ID",
        "INVALID_PRODUCER_ID_MAPPING", "_FENCED", "_FATAL", "_INCONSISTENT", "_GAPLESS_GUARANTEE",
    ]
    return frozenset(getattr(KafkaError, n) for n in names if hasattr(KafkaError, n))


#: Error codes meaning the producer's idempotence state is broken: retrying on
#: the same producer cannot succeed, so the publisher replaces it.
PRODUCER_RESET = _producer_reset_codes()


class AttemptTracker:
    """A task attempt's chunks in one slot: how many are still in the WAL."""

    def __init__(self, wal: "Wal", key: AttemptKey, committed: bool = False) -> None:
        self.wal = wal
        self.key = key
        self._lock = threading.Lock()
        self._outstanding = 0
        self._closed = committed  # committed, or abandoned by a failed task

    def add_chunk(self) -> None:
        with self._lock:
            self._outstanding += 1

    def chunk_pruned(self) -> bool:
        """Count one chunk gone; True when the attempt record can go too."""
        with self._lock:
            self._outstanding -= 1
            return self._closed and self._outstanding == 0

    def close(self) -> bool:
        """Mark committed (or abandoned); True when no chunk is left, so the record can go."""
        with self._lock:
            self._closed = True
            return self._outstanding == 0


class ChunkTracker:
    """Delivery state of the records of one WAL chunk.

    ``acked`` and ``dead`` accumulate over rounds; a round is one pass of
    ``produce`` calls (the first, then one per retry). A round is settled when
    ``sealed`` and every record produced in it has had its callback.

    The delivery callback is one bound method per chunk (no per-record
    closure: it would cost a microsecond a record). Delivery reports carry no
    headers, so a failed record is identified afterwards, by content, against
    the chunk read back from the WAL (:meth:`resolve_failures`).
    """

    __slots__ = (
        "wal", "key", "rows", "size", "attempt", "acked", "dead", "failed", "failed_raw", "sync_failed",
        "round_expected", "round_settled", "round_indices", "sealed", "retries", "retried_records",
        "next_retry_at", "finished", "replayed", "epoch", "skip",
    )

    def __init__(self, wal: "Wal", key: ChunkKey, rows: int, size: int, attempt: AttemptTracker,
                 replayed: bool = False, skip: frozenset[int] = frozenset()) -> None:
        self.wal = wal
        self.key = key
        self.rows = rows
        self.size = size
        self.attempt = attempt
        self.acked = 0
        self.dead: list[tuple[int, int, str]] = []  # (index, error code, error text)
        self.failed: list[tuple[int, Any]] = []  # (index, KafkaError or None) awaiting retry
        self.failed_raw: list[tuple[Any, str, bytes | None, bytes | None]] = []  # (error, topic, key, value)
        self.sync_failed: list[tuple[int, Any]] = []
        self.round_expected = 0
        self.round_settled = 0
        self.round_indices: list[int] | None = None  # None: every record
        self.sealed = False
        self.retries = 0
        self.retried_records = 0
        self.next_retry_at = 0.0
        self.finished = False
        self.replayed = replayed
        self.epoch = 0  # which producer the current round went to
        self.skip = skip  # indices never to send: dead-lettered in an earlier life of the slot

    def on_delivery(self, err: Any, msg: Any) -> None:
        """confluent-kafka delivery callback (runs under the publisher's poll lock)."""
        if err is None:
            self.acked += 1
        else:
            self.failed_raw.append((err, msg.topic(), msg.key(), msg.value()))
        self.round_settled += 1

    def start_round(self, indices: list[int] | None) -> None:
        self.sealed = False
        self.failed = []
        self.failed_raw = []
        self.sync_failed = []
        self.round_settled = 0
        self.round_expected = 0
        self.round_indices = indices

    def seal(self, produced: int, sync_failed: list[tuple[int, Any]]) -> None:
        self.sync_failed = sync_failed
        self.round_expected = produced
        self.sealed = True

    @property
    def round_done(self) -> bool:
        return self.sealed and self.round_settled >= self.round_expected

    def resolve_failures(self, topics: list[str], keys: list[bytes | None], values: list[bytes | None]) -> None:
        """Turn this round's failed delivery reports into record indices.

        Every record of the round with the failed content (topic, key, value)
        is taken as failed: exact unless a chunk repeats a record's content,
        in which case the identical records are all sent again (a duplicate,
        never a gap). Acks already counted for those are taken back.
        """
        by_content: dict[tuple[str, bytes | None, bytes | None], list[int]] = {}
        wanted = {(t, k, v) for _e, t, k, v in self.failed_raw}
        for i in (range(self.rows) if self.round_indices is None else self.round_indices):
            c = (topics[i], keys[i], values[i])
            if c in wanted:
                by_content.setdefault(c, []).append(i)
        dead: dict[int, Any] = {}
        failed: dict[int, Any] = {}
        for err, t, k, v in self.failed_raw:
            found = by_content.get((t, k, v))
            if not found:
                # Cannot tell which record failed: send the whole round again.
                every = range(self.rows) if self.round_indices is None else self.round_indices
                found = [i for i in every if i not in self.skip]
                by_content[(t, k, v)] = found
            for i in found:
                (dead if err.code() in NON_RETRIABLE else failed)[i] = err
        for i in dead:
            failed.pop(i, None)
        # records now counted failed or dead that had been counted acked
        self.acked = max(0, self.acked - ((len(dead) + len(failed)) - len(self.failed_raw)))
        self.failed_raw = []
        self.dead.extend((i, e.code(), e.str()) for i, e in sorted(dead.items()))
        self.failed.extend(sorted(failed.items()))

    def fail_round(self) -> None:
        """Take every record of this round that is not dead as failed (failures cannot be matched)."""
        every = range(self.rows) if self.round_indices is None else self.round_indices
        known_dead = {i for i, _c, _e in self.dead} | self.skip
        failed = [i for i in every if i not in known_dead]
        err = self.failed_raw[0][0] if self.failed_raw else None
        self.acked = max(0, self.acked - (len(failed) - len(self.failed_raw)))
        self.failed_raw = []
        self.failed.extend((i, err) for i in failed)

    def settle_sync_failures(self) -> None:
        for i, err in self.sync_failed:
            if err.code() in NON_RETRIABLE:
                self.dead.append((i, err.code(), err.str()))
            else:
                self.failed.append((i, err))
        self.sync_failed = []

    @property
    def pending(self) -> int:
        return self.rows - self.acked - len(self.dead) - len(self.skip)

    def __repr__(self) -> str:
        return (f"ChunkTracker(key={self.key}, rows={self.rows}, acked={self.acked}, "
                f"dead={len(self.dead)}, failed={len(self.failed)}, finished={self.finished})")
