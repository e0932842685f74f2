"""A task attempt's chunks in one slot, counted by key."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from ..wal.format import AttemptKey, ChunkKey

if TYPE_CHECKING:  # pragma: no cover
    from ..wal.log import Wal

__all__ = ["AttemptTracker"]


class AttemptTracker:
    """A task attempt's chunks in one slot: which are still in the WAL.

    Counted by chunk key, so a chunk pruned twice is counted once: the attempt
    record can never go while one of its chunks is still in the WAL.
    """

    def __init__(self, wal: "Wal", key: AttemptKey, committed: bool = False) -> None:
        self.wal = wal
        self.key = key
        self._lock = threading.Lock()
        self._outstanding: set[ChunkKey] = set()
        self._closed = committed  # committed, or abandoned by a failed task

    def add_chunk(self, key: ChunkKey) -> None:
        with self._lock:
            self._outstanding.add(key)

    def finished_without(self, keys: set[ChunkKey]) -> bool:
        """Whether the attempt record can go once ``keys`` are pruned (changes nothing)."""
        with self._lock:
            return self._closed and not (self._outstanding - keys)

    def chunk_pruned(self, key: ChunkKey) -> bool:
        """Count ``key`` gone (idempotent); True when the attempt record can go too."""
        with self._lock:
            self._outstanding.discard(key)
            return self._closed and not self._outstanding

    @property
    def outstanding(self) -> int:
        return len(self._outstanding)

    def close(self) -> bool:
        """Mark committed (or abandoned); True when no chunk is left, so the record can go."""
        with self._lock:
            self._closed = True
            return not self._outstanding
