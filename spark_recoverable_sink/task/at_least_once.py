"""What an at-least-once task does with each chunk once it is in the WAL, and at its end.

Two modes with the methods of :class:`.writer.TaskMode`:

* sync (``ack_timeout_s > 0``): each committed chunk is produced on the task
  thread at once; at the end the task waits for acks up to ``ack_timeout_s``;
* async (``ack_timeout_s == 0``): each committed chunk goes to the poller
  through the inbox; a task still writing after ``OVERLAP_AFTER_S`` gives
  the poll lock back so the poller produces while it writes the rest.

Either way a chunk reaches the producer only after its WAL transaction
committed; whatever is not acked when the task returns stays in the WAL and
is delivered by the worker's poller, a drain job or an adopter.
"""

from __future__ import annotations

import contextlib
import time
from typing import TYPE_CHECKING, Iterator

import pyarrow as pa

from ..delivery.attempts import AttemptTracker
from ..delivery.chunks import ChunkTracker
from ..delivery.contact import ContactDeadline
from ..wal.format import AttemptKey, ChunkKey
from ..wal.records import AT_LEAST_ONCE

if TYPE_CHECKING:  # pragma: no cover
    from .runtime import WorkerRuntime

__all__ = ["AtLeastOnceTask", "OVERLAP_AFTER_S"]

#: Async tasks: after this long writing, the task lets the poller produce its
#: committed chunks while it writes the rest. Measured (docs/PERFORMANCE.md):
#: overlapping from the first chunk shortened the time to durable of long
#: tasks but, on a CPU-bound worker, lengthened every micro-batch (the task
#: and the poller share the interpreter lock); short tasks return first.
OVERLAP_AFTER_S = 0.5


class AtLeastOnceTask:
    """One at-least-once task's chunks: produced now (sync) or handed to the poller (async).

    A coalesced task writes several Spark partitions, each its own WAL
    attempt (:meth:`begin`); it waits for their acks and prunes once, at its end.
    """

    guarantee = AT_LEAST_ONCE
    digest = 0

    def __init__(self, rt: "WorkerRuntime", batch: int, t0: float) -> None:
        self.rt = rt
        self.batch = batch
        self.publisher = rt.publisher
        self.sync = rt.config.ack_timeout_s > 0
        self.attempts: dict[AttemptKey, AttemptTracker] = {}
        self.trackers: list[ChunkTracker] = []
        self._t0 = t0
        self._lend = not self.sync  # async: lend the poll lock once the task has written for a while
        self._overlap = contextlib.ExitStack()

    @contextlib.contextmanager
    def writing(self) -> Iterator[None]:
        """Around the task's loop: the poll lock lent to the poller (async, long tasks) is taken back after it."""
        with self._overlap:
            yield

    def begin(self, origin: int) -> AttemptKey:
        """A new WAL attempt for the rows of Spark partition ``origin`` (a fresh generation in the own slot)."""
        key = AttemptKey(self.batch, origin, self.rt.own_wal().reserve_gen())
        self.attempts[key] = AttemptTracker(self.rt.own_wal(), key)
        return key

    def chunk(self, key: ChunkKey, norm: pa.RecordBatch, size: int) -> None:
        """The chunk ``key`` is committed in the WAL: hand it to delivery."""
        attempt = self.attempts[key.attempt]
        attempt.add_chunk(key)
        t = ChunkTracker(self.rt.own_wal(), key, norm.num_rows, size, attempt)
        self.trackers.append(t)
        if self.sync:
            self.publisher.produce_chunk(t, norm)
            self.publisher.tick(0)
            return
        self.publisher.submit_chunk(t, norm)  # produced by the poller thread
        if self._lend and time.monotonic() - self._t0 >= OVERLAP_AFTER_S:
            self._overlap.enter_context(self.publisher.released())
            self._lend = False

    def abandon(self) -> None:
        """The task failed before its attempts committed: their chunks stay until acked (or are dropped at recovery)."""
        for attempt in self.attempts.values():
            self.publisher.attempt_closed(attempt)

    def finish(self, rows: int) -> int:
        """The attempts are committed in the WAL: wait for acks (sync), prune; returns the records acked."""
        for attempt in self.attempts.values():
            self.publisher.attempt_closed(attempt)
        if self.trackers and self.sync:
            self.publisher.wait_finished(self.trackers,
                                         ContactDeadline(self.rt.config.ack_timeout_s, self.publisher.contact))
        self.publisher.prune()
        return sum(t.acked for t in self.trackers)

    def share(self, key: AttemptKey) -> tuple[int, int, int]:
        """(acked, dead-lettered, skipped) records of one attempt of this task (after :meth:`finish`)."""
        mine = [t for t in self.trackers if t.key.attempt == key]
        return sum(t.acked for t in mine), sum(len(t.dead) for t in mine), 0

    def dead(self) -> int:
        """Records of this task refused for good (dead-lettered)."""
        return sum(len(t.dead) for t in self.trackers)

    def skipped(self) -> int:
        return 0  # at-least-once never skips a record

    def counts(self) -> tuple[int, int]:
        return 0, 0  # no lanes, no transactions
