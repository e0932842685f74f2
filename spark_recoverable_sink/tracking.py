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
    """

    __slots__ = (
        "wal", "key", "rows", "size", "attempt", "acked", "dead", "failed", "sync_failed",
        "round_expected", "round_settled", "sealed", "retries", "retried_records",
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
        self.failed: list[tuple[int, Any]] = []  # (index, KafkaError) awaiting retry
        self.sync_failed: list[tuple[int, Any]] = []
        self.round_expected = 0
        self.round_settled = 0
        self.sealed = False
        self.retries = 0
        self.retried_records = 0
        self.next_retry_at = 0.0
        self.finished = False
        self.replayed = replayed
        self.epoch = 0  # which producer the current round went to
        self.skip = skip  # indices never to send: dead-lettered in an earlier life of the slot

    def on_delivery(self, index: int, err: Any, _msg: Any) -> None:
        """confluent-kafka delivery callback (bound to the record's index)."""
        if err is None:
            self.acked += 1
        elif err.code() in NON_RETRIABLE:
            self.dead.append((index, err.code(), err.str()))
        else:
            self.failed.append((index, err))
        self.round_settled += 1

    def start_round(self) -> None:
        self.sealed = False
        self.failed = []
        self.sync_failed = []
        self.round_settled = 0
        self.round_expected = 0

    def seal(self, produced: int, sync_failed: list[tuple[int, Any]]) -> None:
        self.sync_failed = sync_failed
        self.round_expected = produced
        self.sealed = True  # last: the poller reads the fields above once it sees this

    @property
    def round_done(self) -> bool:
        return self.sealed and self.round_settled >= self.round_expected

    @property
    def pending(self) -> int:
        return self.rows - self.acked - len(self.dead) - len(self.skip)

    def __repr__(self) -> str:
        return (f"ChunkTracker(key={self.key}, rows={self.rows}, acked={self.acked}, "
                f"dead={len(self.dead)}, failed={len(self.failed)}, finished={self.finished})")
