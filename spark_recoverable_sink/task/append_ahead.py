"""A task's WAL appends run one chunk ahead of its produces: the disk's commit (an fsync with ``wal_sync="commit"``)
of chunk N+1 overlaps the produce of chunk N and the encoding of chunk N+2.

Runs on the executor, in the Python worker, around a task's loop (:func:`.writer.write_partitions`). Nothing here is
pickled.

Guarantees:

* WAL first, then produce: a chunk is handed on (``then``, the task mode's produce) only after its WAL transaction
  committed, on the task's own thread, in the order the chunks were appended;
* correctness never depends on the appending thread: it only writes to the WAL. A chunk it appended whose ``then``
  never ran (the task failed, or the thread never came back within :data:`APPEND_BOUND_S`) belongs to an attempt
  that is never committed: recovery drops it and Spark re-runs the task;
* one append at a time per worker (a single thread, FIFO), at most one chunk awaiting its produce per task;
* a task's first chunk of each Spark partition (it opens the WAL attempt, and may recreate a slot the disk refused:
  :func:`.writer._append`) is appended on the task's thread, once what was ahead has been handed on.

Measured, ``write_partitions`` sync on the native engine, 1 M x 100 B, interleaved rounds (the commit log of this
change): see docs/CHANGELOG.md.
"""

from __future__ import annotations

import concurrent.futures
import logging
import os
import threading
from types import TracebackType
from typing import Callable

from ..errors import WalWriteError

__all__ = ["AppendAhead", "APPEND_BOUND_S"]

log = logging.getLogger(__name__)

#: How long a task waits for one WAL append on the appending thread before it fails with WalWriteError (a disk that
#: does not answer; the append itself has no bound of its own, as on the task's thread).
APPEND_BOUND_S = 300.0

_pool: concurrent.futures.ThreadPoolExecutor | None = None
_pool_pid = 0
_pool_lock = threading.Lock()


def _appender() -> concurrent.futures.ThreadPoolExecutor:
    """This process's appending thread (made anew in a forked child: threads do not survive a fork)."""
    global _pool, _pool_pid
    with _pool_lock:
        if _pool is None or _pool_pid != os.getpid():
            _pool = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="rks-wal-append")
            _pool_pid = os.getpid()
        return _pool


class AppendAhead:
    """One task's appends, one ahead of its produces. Use as a context manager around the task's loop.

    ``append(write, then)``: ``write()`` appends a chunk to the WAL (raising WalWriteError / WalFullError when
    nothing was written); ``then()`` hands the committed chunk on. Leaving the block normally hands on the last
    chunk; leaving it by an exception waits (bounded) for the append in flight and hands nothing on.
    """

    def __init__(self, where: str, bound_s: float = APPEND_BOUND_S) -> None:
        self.where = where  # for the error of an append that did not come back: the sink and slot
        self.bound_s = bound_s
        self._pending: tuple[concurrent.futures.Future[None], Callable[[], None]] | None = None

    def __enter__(self) -> "AppendAhead":
        return self

    def append(self, write: Callable[[], None], then: Callable[[], None], *, inline: bool = False) -> None:
        """Append a chunk on the appending thread (``inline``: on this one, after what is ahead was handed on), then
        hand on the chunk before it, whose append has committed.

        Raises:
            WalWriteError / WalFullError: an append failed (nothing of that chunk written, nothing after it handed on).
            Whatever ``then`` raises.
        """
        if inline:
            self.settle()
            write()
            then()
            return
        future = _appender().submit(write)
        pending, self._pending = self._pending, (future, then)
        if pending is not None:
            self._hand_on(*pending)

    def settle(self) -> None:
        """Hand on the chunk ahead, once its append committed.

        Raises:
            WalWriteError / WalFullError: its append failed.
        """
        pending, self._pending = self._pending, None
        if pending is not None:
            self._hand_on(*pending)

    def _hand_on(self, future: concurrent.futures.Future[None], then: Callable[[], None]) -> None:
        try:
            future.result(timeout=self.bound_s)
        except concurrent.futures.TimeoutError:
            raise WalWriteError(f"{self.where}: a WAL append did not finish within {self.bound_s:.0f} s (the disk "
                                "does not answer); nothing after it was produced", self.where) from None
        then()

    def __exit__(self, et: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        if et is None:
            self.settle()
            return
        pending, self._pending = self._pending, None
        if pending is not None:  # the task fails: its chunk in flight is never handed on (its attempt stays open)
            try:
                pending[0].result(timeout=self.bound_s)
            except BaseException as e:  # noqa: BLE001 - the task's own error is the one raised
                log.warning("where=%s append_after_failure=%s", self.where, type(e).__name__)
