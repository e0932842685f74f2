"""The poller thread and the poll lock's hand-over (a mixin of :class:`.Publisher`).

Whoever holds the poll lock runs the delivery callbacks. A sync task holds
it for its whole run (:meth:`PollerThread.task`): the task thread produces and
polls, the poller thread waits. An async task gives it back while it writes
the WAL (:meth:`PollerThread.released`), so the poller produces the chunks
the task already committed while the task writes the next ones; the task
hands its chunks over through the inbox (:meth:`.Publisher.submit_chunk`)
without waiting for the lock.

The thread is a convenience, never needed for correctness: whatever it did
not get to is in the WAL and found at the next open.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from typing import Any, Callable, Iterator

from .chunks import ChunkBook, State

__all__ = ["PollerThread"]

log = logging.getLogger("spark_recoverable_sink.delivery.publisher")


class PollerThread:
    """The poller thread's loop, the poll lock and its hand-over to task threads."""

    config: Any
    dead_letters: Any
    _book: ChunkBook
    _pruner: Any
    _inbox: Any
    on_idle: Callable[[], None] | None

    def _init_poller(self) -> None:
        self._lock = threading.RLock()  # the poll lock: all delivery state changes under it
        self._tasks_waiting = 0  # the poller steps aside while a task waits for the lock
        self._stop = threading.Event()
        self._wake = threading.Event()  # set when a task hands over a chunk
        self._thread: threading.Thread | None = None

    def tick(self, timeout_s: float = 0.0, backlog_chunks: int | None = 0) -> int:  # pragma: no cover
        raise NotImplementedError

    def producer(self) -> Any:  # pragma: no cover - provided by Publisher
        raise NotImplementedError

    def start(self) -> None:
        """Start the poller thread (idempotent)."""
        if self._thread is None or not self._thread.is_alive():
            self.producer()
            self._stop.clear()
            self._thread = threading.Thread(target=self._run, name=f"rks-poller-{self.config.name}", daemon=True)
            self._thread.start()

    def _stop_thread(self, timeout_s: float) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(max(timeout_s, 1.0))

    def _run(self) -> None:
        while not self._stop.is_set():
            if self._tasks_waiting:  # a lock is not fair: let the task have it
                self._stop.wait(0.001)
                continue
            try:
                if (self._inbox or self._book.count(State.QUEUED)) and self.tick(0, backlog_chunks=1):
                    continue  # one chunk at a time: a task may be waiting
                if self._book or self.dead_letters.busy or self._pruner.pending():
                    self.tick(0.02)
                else:
                    self.tick(0)
                    if self.on_idle is not None:
                        self.on_idle()
                    self._wake.wait(0.1)
                    self._wake.clear()
            except Exception:  # keep the thread alive; every error here is logged
                log.exception("sink=%s poller iteration failed", self.config.name)
                self._stop.wait(0.5)

    @property
    def lock(self) -> threading.RLock:
        """The poll lock (taken before any other lock of the runtime)."""
        return self._lock

    def _acquire_for_task(self) -> None:
        self._tasks_waiting += 1
        try:
            self._lock.acquire()
        finally:
            self._tasks_waiting -= 1

    @contextlib.contextmanager
    def task(self) -> Iterator[None]:
        """Hold the poll lock for a task: the task thread polls, the poller waits."""
        self._acquire_for_task()
        try:
            yield
        finally:
            self._lock.release()

    @contextlib.contextmanager
    def released(self) -> Iterator[None]:
        """Inside :meth:`task`: give the poll lock back for a while (an async task writing the WAL).

        The body must not touch delivery state except through
        :meth:`.Publisher.submit_chunk` and methods that take the lock themselves.
        """
        self._lock.release()
        try:
            yield
        finally:
            self._acquire_for_task()
