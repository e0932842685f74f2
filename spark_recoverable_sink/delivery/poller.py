"""The poller thread of a publisher, and the poll lock's hand-over between it and task threads.

Whoever holds the poll lock runs the delivery callbacks. A sync task holds
it for its whole run (:meth:`Poller.task`): the task thread produces and
polls, the poller thread waits. An async task gives it back while it writes
the WAL (:meth:`Poller.released`), so the poller produces the chunks the task
already committed while the task writes the next ones; the task hands its
chunks over through the publisher's inbox without waiting for the lock.

The thread is a convenience, never needed for correctness: whatever it did
not get to is in the WAL and found at the next open.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from typing import Any, Callable, Iterator

__all__ = ["Poller"]

log = logging.getLogger("spark_recoverable_sink.delivery.publisher")


class Poller:
    """One publisher's poll lock and background thread.

    ``tick(timeout_s, backlog_chunks)`` is the publisher's pass;
    ``has_queued()`` says whether chunks wait to be produced, ``busy()``
    whether anything is in flight or waits to be pruned or forwarded.
    ``on_idle`` (set by the runtime) runs between passes when nothing is busy.
    """

    def __init__(self, name: str, tick: Callable[[float, int | None], int], has_queued: Callable[[], bool],
                 busy: Callable[[], bool]) -> None:
        self.name = name
        self._tick = tick
        self._has_queued = has_queued
        self._busy = busy
        self.lock = threading.RLock()  # the poll lock: taken before any other lock of the runtime
        self.on_idle: Callable[[], None] | None = None
        self.thread: threading.Thread | None = None
        self._tasks_waiting = 0  # the poller steps aside while a task waits for the lock
        self._stop = threading.Event()
        self._wake = threading.Event()  # set when a task hands over a chunk

    def start(self) -> None:
        """Start the thread (idempotent)."""
        if self.thread is None or not self.thread.is_alive():
            self._stop.clear()
            self.thread = threading.Thread(target=self._run, name=f"rks-poller-{self.name}", daemon=True)
            self.thread.start()

    def wake(self) -> None:
        self._wake.set()

    def stop(self, timeout_s: float) -> None:
        self._stop.set()
        self._wake.set()
        if self.thread is not None and self.thread is not threading.current_thread():
            self.thread.join(max(timeout_s, 1.0))

    def _run(self) -> None:
        while not self._stop.is_set():
            if self._tasks_waiting:  # a lock is not fair: let the task have it
                self._stop.wait(0.001)
                continue
            try:
                if self._has_queued() and self._tick(0, 1):
                    continue  # one chunk at a time: a task may be waiting
                if self._busy():
                    self._tick(0.02, 0)
                else:
                    self._tick(0, 0)
                    if self.on_idle is not None:
                        self.on_idle()
                    self._wake.wait(0.1)
                    self._wake.clear()
            except Exception:  # keep the thread alive; every error here is logged
                log.exception("sink=%s poller iteration failed", self.name)
                self._stop.wait(0.5)

    def _acquire_for_task(self) -> None:
        self._tasks_waiting += 1
        try:
            self.lock.acquire()
        finally:
            self._tasks_waiting -= 1

    @contextlib.contextmanager
    def task(self) -> Iterator[None]:
        """Hold the poll lock for a task: the task thread polls, the poller waits."""
        self._acquire_for_task()
        try:
            yield
        finally:
            self.lock.release()

    @contextlib.contextmanager
    def released(self) -> Iterator[Any]:
        """Inside :meth:`task`: give the poll lock back for a while (an async task writing the WAL).

        The body must not touch delivery state except through the publisher's
        inbox and methods that take the lock themselves.
        """
        self.lock.release()
        try:
            yield
        finally:
            self._acquire_for_task()
