"""Chunks in the WAL waiting to be produced: an async task's inbox, and the memory kept for queued chunks.

An async task hands each chunk it committed to the WAL to the :class:`Inbox`
without the poll lock (deque appends are atomic); the next pass files it as
QUEUED. A queued chunk keeps its Arrow batch in memory up to a bound
(:class:`BacklogMemory`); beyond it, the batch is read back from the WAL
when its turn comes. :func:`room_for` says whether the client's queue can take
a whole chunk without blocking the poll lock.
"""

from __future__ import annotations

import collections
from typing import TYPE_CHECKING, Any, Iterator

from .chunks import ChunkBook, ChunkTracker, State

if TYPE_CHECKING:  # pragma: no cover
    import pyarrow as pa

__all__ = ["Inbox", "BacklogMemory", "room_for", "QueueLimits"]

_BACKLOG_MEMORY = 256 * 1024 * 1024  # queued chunks kept in memory; more are read back from the WAL


class Inbox:
    """Committed chunks handed over by a task thread that does not hold the poll lock."""

    def __init__(self) -> None:
        self._items: collections.deque[tuple[ChunkTracker, "pa.RecordBatch | None"]] = collections.deque()

    def put(self, t: ChunkTracker, batch: "pa.RecordBatch | None") -> None:
        self._items.append((t, batch))

    def take(self) -> Iterator[tuple[ChunkTracker, "pa.RecordBatch | None"]]:
        while self._items:
            yield self._items.popleft()

    def trackers(self) -> list[ChunkTracker]:
        return [t for t, _b in list(self._items)]

    def __len__(self) -> int:
        return len(self._items)

    def __bool__(self) -> bool:
        return bool(self._items)


class BacklogMemory:
    """How many bytes of queued chunks are kept in memory (the rest is read back from the WAL)."""

    def __init__(self, limit: int = _BACKLOG_MEMORY) -> None:
        self.limit = limit
        self.used = 0

    def keep(self, t: ChunkTracker, batch: "pa.RecordBatch | None") -> None:
        """Keep ``batch`` with the queued chunk ``t`` if it fits (else ``t`` will be read back)."""
        fits = batch is not None and self.used + t.size <= self.limit
        t.batch = batch if fits else None
        self.used += t.size if fits else 0

    def take(self, t: ChunkTracker) -> "pa.RecordBatch | None":
        """The chunk's batch if it was kept (its bytes are given back), else ``None``."""
        batch = t.take_batch()
        if batch is not None:
            self.used -= t.size
        return batch


class QueueLimits:
    """The client's queue bounds, from the producer configuration."""

    def __init__(self, conf: dict[str, Any]) -> None:
        self.messages = int(conf.get("queue.buffering.max.messages", 100_000))
        self.bytes = int(conf.get("queue.buffering.max.kbytes", 1_048_576)) * 1024


def room_for(limits: QueueLimits, book: ChunkBook, producer: Any, t: ChunkTracker) -> bool:
    """Whether the client's queue can take the whole chunk ``t`` without blocking."""
    queued = len(producer)
    if queued == 0:
        return True  # a chunk larger than the queue still goes, when nothing else waits
    in_flight_bytes = sum(w.size for w in book.in_state(State.IN_FLIGHT))
    return queued + t.rows <= limits.messages * 0.9 and in_flight_bytes + t.size <= limits.bytes * 0.9
