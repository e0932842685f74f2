"""The executor side: what one Spark task does with its partition.

:class:`PartitionWriter` is the function handed to ``mapInArrow``. It is
pickled into the task closure and holds only the configuration and the batch
id; the stateful part (:class:`.runtime.WorkerRuntime`) is built on the
executor. :func:`write_partition` is the same path without Spark, for tests
and tools.
"""

from __future__ import annotations

import logging
import os
import time
from typing import Collection, ContextManager, Iterable, Iterator, Protocol

import pyarrow as pa

from .. import _points
from ..config import EXACTLY_ONCE, SinkConfig
from ..errors import WalWriteError
from ..delivery.stats import latest_summary
from ..ids import new_occurrences, record_id_prefix, with_ids
from ..report import REPORT_FIELDS, PartitionReport
from ..schema import normalize_batch, payload_bytes
from ..wal.format import AttemptKey, ChunkKey, encode_chunk
from ..wal.records import OPEN, AttemptState
from .at_least_once import AtLeastOnceTask
from .exactly_once import ExactlyOnceTask
from .runtime import WorkerRuntime, get_runtime

__all__ = ["PartitionWriter", "write_partition", "report_batch"]

log = logging.getLogger(__name__)

_ARROW_TYPES = {"bigint": pa.int64(), "double": pa.float64(), "string": pa.string()}
REPORT_SCHEMA = pa.schema([(n, _ARROW_TYPES[t]) for n, t in REPORT_FIELDS])

class PartitionWriter:
    """Picklable ``mapInArrow`` function: configuration, batch id, run id and confirmed dead letters.

    ``run`` is the record ids' run component (see :func:`..ids.record_id`);
    ``confirmed`` holds the tokens of dead letters the driver already holds,
    which the worker that stores them marks reported.
    """

    def __init__(self, config: SinkConfig, batch_id: int, run: str = "", confirmed: tuple[str, ...] = ()) -> None:
        self.config = config
        self.batch_id = batch_id
        self.run = run
        self.confirmed = confirmed

    def __call__(self, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        partition = ctx.partitionId() if ctx is not None else 0
        attempt = ctx.attemptNumber() if ctx is not None else 0
        report = write_partition(self.config, self.batch_id, partition, attempt, batches, run=self.run,
                                 confirmed=self.confirmed)
        yield report_batch(report)


def report_batch(report: PartitionReport) -> pa.RecordBatch:
    row = report.to_row()
    return pa.RecordBatch.from_pylist([row], schema=REPORT_SCHEMA)


def write_partition(
    config: SinkConfig, batch_id: int, partition: int, spark_attempt: int, batches: Iterable[pa.RecordBatch],
    *, run: str = "", confirmed: Collection[str] = (),
) -> PartitionReport:
    """Write one partition through the WAL to Kafka.

    Steps:

    1. get this process's runtime (its WAL slot and cached producer);
    2. adopt orphan slots left by dead workers and replay what they committed;
    3. for each Arrow batch: normalise it, append it to the WAL in one
       committed transaction, *then* produce its records (each with its
       deterministic id header); block for space first if the WAL is full;
    4. mark the attempt committed in the WAL (durably), wait for acks up to
       ``ack_timeout_s``, prune what is acked, and return the report. Records
       still unacked stay in the WAL and are delivered by the poller thread.

    Record ids are ``sink:run:batch:partition:<fingerprint>-<occurrence>``
    (:mod:`..ids`); the sink always passes a ``run`` (an empty one gives the
    run-less ids of older builds: tools and tests only). Dead letters whose token is in ``confirmed`` are marked
    reported; the report offers every other unreported one of this worker.

    With ``ack_timeout_s=0`` (fully async) step 3 only writes the WAL and
    hands each committed chunk to the worker's poller thread; the task returns
    once its records are durable on local disk. A task still writing after
    ``OVERLAP_AFTER_S`` (:mod:`.at_least_once`) gives the poll lock back for the rest of its loop, so
    the poller produces committed chunks while it writes the next ones.

    Raises:
        InvalidRecordError: a row cannot be a Kafka record (nothing of its batch was accepted).
        WalFullError / WalWriteError: the WAL refused an append (nothing of that batch was accepted).
        WalFormatError / ProducerError: the slot or the producer cannot be used.
    """
    t0 = time.monotonic()
    rt = get_runtime(config)
    with rt.publisher.task():  # this thread polls for the whole task; the poller waits
        return _write(rt, config, batch_id, partition, spark_attempt, batches, t0, run, confirmed)


class TaskMode(Protocol):
    """What a task does around its WAL appends, by guarantee (:mod:`.at_least_once`, :mod:`.exactly_once`)."""

    guarantee: int  # recorded with the attempt (wal.records.AT_LEAST_ONCE / EXACTLY_ONCE)
    digest: int  # exactly-once: the unit digest so far (0 otherwise)

    def writing(self) -> ContextManager[None]: ...  # around the loop
    def chunk(self, key: ChunkKey, norm: pa.RecordBatch, size: int) -> None: ...  # after each WAL append
    def abandon(self) -> None: ...  # the task failed before its attempt committed
    def finish(self, rows: int) -> int: ...  # the attempt committed: returns the rows acked
    def dead(self) -> int: ...  # rows refused for good
    def skipped(self) -> int: ...  # rows Kafka already had (exactly-once re-runs)


def _append(rt: "WorkerRuntime", key: ChunkKey, chunk: bytes, first: AttemptState | None) -> None:
    """Append a chunk; a task's first chunk that finds the disk full in a slot holding nothing to keep
    recreates the slot (the space its file held goes back) and tries once more."""
    try:
        rt.wal.append(key, chunk, new_attempt=first)
    except WalWriteError:
        if first is None or not rt.renew_own_slot():
            raise
        rt.wal.append(key, chunk, new_attempt=first)


def _write(rt: "WorkerRuntime", config: SinkConfig, batch_id: int, partition: int, spark_attempt: int,
           batches: Iterable[pa.RecordBatch], t0: float, run: str, confirmed: Collection[str]) -> PartitionReport:
    publisher = rt.publisher
    replayed = rt.take_replayed() + rt.adopt_orphans()  # Step 2
    if confirmed:  # after adopting: an adopted slot's dead letters may be among them
        publisher.confirm_dead_letters(frozenset(confirmed))
    retried0 = publisher.retried_records
    akey = AttemptKey(batch_id, partition, rt.own_wal().reserve_gen())
    mode: TaskMode = (ExactlyOnceTask(rt, akey, run) if config.guarantee == EXACTLY_ONCE
                      else AtLeastOnceTask(rt, akey, t0))
    prefix = record_id_prefix(config.name, batch_id, partition, run).decode()
    occurrences = new_occurrences()  # ids: fingerprint and occurrence among equal records of the partition
    started = time.time()
    seq = nbytes = 0
    try:
        with mode.writing():
            for batch in batches:  # Step 3
                if batch.num_rows == 0:
                    continue
                norm = with_ids(normalize_batch(batch, config.topic, prefix, seq, run), occurrences)
                chunk = encode_chunk(norm)
                key = ChunkKey(batch_id, partition, seq, akey.gen)
                rt.reserve_space(len(chunk))
                first = None if seq else AttemptState(OPEN, spark_attempt, 0, started, mode.guarantee)
                _append(rt, key, chunk, first)  # WAL first ...
                mode.chunk(key, norm, len(chunk))  # ... then Kafka
                seq += norm.num_rows
                nbytes += payload_bytes(norm)
                _points.point("task.mid_task", batch=batch_id, partition=partition, attempt=spark_attempt, rows=seq)
        if seq:
            rt.wal.commit_attempt(akey, spark_attempt, seq, started, mode.guarantee, mode.digest)  # Step 4
        _points.point("task.after_commit", batch=batch_id, partition=partition, attempt=spark_attempt, rows=seq)
    except BaseException:
        mode.abandon()  # its chunks stay until acked, or are dropped as uncommitted at recovery; Spark re-runs it
        raise
    acked = mode.finish(seq)
    if acked:
        publisher.contact.mark_reached()
    dead, skipped = mode.dead(), mode.skipped()
    kstats = latest_summary(config.name)  # None unless statistics.interval.ms is set
    report = PartitionReport(
        partition=partition, spark_attempt=spark_attempt, rows=seq, bytes=nbytes, acked=acked,
        pending=max(0, seq - acked - dead - skipped), skipped=skipped, retried=publisher.retried_records - retried0, dead_lettered=dead,
        replayed=replayed, seconds=time.monotonic() - t0, pid=os.getpid(), slot=rt.wal.path,
        dead_letters=tuple(publisher.offer_unreported_dead()),
        problems=rt.problems(),
        broker_reached=int(publisher.contact.reached), last_error=publisher.contact.last_error,
        wal_bytes=rt.wal.live_bytes,
        kafka_queue_msgs=kstats.queue_msgs if kstats else -1, kafka_rtt_ms=kstats.rtt_ms if kstats else -1.0,
        kafka_txn_state=kstats.txn_state if kstats else "",
    )
    log.info("sink=%s batch=%d partition=%d attempt=%d rows=%d acked=%d pending=%d dead=%d skipped=%d replayed=%d "
             "seconds=%.3f", config.name, batch_id, partition, spark_attempt, seq, acked, report.pending, dead, skipped,
             replayed, report.seconds)
    return report
