"""Exactly-once units of one worker process: committed by the task, else kept and retried.

A unit stays in the WAL until its transaction is committed (or its lane's
marker shows it already was): then, and only then, its chunks and attempt
record are deleted. Units not yet committed wait here, oldest batch first,
for the task's own retries, the worker's poller thread, a drain job or an
adopter after a crash: nothing depends on any one of them being alive.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from ... import _points
from ...config import SinkConfig
from ...deadline import Deadline
from ...schema import chunk_run
from ...wal.format import AttemptKey, ChunkKey, decode_chunk
from .transactions import COMMITTED, MISMATCH, PENDING, SKIPPED, Committer, Unit

__all__ = ["UnitBook", "units_of"]

log = logging.getLogger(__name__)

_BACKOFF_S = (0.05, 0.2, 0.5, 1.0, 2.0)


def units_of(wal: Any, committed: dict[AttemptKey, int], chunks: list[tuple[ChunkKey, int]]) -> list[Unit]:
    """The units of committed attempts in a slot, from its chunk keys (in key order: sequence order).

    ``committed`` maps each committed attempt to its row count.
    """
    by_attempt: dict[AttemptKey, list[tuple[ChunkKey, int]]] = {}
    for ck, size in chunks:
        if ck.attempt in committed:
            by_attempt.setdefault(ck.attempt, []).append((ck, size))
    units = []
    for ak, cks in sorted(by_attempt.items(), key=lambda kv: (kv[0].batch, kv[0].partition, kv[0].gen)):
        cks.sort(key=lambda c: c[0].first_seq)
        raw = wal.read_chunk(cks[0][0])
        run = chunk_run(decode_chunk(raw)) if raw is not None else ""
        units.append(Unit(wal, ak, run, committed[ak], cks))
    return units


class UnitBook:
    """Units not yet known to be in Kafka, and the one lock under which any unit is published."""

    def __init__(self, config: SinkConfig, committer: Committer) -> None:
        self.config = config
        self.committer = committer
        self._lock = threading.Lock()
        self._pending: dict[tuple[int, AttemptKey], Unit] = {}
        self.mismatched: dict[str, str] = {}  # unit -> why it was set aside (reported in every report)
        self.skipped_rows = 0

    # -- state ----------------------------------------------------------------------

    def add(self, unit: Unit) -> None:
        with self._lock:
            self._pending[(id(unit.wal), unit.key)] = unit

    def pending_rows(self) -> int:
        with self._lock:
            return sum(u.rows for u in self._pending.values())

    def references(self, wal: Any) -> bool:
        with self._lock:
            return any(u.wal is wal for u in self._pending.values())

    # -- publishing -----------------------------------------------------------------

    def commit(self, unit: Unit, deadline: Deadline) -> str:
        """Publish ``unit`` (a task's own), retrying with backoff until ``deadline``.

        Units of earlier batches waiting here go first: a worker never commits
        a batch's unit before an older one it holds.
        """
        self.add(unit)
        tries = 0
        while True:
            with self._lock:
                for older in self._ordered():
                    if older is unit:
                        break
                    self._try(older, deadline)
                outcome = self._try(unit, deadline) if (id(unit.wal), unit.key) in self._pending else unit.outcome
            if outcome != PENDING or deadline.expired():
                return outcome
            time.sleep(deadline.cap(_BACKOFF_S[min(tries, len(_BACKOFF_S) - 1)]))
            tries += 1

    def retry_pending(self, deadline: Deadline, blocking: bool = True) -> int:
        """One pass over the waiting units, oldest first; returns the rows still pending.

        With ``blocking=False`` (the poller thread) nothing waits behind a task.
        """
        if not self._lock.acquire(blocking=blocking):
            return -1
        try:
            for unit in self._ordered():
                if deadline.expired():
                    break
                self._try(unit, deadline)  # a pending one does not hold up units of other lanes
            return sum(u.rows for u in self._pending.values())
        finally:
            self._lock.release()

    def _ordered(self) -> list[Unit]:
        return sorted(self._pending.values(), key=lambda u: (u.batch, u.partition, u.key.gen))

    def _try(self, unit: Unit, deadline: Deadline) -> str:
        outcome = self.committer.commit(unit, deadline)
        if outcome == COMMITTED:
            _points.point("eo.committed", batch=unit.batch, partition=unit.partition, rows=unit.rows)
        if outcome in (COMMITTED, SKIPPED):
            unit.wal.prune(chunks=unit.chunks, attempts_done=[unit.key])
            del self._pending[(id(unit.wal), unit.key)]
            if outcome == SKIPPED:
                self.skipped_rows += unit.rows
                log.info("sink=%s batch=%d partition=%d rows=%d already in Kafka (lane marker): skipped",
                         self.config.name, unit.batch, unit.partition, unit.rows)
        elif outcome == MISMATCH:
            del self._pending[(id(unit.wal), unit.key)]  # kept in the WAL, set aside
            why = (f"batch {unit.batch} partition {unit.partition} has {unit.rows} rows, but the unit already "
                   f"committed to Kafka for it had {unit.found_rows} (mod 2^24)")
            self.mismatched[f"{unit.wal.path}:{unit.key}"] = why
            log.error("sink=%s exactly-once mismatch: %s", self.config.name, why)
        elif unit.attempts == 1 or unit.attempts % 10 == 0:
            log.warning("sink=%s batch=%d partition=%d rows=%d not committed yet (try %d): %s",
                        self.config.name, unit.batch, unit.partition, unit.rows, unit.attempts, unit.last_error)
        return outcome

    def close(self) -> None:
        with self._lock:
            self.committer.close()
