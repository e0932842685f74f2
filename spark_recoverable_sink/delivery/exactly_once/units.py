"""Exactly-once units of one worker process: committed by the task, else kept and retried until they finish.

A unit stays in the WAL until its transaction is committed (or its lane's
marker proves it already was): then, and only then, its chunks and attempt
record are deleted. Units not yet committed wait here, oldest batch first,
for the task's own retries, the worker's poller thread, a drain job or an
adopter after a crash: nothing depends on any one of them being alive. Per
lane, a unit is never tried while an older unit of the same lane waits (the
marker keeps only the latest batch).

A unit ends in one of four ways: committed; skipped (its marker proves Kafka
has it: logged at WARNING, counted apart from acked rows); set aside as a
mismatch (kept in the WAL, named in every report); or refused (a record of
it refused for good: every record of the unit goes to the dead-letter store,
the refused ones with the broker's reason, so the driver fails the batch with
:class:`.DeadLetterError`).
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from ... import _points
from ...config import SinkConfig
from ...deadline import Deadline
from ...ids import record_id_at
from ...schema import chunk_run
from ...wal.format import AttemptKey, ChunkKey, decode_chunk
from ...wal.records import AttemptState
from ..dead_letters import DeadLetterRouter, dead_letters_from
from .commit import Committer
from .lane import COMMITTED, MISMATCH, PENDING, REFUSED, SKIPPED, Unit
from .names import lane_id
from .parts import uncommitted_rows

__all__ = ["UnitBook", "units_of", "UNIT_REFUSED_CODE"]

log = logging.getLogger(__name__)

_BACKOFF_S = (0.05, 0.2, 0.5, 1.0, 2.0)
#: Error code of the dead letters that were not refused themselves but belong to a refused unit.
UNIT_REFUSED_CODE = -1


def units_of(wal: Any, committed: dict[AttemptKey, AttemptState], chunks: list[tuple[ChunkKey, int]]) -> list[Unit]:
    """The units of committed exactly-once attempts in a slot, from its chunk keys (in sequence order)."""
    by_attempt: dict[AttemptKey, list[tuple[ChunkKey, int]]] = {}
    for ck, size in chunks:
        if ck.attempt in committed:
            by_attempt.setdefault(ck.attempt, []).append((ck, size))
    units = []
    for ak, cks in sorted(by_attempt.items(), key=lambda kv: (kv[0].batch, kv[0].origin, kv[0].gen)):
        cks.sort(key=lambda c: c[0].first_seq)
        raw = wal.read_chunk(cks[0][0])
        run = chunk_run(decode_chunk(raw)) if raw is not None else ""
        st = committed[ak]
        units.append(Unit(wal, ak, run, st.rows, cks, digest=st.digest))
    return units


class UnitBook:
    """Units not yet known to be in Kafka, and the one lock under which any unit is published."""

    def __init__(self, config: SinkConfig, committer: Committer, router: DeadLetterRouter) -> None:
        self.config = config
        self.committer = committer
        self.router = router
        self._lock = threading.Lock()
        self._pending: dict[tuple[int, AttemptKey], Unit] = {}
        self.mismatched: dict[str, str] = {}  # unit -> why it was set aside (reported in every report)
        self.skipped_rows = 0  # rows of units skipped because Kafka already had them (reported apart)
        self.refused_rows = 0  # rows of refused units (dead-lettered)

    # -- state ----------------------------------------------------------------------

    def add(self, unit: Unit) -> None:
        with self._lock:
            self._pending[(id(unit.wal), unit.key)] = unit

    def pending_rows(self) -> int:
        with self._lock:
            return sum(u.rows for u in self._pending.values())

    def forget(self, unit: Unit) -> None:
        """Drop a unit from the book (a task's own mismatch: the task deletes it from the WAL)."""
        with self._lock:
            self._pending.pop((id(unit.wal), unit.key), None)

    def references(self, wal: Any) -> bool:
        with self._lock:
            return any(u.wal is wal for u in self._pending.values())

    def waiting(self) -> list[dict[str, Any]]:
        """Every unit still waiting: lane, batch, rows, tries and last error (reports, settle errors)."""
        with self._lock:
            return [{"lane": lane_id(self.config.name, u.run, u.lane), "batch": u.batch, "rows": u.rows,
                     "tries": u.attempts, "last_error": u.last_error} for u in self._ordered()]

    def problems(self) -> tuple[str, ...]:
        """Units set aside, and units still waiting with an error (every report of the worker names them)."""
        aside = tuple(f"exactly-once unit set aside ({where}): {why}" for where, why in sorted(self.mismatched.items()))
        return aside + tuple(f"exactly-once unit lane={w['lane']} batch={w['batch']} rows={w['rows']} not committed "
                             f"after {w['tries']} tries: {w['last_error']}" for w in self.waiting() if w["last_error"])

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
                mine = (id(unit.wal), unit.key) in self._pending
                outcome = self._try(unit, deadline) if mine and not self._blocked(unit) else unit.outcome
            if outcome != PENDING:
                return outcome
            if deadline.expired():
                # The task returns without it: a mismatch met later (its lane moved on) has nobody left to
                # raise it, so it is set aside, kept in the WAL and reported, and holds the lane no longer.
                unit.abandoned = True
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
                if not self._blocked(unit):  # a pending one does not hold up units of other lanes
                    self._try(unit, deadline)
            return sum(u.rows for u in self._pending.values())
        finally:
            self._lock.release()

    def _ordered(self) -> list[Unit]:
        return sorted(self._pending.values(), key=lambda u: (u.batch, u.lane, u.key.gen))

    def _blocked(self, unit: Unit) -> bool:
        """Whether an older unit of the same lane still waits here (it must commit first)."""
        return any(u.run == unit.run and u.lane == unit.lane and u.batch < unit.batch
                   for u in self._pending.values())

    def _try(self, unit: Unit, deadline: Deadline) -> str:
        outcome = self.committer.commit(unit, deadline)
        where = (id(unit.wal), unit.key)
        if outcome == COMMITTED:
            _points.point("eo.committed", batch=unit.batch, lane=unit.lane, rows=unit.rows)
        if outcome in (COMMITTED, SKIPPED):
            unit.wal.prune(chunks=unit.chunks, attempts_done=[unit.key])
            del self._pending[where]
            if outcome == SKIPPED:
                self.skipped_rows += unit.rows
                log.warning("sink=%s batch=%d lane=%d rows=%d skipped, not published again: %s",
                            self.config.name, unit.batch, unit.lane, unit.rows, unit.why)
        elif outcome == MISMATCH:
            if not unit.own or unit.abandoned:  # a waiting task's own mismatch is its error (task.exactly_once)
                del self._pending[where]  # kept in the WAL
                why = f"batch {unit.batch} lane {unit.lane} run {unit.run}: {unit.why}"
                self.mismatched[f"{unit.wal.path}:{unit.key}"] = why
                log.error("sink=%s exactly-once mismatch: %s", self.config.name, why)
        elif outcome == REFUSED:
            self._refuse(unit)
            del self._pending[where]
        elif unit.attempts == 1 or unit.attempts % 10 == 0:
            log.warning("sink=%s batch=%d lane=%d rows=%d not committed yet (try %d): %s",
                        self.config.name, unit.batch, unit.lane, unit.rows, unit.attempts, unit.last_error)
        return outcome

    def _refuse(self, unit: Unit) -> None:
        """Every record of a refused unit into the dead-letter store, the unit out of the WAL, in one transaction."""
        refused = {(ck, i): (code, text) for ck, i, code, text in unit.refused}
        named = []
        dead = []
        for ck, _size in unit.chunks:
            raw = unit.wal.read_chunk(ck)
            if raw is None:
                continue
            batch = decode_chunk(raw)
            named += [record_id_at(batch, ck.first_seq, i).hex() for (k, i) in refused if k == ck and i >= 0]
            dead.append((ck, batch))
        first = ", ".join(named) or "(not identified)"
        reason = unit.refused[0][3] if unit.refused else "refused"
        letters = []
        for ck, batch in dead:  # (of a unit committed in parts, only the parts not committed before)
            pending = uncommitted_rows(unit, batch, ck.first_seq)
            mine = [(i, *refused[(ck, i)]) for i in range(batch.num_rows) if (ck, i) in refused]
            others = [(i, UNIT_REFUSED_CODE, f"not published: the exactly-once unit (batch {unit.batch}, lane "
                       f"{unit.lane}) is published whole or not at all, and its record {first} was refused "
                       f"for good: {reason}") for i in range(batch.num_rows) if (ck, i) not in refused and pending(i)]
            letters += dead_letters_from(self.config, ck, batch, mine + others)
        letters.sort(key=lambda kd: kd[1].error_code == UNIT_REFUSED_CODE)  # the refused records first
        unit.wal.prune(chunks=unit.chunks, dead=letters, attempts_done=[unit.key])
        unit.dead_rows = len(letters)
        self.refused_rows += len(letters)
        done = "none was published" if not unit.parts or not unit.parts[1] else (
            f"except its {unit.rows - len(letters)} records of the {unit.parts[1]} of its {unit.parts[0]} parts "
            "committed before, which are in Kafka")
        log.error("sink=%s batch=%d lane=%d rows=%d exactly-once unit refused: record %s refused for good "
                  "(%s); all its records are in the dead-letter store, %s", self.config.name,
                  unit.batch, unit.lane, unit.rows, first, reason, done)
        for dkey, d in letters:  # the refused records are announced; the rest is in the line above
            self.router.stored(unit.wal, dkey, d, announce=d.error_code != UNIT_REFUSED_CODE)

    def close(self) -> None:
        with self._lock:
            self.committer.close()
