"""A task of Spark's real-time mode: rows one by one, into the WAL by group commits bounded in rows and time.

Under ``trigger(realTime=...)`` a Python sink is a ``foreach`` writer: Spark
calls ``open(partition, epoch)``, then ``process(row)`` per row as rows reach
the worker, then ``close(error)`` at the epoch's end (an epoch lasts the
trigger's duration: :mod:`..driver.realtime`). :class:`RealTimeTask` is the
executor side of one such epoch task:

* :class:`GroupBuffer` holds the rows ``process`` hands over and hands them
  on in groups: when it holds ``max_rows``, or when its oldest row has waited
  ``max_wait_s`` (checked at each row and, for a buffer no new row comes to, by
  a helper thread that only shortens the wait: ``close`` commits whatever is
  left, with or without it);
* a group commit turns the rows into one Arrow batch of the columns the
  driver chose (:class:`.schema.Columns`) and feeds it to the task path of
  ``write_partitions`` (:class:`.writer.TaskWrite`): normalised, named, one
  WAL transaction, *then* produced; the poll lock is held for that call only,
  so the worker's poller delivers acks and prunes between group commits of a
  long epoch;
* ``close`` commits what is buffered, marks the task's WAL attempt committed,
  waits for acks up to ``ack_timeout_s`` and returns the reports; a record not
  acked by then stays in the WAL (delivered by the poller, an adopter, a drain).

Nothing depends on ``close`` being called: a worker killed mid-epoch never
closed its task, Spark does not commit the epoch and runs it again from its
start offsets, and the next task of the sink on that ``wal_dir`` adopts the
dead worker's slot (its attempt never committed: what it holds unacked is
dropped, the re-run brings it again). Record ids are KEY ids of columns that
name a row for good (a Kafka source's topic, partition, offset) with batch 0
(:data:`EPOCH_FREE_KEYS`): a re-run of an epoch may cut it elsewhere, its
records keep their ids.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Sequence

import pyarrow as pa

from .. import _points
from ..ids import KEY, IdScheme, scheme_for
from ..report import TaskReport
from ..schema import Columns
from .runtime import get_runtime
from .writer import TaskWrite

if TYPE_CHECKING:  # pragma: no cover
    from ..config import SinkConfig

__all__ = ["GroupBuffer", "RealTimeTask", "EPOCH_FREE_KEYS", "rows_to_batch", "DEFAULT_MAX_ROWS",
           "DEFAULT_MAX_WAIT_S"]

log = logging.getLogger(__name__)

#: A group commit's bounds by default: rows, and how long its oldest row may wait (docs/PERFORMANCE.md).
DEFAULT_MAX_ROWS = 5000
DEFAULT_MAX_WAIT_S = 0.02
#: A helper thread with nothing to wait for ends after this long; the next row starts another.
_HELPER_IDLE_EXIT_S = 30.0
_HELPER_JOIN_S = 5.0


@dataclass(frozen=True)
class _EpochFreeKeys:
    """KEY ids with batch 0 whatever the epoch: the id plan of a real-time task (:class:`..driver.split.IdPlan`'s
    ``scheme``)."""

    def scheme(self, sink: str, run: str, batch: int, partition: int) -> IdScheme:
        return scheme_for(KEY, sink, run, 0)


EPOCH_FREE_KEYS = _EpochFreeKeys()


class GroupBuffer:
    """Rows handed over one by one, committed in groups of at most ``max_rows`` whose oldest row waited at most
    about ``max_wait_s``.

    ``commit(rows)`` is called with the buffer's lock held, so groups are
    committed one at a time, in order, from ``add`` (the caller's thread) or
    the helper thread. An error of a commit in the helper thread is kept and
    raised by the next :meth:`add` or :meth:`flush`; no group is committed
    after it (its rows were not accepted: the task must fail and Spark re-run
    the epoch).
    """

    def __init__(self, commit: Callable[[list[Any]], None], max_rows: int = DEFAULT_MAX_ROWS,
                 max_wait_s: float = DEFAULT_MAX_WAIT_S, helper: bool = True,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if max_rows < 1 or max_wait_s < 0:
            raise ValueError(f"a group holds at least one row and waits 0 s or more, not {max_rows}, {max_wait_s}")
        self._commit = commit
        self.max_rows = max_rows
        self.max_wait_s = max_wait_s
        self._clock = clock
        self._cond = threading.Condition(threading.Lock())
        self._rows: list[Any] = []
        self._oldest = 0.0  # clock() when the buffer's first row came
        self._error: BaseException | None = None
        self._closed = False
        self._helper_wanted = helper and max_wait_s > 0
        self._helper: threading.Thread | None = None
        self.groups = 0  # groups committed

    def add(self, row: Any) -> None:
        """Buffer ``row``; commit the group when it is full or its oldest row waited ``max_wait_s``.

        Raises:
            The error of an earlier group commit (nothing more is committed), or of this one.
        """
        with self._cond:
            self._raise_kept()
            now = self._clock()
            if not self._rows:
                self._oldest = now
                self._wake_helper()
            self._rows.append(row)
            if len(self._rows) >= self.max_rows or now - self._oldest >= self.max_wait_s:
                self._commit_locked()

    def flush(self) -> None:
        """Commit what is buffered now.

        Raises:
            The error of an earlier group commit, or of this one.
        """
        with self._cond:
            self._raise_kept()
            if self._rows:
                self._commit_locked()

    def close(self) -> None:
        """Stop the helper thread (bounded wait); the rows still buffered stay (:meth:`flush` first to keep them)."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
            helper = self._helper
        if helper is not None and helper is not threading.current_thread():
            helper.join(_HELPER_JOIN_S)

    def __len__(self) -> int:
        with self._cond:
            return len(self._rows)

    def _raise_kept(self) -> None:
        if self._error is not None:
            raise self._error

    def _commit_locked(self) -> None:
        rows, self._rows = self._rows, []
        try:
            self._commit(rows)
        except BaseException as exc:
            self._error = exc
            raise
        self.groups += 1

    def _wake_helper(self) -> None:
        if not self._helper_wanted or self._closed:
            return
        if self._helper is None or not self._helper.is_alive():
            self._helper = threading.Thread(target=self._run_helper, name="rks-group-commit", daemon=True)
            self._helper.start()
        else:
            self._cond.notify()

    def _run_helper(self) -> None:
        """Commit a group whose oldest row waited ``max_wait_s`` and to which no new row came; for latency only."""
        idle_since = self._clock()
        with self._cond:
            while not self._closed and self._error is None:
                if not self._rows:
                    if self._clock() - idle_since >= _HELPER_IDLE_EXIT_S:
                        self._helper = None  # under the lock: the next first row starts another
                        return
                    self._cond.wait(_HELPER_IDLE_EXIT_S)
                    continue
                idle_since = self._clock()
                left = self._oldest + self.max_wait_s - self._clock()
                if left > 0:
                    self._cond.wait(left)
                    continue
                try:
                    self._commit_locked()
                except BaseException:  # kept in self._error: the task's next add or flush raises it
                    log.debug("group commit failed in the helper thread", exc_info=True)
                    return


def rows_to_batch(rows: Sequence[Sequence[Any]], positions: Sequence[int], schema: pa.Schema) -> pa.RecordBatch:
    """The rows' values at ``positions`` as an Arrow batch of ``schema`` (one column per position).

    Timestamps come from PySpark as naive datetimes in the worker's local time
    (``TimestampType.fromInternal``): they are turned back into their instant.
    """
    arrays = []
    for pos, field in zip(positions, schema):
        col = [r[pos] for r in rows]
        if pa.types.is_timestamp(field.type):
            col = [None if d is None else (int(d.replace(microsecond=0).timestamp()) * 1_000_000 + d.microsecond)
                   for d in col]
            arrays.append(pa.array(col, pa.int64()).cast(field.type))
        else:
            arrays.append(pa.array(col, field.type))
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


class RealTimeTask:
    """One epoch task of a real-time query on this worker: its group buffer and its :class:`.writer.TaskWrite`.

    ``positions`` are the row positions of ``columns.select``, ``schema`` their Arrow types.

    Raises (building it):
        The errors of getting the worker's runtime and slot (:func:`.runtime.get_runtime`, :class:`.TaskWrite`).
    """

    def __init__(self, config: "SinkConfig", columns: Columns, positions: Sequence[int], schema: pa.Schema,
                 epoch: int, spark_partition: int, spark_attempt: int, run: str, max_rows: int = DEFAULT_MAX_ROWS,
                 max_wait_s: float = DEFAULT_MAX_WAIT_S, helper: bool = True) -> None:
        self.config, self.epoch, self.spark_attempt = config, epoch, spark_attempt
        self.spark_partition = spark_partition
        self.positions, self.schema = tuple(positions), schema
        self.t0 = time.monotonic()
        self.rt = get_runtime(config)
        with self.rt.publisher.task():  # adopts orphan slots: under the poll lock, as every task
            self.write = TaskWrite(self.rt, epoch, spark_partition, spark_attempt, self.t0, run, columns=columns,
                                   ids=EPOCH_FREE_KEYS)
        self.buffer = GroupBuffer(self._group_commit, max_rows, max_wait_s, helper)

    def process(self, row: Any) -> None:
        """Buffer one row (a group commit when the bounds say so).

        Raises:
            The errors of a group commit (:meth:`.TaskWrite.feed`): the task fails, Spark re-runs the epoch.
        """
        self.buffer.add(row)

    def _group_commit(self, rows: list[Any]) -> None:
        batch = rows_to_batch(rows, self.positions, self.schema)
        with self.rt.publisher.task(), self.write.mode.writing():
            self.write.feed(batch)  # WAL first, then Kafka
        _points.point("rt.group_commit", epoch=self.epoch, spark_partition=self.spark_partition,
                      attempt=self.spark_attempt, rows=self.write.rows, groups=self.buffer.groups + 1)

    def close(self, failed: bool) -> list[TaskReport]:
        """End the epoch's task: commit what is buffered and the WAL attempt, wait for acks up to
        ``ack_timeout_s``, and its reports (a pending record stays in the WAL). ``failed``: the epoch failed
        (Spark runs it again): nothing more is written and the attempt is left uncommitted.

        Raises:
            The errors of the last group commit or of :meth:`.TaskWrite.commit` (Spark re-runs the epoch).
        """
        self.buffer.close()
        if failed:
            with self.rt.publisher.task():
                self.write.abandon()
            return []
        try:
            self.buffer.flush()
            with self.rt.publisher.task():
                self.write.commit()
        except BaseException:
            with self.rt.publisher.task():
                self.write.abandon()
            raise
        with self.rt.publisher.task():
            return self.write.finish()
