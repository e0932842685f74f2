"""A chunk's life as one explicit state machine, and the per-attempt chunk count.

Every WAL chunk the publisher knows is tracked by one :class:`ChunkTracker`
whose ``state`` is the single truth about where it is::

    NEW -> QUEUED -> IN_FLIGHT -> REPORTED -> DONE -> PRUNED
             |          |  ^         |
             |          v  |         v
             +------> RETRY_WAIT <---+

* ``QUEUED``: in the WAL, waiting for room in the client's queue (async mode, replays);
* ``IN_FLIGHT``: a round of ``produce`` calls went out; delivery reports arrive;
* ``REPORTED``: every report of the round is in; failures still to be matched to records;
* ``RETRY_WAIT``: some records failed (or the round was abandoned): re-read from the WAL after a backoff;
* ``DONE``: every record acked or dead; waiting for the prune to delete it;
* ``PRUNED``: deleted from the WAL; forgotten.

:class:`ChunkBook` is the one place transitions happen: it validates each one
and keeps an index per state (so a step finds its chunks without a scan).
Because a tracker is in exactly one state, a step that raises halfway leaves
every chunk where it was, and the next pass takes it up again.

Delivery reports of a round go to that round's :class:`.rounds.Round`; a
tracker's methods turn them into acked, failed and dead records. Only the
:class:`ChunkBook` moves a tracker between states; only the tracker's own
methods change its records' fates.
"""

from __future__ import annotations

import enum
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterator

from ..wal.format import ChunkKey
from .attempts import AttemptTracker
from .codes import BATCH_LEVEL, NON_RETRIABLE
from .rounds import Round

if TYPE_CHECKING:  # pragma: no cover
    import pyarrow as pa

    from ..wal.log import Wal

__all__ = ["State", "ChunkTracker", "ChunkBook", "RetryPlan", "TransitionError"]


class State(enum.Enum):
    NEW = "new"
    QUEUED = "queued"
    IN_FLIGHT = "in_flight"
    REPORTED = "reported"
    RETRY_WAIT = "retry_wait"
    DONE = "done"
    PRUNED = "pruned"


_ALLOWED: dict[State, frozenset[State]] = {
    State.NEW: frozenset({State.QUEUED, State.IN_FLIGHT}),
    State.QUEUED: frozenset({State.IN_FLIGHT, State.RETRY_WAIT}),
    State.IN_FLIGHT: frozenset({State.REPORTED, State.RETRY_WAIT}),
    State.REPORTED: frozenset({State.RETRY_WAIT, State.DONE}),
    State.RETRY_WAIT: frozenset({State.IN_FLIGHT}),
    State.DONE: frozenset({State.PRUNED}),
    State.PRUNED: frozenset(),
}


@dataclass(frozen=True)
class RetryPlan:
    """Which records of a chunk a retry round sends, and which wait for a later one."""

    indices: list[int]
    rest: list[tuple[int, Any]]
    isolating: bool


class TransitionError(RuntimeError):
    """A chunk was asked to move where its state machine does not go (a bug, never data)."""


class ChunkTracker:
    """Delivery state of the records of one WAL chunk (see the module docstring).

    ``acked`` and ``dead`` accumulate over rounds. Delivery reports carry no
    headers, so a failed record is identified afterwards against the chunk
    read back from the WAL (:meth:`resolve_failures`).
    """

    __slots__ = ("wal", "key", "rows", "size", "attempt", "_acked", "dead", "failed", "round", "retries",
                 "retried_records", "next_retry_at", "replayed", "skip", "state", "batch", "isolate", "isolate_size",
                 "isolating")

    def __init__(self, wal: "Wal", key: ChunkKey, rows: int, size: int, attempt: AttemptTracker,
                 replayed: bool = False, skip: frozenset[int] = frozenset()) -> None:
        self.wal = wal
        self.key = key
        self.rows = rows
        self.size = size
        self.attempt = attempt
        self._acked = 0  # acks of finished rounds (the current round's are in ``round``)
        self.dead: list[tuple[int, int, str]] = []  # (index, error code, error text)
        self.failed: list[tuple[int, Any]] = []  # (index, KafkaError or None) awaiting retry
        self.round = Round(None, 0, 0.0)
        self.retries = 0
        self.retried_records = 0
        self.next_retry_at = 0.0
        self.replayed = replayed
        self.skip = skip  # indices never to send: dead-lettered in an earlier life of the slot
        self.state = State.NEW
        self.batch: "pa.RecordBatch | None" = None  # kept in memory while QUEUED, within a bound
        self.isolate: dict[int, Any] = {}  # index -> permanent error not proven alone yet
        self.isolate_size = 0  # records per isolation round (halved after a failing group)
        self.isolating = False  # the current round is an isolation round

    # -- rounds ------------------------------------------------------------------------

    @property
    def acked(self) -> int:
        return max(0, self._acked + self.round.acked)

    @property
    def finished(self) -> bool:
        return self.state in (State.DONE, State.PRUNED)

    @property
    def pending(self) -> int:
        return self.rows - self.acked - len(self.dead) - len(self.skip)

    def on_delivery(self, err: Any, msg: Any) -> None:
        """The current round's callback (tests; the produce loop binds ``round.on_delivery`` once)."""
        self.round.on_delivery(err, msg)

    def start_round(self, indices: list[int] | None, epoch: int = 0, now: float = 0.0) -> Round:
        self._acked += self.round.acked
        self.failed = []
        self.round = Round(indices, epoch, now)
        return self.round

    def seal(self, produced: int, sync_failed: list[tuple[int, Any]]) -> None:
        self.round.sync_failed = sync_failed
        self.round.expected = produced
        self.round.sealed = True

    @property
    def round_done(self) -> bool:
        return self.round.done

    def _round_rows(self) -> Iterator[int]:
        r = self.round.indices
        return iter(range(self.rows) if r is None else r)

    def resolve_failures(self, topics: list[str], keys: list[bytes | None], values: list[bytes | None]) -> None:
        """Turn this round's failed delivery reports (Python engine: no index) into record indices.

        Every record of the round with the failed content (topic, key, value)
        is taken as failed: exact unless a chunk repeats a record's content, in
        which case the identical records are all sent again (a duplicate, never
        a gap). A permanent error shared by several records of equal content,
        or a batch-level error, is not final: those records are isolated (each
        re-sent alone, where its report is its own) before any is dead.
        """
        rnd = self.round
        wanted = {(t, k, v) for _e, t, k, v in rnd.failed_raw}
        by_content: dict[tuple[str, bytes | None, bytes | None], list[int]] = {}
        for i in self._round_rows():
            c = (topics[i], keys[i], values[i])
            if c in wanted:
                by_content.setdefault(c, []).append(i)
        found = []
        for err, t, k, v in rnd.failed_raw:
            rows = by_content.get((t, k, v))
            if not rows:  # cannot tell which record failed: send the whole round again
                rows = [i for i in self._round_rows() if i not in self.skip]
                by_content[(t, k, v)] = rows
            found.append((err, rows))
        self._classify(found, len(rnd.failed_raw))
        rnd.failed_raw = []

    def resolve_exact(self) -> None:
        """Turn this round's failures attributed by the engine (native: each with its row) into record fates."""
        rnd = self.round
        self._classify([(err, [i]) for i, err in rnd.failed_at], len(rnd.failed_at))
        rnd.failed_at = []

    def _classify(self, found: list[tuple[Any, list[int]]], reported: int) -> None:
        """Failed (retried), isolated (a permanent error not proven alone yet) or dead, per record."""
        rnd = self.round
        alone = rnd.indices is not None and len(rnd.indices) == 1
        dead: dict[int, Any] = {}
        failed: dict[int, Any] = {}
        for err, rows in found:
            permanent = err.code() in NON_RETRIABLE
            for i in rows:
                if permanent and (alone or (len(rows) == 1 and err.code() not in BATCH_LEVEL)):
                    dead[i] = err
                elif permanent:
                    self.isolate[i] = err  # shared fate: proven alone first
                    failed[i] = err
                else:
                    failed[i] = err
        for i in dead:
            failed.pop(i, None)
            self.isolate.pop(i, None)
        # records now counted failed or dead that the round had counted acked
        rnd.acked -= (len(dead) + len(failed)) - reported
        self.dead.extend((i, e.code(), e.str()) for i, e in sorted(dead.items()))
        self.failed.extend(sorted(failed.items()))

    def fail_round(self) -> None:
        """Take every record of this round that is not dead as failed (failures cannot be matched)."""
        rnd = self.round
        known_dead = {i for i, _c, _e in self.dead} | self.skip
        failed = [i for i in self._round_rows() if i not in known_dead]
        err = rnd.failed_raw[0][0] if rnd.failed_raw else None
        rnd.acked -= len(failed) - len(rnd.failed_raw)
        rnd.failed_raw = []
        self.failed.extend((i, err) for i in failed)

    def account_sync_failures(self) -> None:
        for i, err in self.round.sync_failed:
            if err.code() in NON_RETRIABLE:
                self.dead.append((i, err.code(), err.str()))
            else:
                self.failed.append((i, err))
        self.round.sync_failed = []

    def account(self, columns: tuple[list[str], list[bytes | None], list[bytes | None]] | None) -> None:
        """Turn the finished round's reports into acked, dead and failed records.

        ``columns`` are the chunk's (topics, keys, values) read back from the
        WAL to match failed reports to records; ``None`` when they cannot be
        read (every record of the round not known dead then goes again). An
        isolation round's suspects leave isolation unless they failed again;
        the next isolation group halves after a failing group, doubles after
        one that went through.
        """
        rnd = self.round
        group = rnd.indices if self.isolating and rnd.indices is not None else []
        for i in group:
            self.isolate.pop(i, None)
        if rnd.failed_at:
            self.resolve_exact()
        if rnd.failed_raw:
            if columns is None:
                self.fail_round()
            else:
                self.resolve_failures(*columns)
        self.account_sync_failures()
        if group:
            failed_again = any(i in self.isolate for i in group)
            self.isolate_size = max(1, len(group) // 2) if failed_again else len(group) * 2
            self.isolating = False

    def retry_delay(self, backoff_s: float, backoff_max_s: float) -> float:
        """Seconds before the failed records go again: none while isolating, else exponential backoff."""
        if all(i in self.isolate for i, _e in self.failed):
            return 0.0
        return min(backoff_max_s, backoff_s * (2 ** self.retries))

    def schedule_retry(self, at: float) -> None:
        self.next_retry_at = at

    def plan_retry(self) -> RetryPlan:
        """The records of the next retry round (counted as retried): a group of the suspects, else every failed one."""
        iso = sorted(i for i, _e in self.failed if i in self.isolate)
        if iso:  # isolation: a group of the suspects, smaller after each failing group, down to one
            indices = iso[:self.isolate_size or max(1, (len(iso) + 1) // 2)]
            chosen = set(indices)
            rest = [f for f in self.failed if f[0] not in chosen]
        else:
            indices, rest = sorted({i for i, _e in self.failed}), []
            self.retries += 1
        self.retried_records += len(indices)
        return RetryPlan(indices, rest, bool(iso))

    def retry_started(self, plan: RetryPlan) -> None:
        """The retry round of ``plan`` went out (or failed to): the rest of the failed records wait their turn."""
        self.isolating = plan.isolating and self.state is State.IN_FLIGHT
        self.failed = plan.rest

    def take_batch(self) -> "pa.RecordBatch | None":
        """The chunk's records kept in memory while queued (``None``: read them back from the WAL)."""
        batch, self.batch = self.batch, None
        return batch

    def abandon_round(self) -> None:
        """Every record not known dead goes again (producer replaced, or the round timed out).

        Which records the old round got acked is unknown: all go again.
        """
        dead = {i for i, _c, _e in self.dead} | self.skip
        self._acked = 0
        self.round = Round(None, self.round.epoch, self.round.started)
        self.failed = [(i, None) for i in range(self.rows) if i not in dead]
        self.next_retry_at = 0.0

    def __repr__(self) -> str:
        return (f"ChunkTracker(key={self.key}, rows={self.rows}, state={self.state.value}, acked={self.acked}, "
                f"dead={len(self.dead)}, failed={len(self.failed)})")


class ChunkBook:
    """Every live chunk, by state; the one place where a chunk changes state."""

    def __init__(self) -> None:
        self._by_state: dict[State, dict[int, ChunkTracker]] = {s: {} for s in State if s is not State.PRUNED}

    def move(self, t: ChunkTracker, to: State) -> None:
        """Move ``t`` to ``to``.

        Raises:
            TransitionError: the state machine has no such edge (nothing changed).
        """
        if to not in _ALLOWED[t.state]:
            raise TransitionError(f"chunk {t.key}: {t.state.value} -> {to.value} is not a transition")
        if t.state is not State.NEW:
            del self._by_state[t.state][id(t)]
        if to is not State.PRUNED:
            self._by_state[to][id(t)] = t
        t.state = to

    def in_state(self, *states: State) -> list[ChunkTracker]:
        """A snapshot (safe to iterate while moving chunks)."""
        return [t for s in states for t in self._by_state[s].values()]

    def first(self, state: State) -> ChunkTracker | None:
        return next(iter(self._by_state[state].values()), None)

    def count(self, *states: State) -> int:
        return sum(len(self._by_state[s]) for s in states)

    def live(self) -> Iterator[ChunkTracker]:
        for s in (State.QUEUED, State.IN_FLIGHT, State.REPORTED, State.RETRY_WAIT, State.DONE):
            yield from list(self._by_state[s].values())

    def __bool__(self) -> bool:
        return any(self._by_state[s] for s in self._by_state if s is not State.NEW)

    @staticmethod
    def now() -> float:
        return time.monotonic()
