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
from dataclasses import dataclass
from typing import Any, Collection, ContextManager, Iterable, Iterator, Protocol

import pyarrow as pa

from .. import _points
from ..arrays import record_batch, values
from ..config import COLUMN_IDS, EXACTLY_ONCE, PARTITION_IDS, SinkConfig
from ..delivery.exactly_once.topic import expect_marker_topic
from ..delivery.stats import latest_summary
from ..errors import RecoverableSinkError, WalWriteError
from ..ids import CONTENT, KEY, PLACE_INPUT_COLUMN, IdScheme, key_hashes, new_occurrences, scheme_for, with_ids
from ..report import REPORT_FIELDS, TaskReport
from ..schema import Columns, normalize_batch, payload_bytes
from ..wal.format import AttemptKey, ChunkKey, encode_chunk
from ..wal.records import COMMITTED, OPEN, AttemptState
from .at_least_once import AtLeastOnceTask
from .coalesced import split_by_partition
from .exactly_once import ExactlyOnceTask
from .input_end import input_complete
from .runtime import WorkerRuntime, get_runtime

__all__ = ["PartitionWriter", "TaskWrite", "write_partition", "write_partitions", "report_batch"]

log = logging.getLogger(__name__)

_ARROW_TYPES = {"bigint": pa.int64(), "double": pa.float64(), "string": pa.string()}
REPORT_SCHEMA = pa.schema([(n, _ARROW_TYPES[t]) for n, t in REPORT_FIELDS])

class PartitionWriter:
    """Picklable ``mapInArrow`` function: configuration, batch id, run id, columns and confirmed dead letters.

    ``run`` is the record ids' run component (see :mod:`..ids`); ``columns``
    what the driver's schema check found (:class:`..schema.Columns`);
    ``confirmed`` holds the tokens of dead letters the driver already holds,
    which the worker that stores them marks reported. Yields one report row
    per Spark partition the task wrote (several for a coalesced task:
    :mod:`.coalesced`), or one for a task that got no rows.
    """

    def __init__(self, config: SinkConfig, batch_id: int, run: str = "", confirmed: tuple[str, ...] = (),
                 columns: Columns | None = None, marker_topic_id: str | None = None, ids: Any = None) -> None:
        self.config = config
        self.ids = ids  # how the tasks name their records (..driver.split.IdPlan); None: by the config
        self.batch_id = batch_id
        self.run = run
        self.confirmed = confirmed
        self.columns = columns
        self.marker_topic_id = marker_topic_id  # exactly-once: the marker topic the driver checked

    def __call__(self, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        partition = ctx.partitionId() if ctx is not None else 0
        attempt = ctx.attemptNumber() if ctx is not None else 0
        reports = write_partitions(self.config, self.batch_id, partition, attempt, batches, run=self.run,
                                   confirmed=self.confirmed, columns=self.columns,
                                   marker_topic_id=self.marker_topic_id, ids=self.ids)
        yield report_batch(*reports)


def report_batch(*reports: TaskReport) -> pa.RecordBatch:
    return record_batch([r.to_row() for r in reports], REPORT_SCHEMA)


def write_partition(
    config: SinkConfig, batch_id: int, partition: int, spark_attempt: int, batches: Iterable[pa.RecordBatch],
    *, run: str = "", confirmed: Collection[str] = (), columns: Columns | None = None,
    marker_topic_id: str | None = None,
) -> TaskReport:
    """Write one partition through the WAL to Kafka (tools and the data source); a task whose rows may come
    from several Spark partitions (a coalesced one) uses :func:`write_partitions`.

    Raises:
        RecoverableSinkError: the batches hold rows of several Spark partitions (:mod:`.coalesced`).
        The errors of :func:`write_partitions`.
    """
    reports = write_partitions(config, batch_id, partition, spark_attempt, batches, run=run, confirmed=confirmed,
                               columns=columns, marker_topic_id=marker_topic_id)
    if len(reports) != 1:
        raise RecoverableSinkError(f"sink={config.name} batch={batch_id}: write_partition got rows of "
                                   f"{len(reports)} Spark partitions; use write_partitions")
    return reports[0]


def write_partitions(
    config: SinkConfig, batch_id: int, partition: int, spark_attempt: int, batches: Iterable[pa.RecordBatch],
    *, run: str = "", confirmed: Collection[str] = (), columns: Columns | None = None,
    marker_topic_id: str | None = None, ids: Any = None,
) -> list[TaskReport]:
    """Write one task's rows through the WAL to Kafka; one report per Spark partition written.

    Steps:

    1. get this process's runtime (its WAL slot and cached producer);
    2. adopt orphan slots left by dead workers and replay what they committed;
    3. for each Arrow batch, for each Spark partition's rows in it (a
       coalesced task's batches carry :data:`.coalesced.SOURCE_PARTITION`, else
       all rows are ``partition``'s): normalise them, append them to the WAL
       in one committed transaction (the first chunk of a partition opens its
       attempt), *then* produce them (each with its deterministic id header);
       block for space first if the WAL is full;
    4. exactly-once: prove the input was read whole (:mod:`.input_end`);
       mark the task's attempts committed in the WAL (one durable
       transaction), wait for acks up to ``ack_timeout_s``, prune what is
       acked, and return the reports. Records still unacked stay in the WAL
       and are delivered by the poller thread.

    Record ids are ``sink:run:batch:[<place>]<fingerprint>-<occurrence>`` (at-least-once with
    ``record_ids`` ``"content"``, with its place, or ``"columns"``: the batch scope, one occurrence
    counter for the task) or ``sink:run:batch:partition:<fingerprint>-<occurrence>``
    (:mod:`..ids`), ``partition`` being the row's own Spark partition; the
    sink always passes a ``run`` (tools and tests that give none get an empty
    run component: ``sink::batch:...``). ``columns`` says which of the
    batches' columns are Kafka columns and which make ids; without it
    (tools, tests) every column is a Kafka column. Dead letters whose token is in
    ``confirmed`` are marked reported; the first report offers every other
    unreported one of this worker.

    Exactly-once: ``marker_topic_id`` is the marker topic's id as the
    driver checked it (``""``: the broker gives none); a worker then never
    creates the topic (missing means deleted) and refuses another one
    (:mod:`..delivery.exactly_once.topic`).

    With ``ack_timeout_s=0`` (fully async) step 3 only writes the WAL and
    hands each committed chunk to the worker's poller thread; the task returns
    once its records are durable on local disk. A task still writing after
    ``OVERLAP_AFTER_S`` (:mod:`.at_least_once`) gives the poll lock back for the rest of its loop, so
    the poller produces committed chunks while it writes the next ones.

    Raises:
        InvalidRecordError: a row cannot be a Kafka record (nothing of its batch was accepted).
        WalFullError / WalWriteError: the WAL refused an append (nothing of that batch was accepted).
        WalFormatError / ProducerError: the slot or the producer cannot be used.
        RecoverableSinkError: an exactly-once task got rows of several Spark partitions.
        ConfigError / MarkerError: exactly-once, the marker topic is not compacted, or was deleted or replaced.
    """
    t0 = time.monotonic()
    if marker_topic_id is not None and config.guarantee == EXACTLY_ONCE:
        expect_marker_topic(config, marker_topic_id)
    rt = get_runtime(config)
    with rt.publisher.task():  # this thread polls for the whole task; the poller waits
        return _write(rt, config, batch_id, partition, spark_attempt, batches, t0, run, confirmed, columns, ids)


class TaskMode(Protocol):
    """What a task does around its WAL appends, by guarantee (:mod:`.at_least_once`, :mod:`.exactly_once`)."""

    guarantee: int  # recorded with the attempt (wal.records.AT_LEAST_ONCE / EXACTLY_ONCE)
    digest: int  # exactly-once: the unit digest so far (0 otherwise)

    def writing(self) -> ContextManager[None]: ...  # around the loop
    def begin(self, origin: int) -> AttemptKey: ...  # an origin's first rows (a Spark partition, a lane): its attempt
    def chunk(self, key: ChunkKey, norm: pa.RecordBatch, size: int) -> None: ...  # after each WAL append
    def abandon(self) -> None: ...  # the task failed before its attempt committed
    def finish(self, rows: int) -> int: ...  # the attempts committed: returns the rows acked
    def share(self, key: AttemptKey) -> tuple[int, int, int]: ...  # (acked, dead, skipped) of one attempt
    def dead(self) -> int: ...  # rows refused for good
    def skipped(self) -> int: ...  # rows Kafka already had (exactly-once re-runs)
    def counts(self) -> tuple[int, int]: ...  # exactly-once: (lane producers opened, transactions aborted)


def _append(rt: "WorkerRuntime", key: ChunkKey, chunk: bytes | memoryview,
            first: AttemptState | None) -> None:
    """Append a chunk; a task's first chunk that finds the disk full in a slot holding nothing to keep
    recreates the slot (the space its file held goes back) and tries once more."""
    try:
        rt.own_wal().append(key, chunk, new_attempt=first)
    except WalWriteError:
        if first is None or not rt.renew_own_slot():
            raise
        rt.own_wal().append(key, chunk, new_attempt=first)


@dataclass
class _Part:
    """The rows of one Spark partition in a task: one WAL attempt, one id scheme, one occurrence counter.

    ``origin``: its WAL keys' and report's origin (the Spark partition; exactly-once, its lane)."""

    origin: int
    akey: AttemptKey
    scheme: IdScheme | None
    occurrences: Any
    seq: int = 0
    nbytes: int = 0


def _with_ids(rt: "WorkerRuntime", batch: pa.RecordBatch, part: _Part, places: Any = None,
              keys: Any = None) -> pa.RecordBatch:
    """:func:`..ids.with_ids`; the occurrence table's file (a large partition) refused by the disk is a
    WalWriteError."""
    assert part.scheme is not None
    try:
        return with_ids(batch, part.scheme, part.occurrences, places, keys)
    except OSError as exc:
        raise WalWriteError(f"sink={rt.config.name}: the occurrence table of a large partition cannot grow in "
                            f"{rt.sdir}: {exc.strerror or exc}", rt.sdir) from exc


def id_scheme(config: SinkConfig, run: str, batch_id: int, partition: int, placed: bool) -> IdScheme:
    """The id scheme of a task's rows of one Spark partition when the driver gave no plan (the data source, tools:
    :mod:`..driver.split` decides for ``foreachBatch`` and ``write()``): KEY for ``record_ids="columns"``,
    CONTENT named by each row's place when the rows carry one (``placed``), else CONTENT in the scope of the
    partition (exactly-once: its lane)."""
    if config.guarantee != EXACTLY_ONCE and config.record_ids == COLUMN_IDS:
        return scheme_for(KEY, config.name, run, batch_id)
    if placed and config.guarantee != EXACTLY_ONCE and config.record_ids != PARTITION_IDS:
        return scheme_for(CONTENT, config.name, run, batch_id)
    return scheme_for(CONTENT, config.name, run, batch_id, partition)


def _split(piece: pa.RecordBatch, columns: Columns | None) -> tuple[pa.RecordBatch, Any, Any]:
    """A task's rows -> (the Kafka columns, the id columns' key hashes or ``None``, the places or ``None``)."""
    names = piece.schema.names
    places = values(piece.column(PLACE_INPUT_COLUMN)) if PLACE_INPUT_COLUMN in names else None
    if columns is None:
        return (piece.drop_columns([PLACE_INPUT_COLUMN]) if places is not None else piece), None, places
    keys = key_hashes(piece.select(list(columns.ids))) if columns.ids else None
    return piece.select(list(columns.kafka)), keys, places


def _part_of(rt: "WorkerRuntime", mode: TaskMode, parts: dict[int, _Part], batch_id: int, p: int,
             run: str, placed: bool, ids: Any = None, key: int | None = None) -> _Part:
    """The part of Spark partition ``p``, begun at its first rows; the one before it ends (its occurrence table is
    freed: a worker holds one at a time, as a coalesced task reads its partitions one after another).

    Raises:
        RecoverableSinkError: rows of a partition that had ended came again (its occurrences are gone: its ids
            could repeat).
    """
    last = next(reversed(parts), None)
    if last == p:
        return parts[p]
    if p in parts:
        raise RecoverableSinkError(f"sink={rt.config.name} batch={batch_id}: rows of Spark partition {p} came "
                                   "again after other partitions' rows in one task: their ids cannot be numbered")
    if last is not None:
        parts[last].occurrences = None
    scheme = ids.scheme(rt.config.name, run, batch_id, p) if ids is not None else \
        id_scheme(rt.config, run, batch_id, p, placed)
    occurrences = new_occurrences(rt.sdir) if scheme.kind == CONTENT else None
    key = p if key is None else key  # the part's origin: its Spark partition, or its exactly-once lane
    part = parts[p] = _Part(key, mode.begin(key), scheme, occurrences)
    return part


def _write(rt: "WorkerRuntime", config: SinkConfig, batch_id: int, partition: int, spark_attempt: int,
           batches: Iterable[pa.RecordBatch], t0: float, run: str, confirmed: Collection[str],
           columns: Columns | None, ids: Any) -> list[TaskReport]:
    task = TaskWrite(rt, batch_id, partition, spark_attempt, t0, run, confirmed, columns, ids)
    try:
        with task.mode.writing():
            for batch in batches:  # Step 3
                task.feed(batch)
        task.commit()
    except BaseException:
        task.abandon()
        raise
    return task.finish()


class TaskWrite:
    """One task's writing, step by step: :func:`write_partitions` feeds it its whole input; the real-time foreach
    writer (:mod:`.foreach`) feeds it one group commit at a time and holds the poll lock only around each call.

    Made on the executor (never pickled). Built, it has done step 2 of :func:`write_partitions` (orphans adopted,
    confirmed dead letters marked) and holds the worker's slot. ``batch_id`` keys its WAL attempts and, unless
    ``ids`` says otherwise, names its records.

    Raises (building it):
        WalWriteError: no room for a slot of its own.
    """

    def __init__(self, rt: "WorkerRuntime", batch_id: int, partition: int, spark_attempt: int, t0: float, run: str,
                 confirmed: Collection[str] = (), columns: Columns | None = None, ids: Any = None) -> None:
        config = rt.config
        self.rt, self.config, self.batch_id, self.partition = rt, config, batch_id, partition
        self.spark_attempt, self.t0, self.run, self.columns, self.ids = spark_attempt, t0, run, columns, ids
        publisher = rt.publisher
        self.replayed = rt.take_replayed() + rt.adopt_orphans()  # Step 2
        if confirmed:  # after adopting: an adopted slot's dead letters may be among them
            publisher.confirm_dead_letters(frozenset(confirmed))
        self.retried0 = publisher.retried_records
        wal = rt.own_wal()  # every task holds a slot (or fails naming why), whether rows come or not
        self.eo = config.guarantee == EXACTLY_ONCE
        # exactly-once: WAL keys and units by lane
        self.lane = ids.lane if self.eo and ids is not None else (lambda p: p)
        self.mode: TaskMode = (ExactlyOnceTask(rt, AttemptKey(batch_id, self.lane(partition), wal.reserve_gen()), run)
                               if self.eo else AtLeastOnceTask(rt, batch_id, t0))
        self.parts: dict[int, _Part] = {}
        self.started = time.time()
        self.rows = 0

    def feed(self, batch: pa.RecordBatch) -> int:
        """Step 3 for one Arrow batch: each Spark partition's rows in it into the WAL (one committed transaction
        per chunk), *then* to Kafka. Returns the rows written. The caller holds the poll lock.

        Raises:
            The errors of :func:`write_partitions`' step 3.
        """
        rt, config, batch_id, run = self.rt, self.config, self.batch_id, self.run
        written = 0
        for p, piece in split_by_partition(batch, self.partition):
            if piece.num_rows == 0:
                continue
            rows_in, keys, places = _split(piece, self.columns)
            part = _part_of(rt, self.mode, self.parts, batch_id, p, run, places is not None, self.ids, self.lane(p))
            norm = _with_ids(rt, normalize_batch(rows_in, config.topic, part.seq, run,
                                                 f"batch {batch_id} partition {p}"), part, places, keys)
            chunk = encode_chunk(norm)
            key = ChunkKey(batch_id, part.origin, part.seq, part.akey.gen)
            rt.reserve_space(len(chunk))
            first = None if part.seq else AttemptState(OPEN, self.spark_attempt, 0, self.started,
                                                       self.mode.guarantee)
            _append(rt, key, chunk, first)  # WAL first ...
            self.mode.chunk(key, norm, len(chunk))  # ... then Kafka
            part.seq += norm.num_rows
            part.nbytes += payload_bytes(norm)
            self.rows += norm.num_rows
            written += norm.num_rows
            _points.point("task.mid_task", batch=batch_id, origin=part.origin, attempt=self.spark_attempt,
                          rows=self.rows)
        return written

    def commit(self) -> None:
        """Step 4's first half: exactly-once, prove the input was read whole; mark the task's attempts committed in
        the WAL (one durable transaction). The caller holds the poll lock.

        Raises:
            RecoverableSinkError: exactly-once, the input ended without Spark's end marker.
            WalWriteError: the WAL refused the transaction.
        """
        config, batch_id, partition, rows = self.config, self.batch_id, self.partition, self.rows
        if self.parts and self.eo and input_complete() is False:  # raises when it cannot tell
            why = (f"sink={config.name} batch={batch_id} spark_partition={partition} attempt={self.spark_attempt} "
                   f"rows={rows}: the task's input ended without Spark's end marker (its source failed part-way: a "
                   "lost shuffle, a cancelled stage or a speculative copy); nothing of its unit is committed, Spark "
                   "re-runs it")
            log.warning("%s", why)  # Spark may never read the task's error: it failed the task first
            raise RecoverableSinkError(why)
        if self.parts:
            self.rt.own_wal().set_attempts([(x.akey, AttemptState(COMMITTED, self.spark_attempt, x.seq, self.started,
                                                            self.mode.guarantee, self.mode.digest))
                                      for x in self.parts.values()])
        _points.point("task.after_commit", batch=batch_id, spark_partition=partition, attempt=self.spark_attempt,
                      rows=rows)

    def abandon(self) -> None:
        """The task failed before its attempts committed: its chunks stay until acked, or are dropped as
        uncommitted at recovery; Spark re-runs it."""
        self.mode.abandon()

    def finish(self) -> list[TaskReport]:
        """Step 4's second half, after :meth:`commit`: wait for acks up to ``ack_timeout_s``, prune, and the
        reports (one per Spark partition written, or one for a task that got no rows). The caller holds the poll
        lock."""
        rt, config, publisher, partition = self.rt, self.config, self.rt.publisher, self.partition
        lane, mode, t0 = self.lane, self.mode, self.t0
        if mode.finish(self.rows):
            publisher.contact.mark_reached()
        kstats = latest_summary(config.name)  # None unless statistics.interval.ms is set
        reports = []
        for i, x in enumerate(self.parts.values() or [_Part(lane(partition), AttemptKey(self.batch_id,
                                                                                          lane(partition), 0),
                                                              None, None)]):
            acked, dead, skipped = mode.share(x.akey) if x.seq else (0, 0, 0)
            first = i == 0  # the task's own figures go with its first report
            report = TaskReport(
                origin=x.origin, spark_attempt=self.spark_attempt, rows=x.seq, bytes=x.nbytes, acked=acked,
                pending=max(0, x.seq - acked - dead - skipped), skipped=skipped,
                retried=publisher.retried_records - self.retried0 if first else 0, dead_lettered=dead,
                replayed=self.replayed if first else 0, seconds=time.monotonic() - t0, pid=os.getpid(),
                slot=rt.wal.path if rt.wal is not None else "",
                dead_letters=tuple(publisher.offer_unreported_dead()) if first else (),
                problems=rt.problems() if first else (),
                broker_reached=int(publisher.contact.reached), last_error=publisher.contact.last_error,
                wal_bytes=rt.wal.live_bytes if rt.wal is not None else 0,
                kafka_queue_msgs=kstats.queue_msgs if kstats else -1,
                kafka_rtt_ms=kstats.rtt_ms if kstats else -1.0, kafka_txn_state=kstats.txn_state if kstats else "",
                lanes_opened=mode.counts()[0] if first else 0, txns_aborted=mode.counts()[1] if first else 0,
            )
            log.info("sink=%s batch=%d origin=%d attempt=%d rows=%d acked=%d pending=%d dead=%d skipped=%d "
                     "replayed=%d seconds=%.3f", config.name, self.batch_id, x.origin, self.spark_attempt, x.seq,
                     acked, report.pending, dead, skipped, report.replayed, report.seconds)
            reports.append(report)
        return reports
