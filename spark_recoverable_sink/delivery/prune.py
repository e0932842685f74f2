"""Pruning: delete done chunks and finished attempts, store dead letters (one WAL transaction per slot).

A chunk leaves ``DONE`` for ``PRUNED`` only once its transaction committed,
and its attempt counts it gone by key: pruning is idempotent per chunk, so an
attempt record can never be deleted while one of its chunks is in the WAL.
A failed transaction (any exception) leaves every chunk ``DONE`` and every
attempt queued: the next prune tries again.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from typing import Any, Callable

from .. import _points
from ..config import SinkConfig
from .attempts import AttemptTracker
from .chunks import ChunkBook, ChunkTracker, State
from .dead_letters import DeadLetterRouter, dead_letters_of

__all__ = ["Pruner"]

log = logging.getLogger(__name__)


class Pruner:
    """Runs prunes for one publisher (callers hold its poll lock)."""

    def __init__(self, config: SinkConfig, book: ChunkBook, router: DeadLetterRouter, *,
                 partitions_of: Callable[[str], int | None] | None = None,
                 on_acked: Callable[[], None] | None = None) -> None:
        self.config = config
        self._book = book
        self._router = router
        self._partitions_of = partitions_of  # topic -> partition count, for dead-letter reasons
        self._on_acked = on_acked  # told when a prune holds an acked chunk (the broker was reached)
        self._lock = threading.Lock()
        self.attempts_done: deque[AttemptTracker] = deque()

    def pending(self) -> bool:
        return bool(self.attempts_done) or self._book.count(State.DONE) > 0

    def run(self) -> None:
        with self._lock:
            done = self._book.in_state(State.DONE)
            closed_all: list[AttemptTracker] = []
            while self.attempts_done:
                closed_all.append(self.attempts_done.popleft())
            if not done and not closed_all:
                return
            if self._on_acked is not None and any(t.acked for t in done):
                self._on_acked()
            by_wal: dict[int, tuple[Any, list[ChunkTracker], list[AttemptTracker]]] = {}
            for t in done:
                by_wal.setdefault(id(t.wal), (t.wal, [], []))[1].append(t)
            for a in closed_all:
                by_wal.setdefault(id(a.wal), (a.wal, [], []))[2].append(a)
            for wal, trackers, closed in by_wal.values():
                try:
                    self._prune_slot(wal, trackers, closed)
                except Exception:  # the chunks stay DONE (acked: a crash only replays them)
                    log.exception("sink=%s prune of %s failed; will retry", self.config.name, wal.path)
                    self.attempts_done.extend(closed)

    def _prune_slot(self, wal: Any, trackers: list[ChunkTracker], closed: list[AttemptTracker]) -> None:
        keys_of: dict[int, tuple[AttemptTracker, set]] = {}
        for t in trackers:
            keys_of.setdefault(id(t.attempt), (t.attempt, set()))[1].add(t.key)
        finished = {a.key: None for a in closed}
        for a, keys in keys_of.values():
            if a.finished_without(keys):
                finished[a.key] = None
        dead = [d for t in trackers if t.dead for d in dead_letters_of(self.config, t, self._partitions_of)]
        _points.point("prune.slot", slot=wal.path, chunks=len(trackers))
        wal.prune(chunks=[(t.key, t.size) for t in trackers], dead=dead, attempts_done=list(finished))
        for t in trackers:  # committed: now, and only now, they are gone
            t.attempt.chunk_pruned(t.key)
            self._book.move(t, State.PRUNED)
        for dkey, d in dead:
            self._router.stored(wal, dkey, d)
