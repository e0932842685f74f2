"""The driver side: :class:`RecoverableKafkaSink`, a ``foreachBatch`` function.

Per batch, on the driver:

1. find the run id of the record ids (the streaming query's id, or one per
   ``write()``);
2. encode: the rows in Kafka's columns (Schema Registry formats), the schema
   checked before any task runs (:func:`.encode.encode_batch`);
3. split: how the batch becomes tasks, how each task names its records and,
   under exactly-once, the run's lanes (:func:`.split.split_batch`);
4. run one Spark job over the tasks: ``mapInArrow`` with
   :class:`.PartitionWriter`, which returns one small report row per
   partition (and carries the tokens of the dead letters the driver already
   holds, so their workers mark them reported); a drain job after a failed one;
5. build a :class:`.BatchReport`, keep it (``last_report``, ``reports``) and
   log it as one ``key=value`` line;
6. exactly-once: settle the lanes whose units are still pending (:func:`.settle`);
7. raise :class:`.DeadLetterError` if the report brought dead letters and no
   dead-letter topic is set.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import uuid
from collections import deque
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Mapping

from ..config import DEFAULT_WAL_DIR, EXACTLY_ONCE, SinkConfig
from ..delivery.contact import remember_reached
from ..delivery.exactly_once.markers import MAX_BATCH
from ..delivery.exactly_once.topic import forget_marker_topic, known_marker_topic_id
from ..errors import ConfigError, RecoverableSinkError
from ..ids import MAX_ID_BATCH
from ..report import REPORT_DDL, BatchReport, DeadLetterLedger, TaskReport
from ..schema import Columns
from ..task.drain import DRAIN_DDL, DrainReport, DrainTask
from ..task.foreach import DEFAULT_MAX_ROWS, DEFAULT_MAX_WAIT_S
from ..task.writer import PartitionWriter
from .batches import conclude_batch, dead_letter_error, first_contact_error, warn_pending
from .cores import drain_tasks
from .encode import encode_batch
from .formats import RegistryFormat
from .metrics import settle_metrics
from .query import QUERY_ID_PROPERTY, RUN_LEN, check_run_id, claim_sink_name, query_run_id, streaming_query
from .realtime import ForeachWriter, foreach_writer
from .settle import settle, tagged_drains
from .split import BatchPlan, split_batch
from .versions import check_supported

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import DataFrame

__all__ = ["RecoverableKafkaSink"]

log = logging.getLogger("spark_recoverable_sink.sink")  # the driver's batch lines, whatever module writes them


class RecoverableKafkaSink:
    """Publish a DataFrame's rows to Kafka through an executor-local write-ahead log.

    Use as ``df.writeStream.foreachBatch(sink)``, ``sink.write(df)``, or in Spark's real-time mode
    ``df.writeStream.foreach(sink.foreach_writer(df))``. The
    DataFrame is taken as Spark's Kafka sink takes it (:func:`..schema.validate_spark_schema`):
    ``value`` (required), ``key``, ``topic``, ``partition``, ``headers`` by their
    exact names, every other column ignored, the ``topic`` option over a
    ``topic`` column; ``timestamp`` only with ``write_timestamp=True``.

    Record ids (:mod:`..ids`) name the sink, the run, the batch and the record
    (its place in the input, or its content and occurrence, or its
    ``id_columns``), the same in every run of the batch. In ``foreachBatch`` the
    run is the streaming query's id (first 16 hex digits): the same after a
    restart from the checkpoint, different for a new checkpoint or another
    query; each ``write()`` gets a fresh run unless given one.

    Args:
        name: Stable id of this sink; goes into WAL paths and record ids.
        kafka_conf: confluent-kafka producer configuration, passed through
            (``enable.idempotence=true`` and ``acks=all`` unless set); the Java
            producer's settings, as ``format("kafka")`` takes them, are mapped
            to librdkafka's, ignored or refused (docs/migrating-from-spark-kafka.md#producer-settings).
        topic: The topic of every record (overrides a ``topic`` column, as in
            Spark's sink); unset, each row's ``topic`` column.
        wal_dir: Executor-local directory for the write-ahead log.
        history: How many batch reports ``reports`` keeps.
        drain_on_failure_s: After a batch's job fails, how long a drain job
            waits for acks before the error is re-raised (0: no drain). The
            drain leaves a live worker delivering what the failed workers had
            accepted, even if the broker is still down.
        value_format: A Schema Registry format of the ``value`` column
            (:class:`.Avro`, :class:`.JsonSchema`): the column (a ``struct``) is
            encoded in the JVM, in Confluent's wire format, before the batch is
            written (docs/formats.md).
        key_format: A Schema Registry format of the ``key`` column, as
            ``value_format`` is of the value (its subject ``<topic>-key`` by default).
        run_id: A fixed run of the record ids of every streaming batch, instead of
            the query's id (needed where that cannot be read: ``foreachBatch``
            under Spark Connect); the data source's batch saves take it too. Keep
            it the same across restarts of one query and different between
            queries. 1-64 of ``[A-Za-z0-9._-]``.
        **options: Further :class:`.SinkConfig` fields (``max_wal_bytes``,
            ``max_block_s``, ``wal_sync``, ``dead_letter_topic``,
            ``prune_interval_s``, ``retry_backoff_s``, ...).

    Raises:
        ConfigError: an option is wrong (the message names it), or
            ``metrics_port`` is set and the endpoint cannot start
            (prometheus-client missing, port taken).
        SparkVersionError: the installed PySpark is not 3.5 or 4.x (:mod:`.versions`).
    """

    def __init__(
        self, name: str, kafka_conf: Mapping[str, Any], topic: str | None = None,
        wal_dir: str = DEFAULT_WAL_DIR, history: int = 100, drain_on_failure_s: float = 10.0, run_id: str | None = None,
        value_format: RegistryFormat | None = None, key_format: RegistryFormat | None = None, **options: Any,
    ) -> None:
        check_supported()  # this PySpark: 3.5 or 4.x
        self.config = SinkConfig.build(name, kafka_conf, wal_dir, topic=topic, **options)
        self.formats = {"value": value_format, "key": key_format}
        for column, fmt in self.formats.items():
            if fmt is not None and not isinstance(fmt, RegistryFormat):
                raise ConfigError(f"{column}_format", f"must be Avro(...), JsonSchema(...) or None, got "
                                                      f"{type(fmt).__name__}")
            if fmt is not None and self.config.topic is None:
                fmt.subject_for(None, column)  # a subject named after the topic needs the sink's topic
        self.drain_on_failure_s = float(drain_on_failure_s)
        self.run_id = check_run_id("run_id", run_id)
        self.reports: deque[BatchReport] = deque(maxlen=max(1, history))
        self._lock = threading.Lock()
        self._dead = DeadLetterLedger()
        self._broker_reached = False  # driver memory of the first-contact check
        self._said_ignored = False
        self.metrics_endpoint = None  # the Prometheus endpoint (``.url``), when metrics_port is set
        if self.config.metrics_port is not None:  # a missing extra or a busy port fails here, before any write
            from .metrics import start

            self.metrics_endpoint = start(self.config)

    @property
    def name(self) -> str:
        return self.config.name

    @property
    def last_report(self) -> BatchReport | None:
        return self.reports[-1] if self.reports else None

    def __call__(self, batch_df: "DataFrame", batch_id: int) -> None:
        """Write one micro-batch: the function ``foreachBatch`` calls.

        Raises:
            DeadLetterError: this batch's tasks dead-lettered records (or
                offered ones an earlier failed job had left) and no
                ``dead_letter_topic`` is set; raised after the batch's report is
                logged and kept. The records stay in the WAL's dead-letter
                store; the batch fails, and re-runs after a restart.
            SchemaError: the DataFrame is not in the Kafka sink schema.
            ConfigError: another active streaming query uses the same sink name.
            BrokerUnreachableError: the sink has never reached a broker.
            RecoverableSinkError: the streaming query's id cannot be read and no ``run_id`` is set.
            pyspark errors: a task failed after Spark's retries.
        """
        claim_sink_name(self.config.name, *streaming_query(batch_df))
        run = self.run_id or query_run_id(batch_df)
        if run is None:
            raise RecoverableSinkError(
                f"sink={self.config.name}: cannot read the streaming query id (local property "
                f"{QUERY_ID_PROPERTY}) that keeps record ids of different queries apart; pass run_id= to "
                "the sink (stable across restarts of this query, different for any other query), or use "
                "write() outside a streaming query")
        self._raise_dead_letters(self._run(batch_df, int(batch_id), run, streaming=True, fresh=False))

    def write(self, df: "DataFrame", batch_id: int = 0, run_id: str | None = None) -> BatchReport:
        """Write a batch DataFrame; returns its report.

        Record ids are as the class docstring says, with ``batch_id`` as the batch. Each call gets a
        fresh random run, so two writes never share ids. To re-run a write
        with the same ids (so consumers drop the duplicates), pass the same
        ``run_id`` (and ``batch_id``) again.

        Raises:
            DeadLetterError: records failed with a non-retriable error and no
                ``dead_letter_topic`` is set (they are kept in the WAL).
            SchemaError: the DataFrame is not in the Kafka sink schema.
            ConfigError: ``run_id`` is not 1-64 of ``[A-Za-z0-9._-]``.
        """
        given = check_run_id("run_id", run_id)
        run = given or uuid.uuid4().hex[:RUN_LEN]
        report = self._run(df, int(batch_id), run, fresh=given is None)
        self._raise_dead_letters(report)
        return report

    def foreach_writer(self, df: "DataFrame", max_rows: int = DEFAULT_MAX_ROWS,
                       max_wait_ms: float = DEFAULT_MAX_WAIT_S * 1000) -> "ForeachWriter":
        """A ``foreach`` writer of ``df`` for Spark's real-time mode (:mod:`.realtime`)::

            df.writeStream.foreach(sink.foreach_writer(df)).outputMode("update").trigger(realTime="5 seconds")

        Each task writes its rows through the WAL in group commits of at most
        ``max_rows`` rows whose oldest row waited at most ``max_wait_ms``. Record ids
        are KEY ids of ``id_columns`` (``record_ids="columns"``), else of a Kafka
        source's ``topic``, ``partition`` and ``offset``, with batch 0.

        Raises:
            ConfigError: exactly-once, a Schema Registry format, or ``df`` has no column that names its rows for
                good (neither ``id_columns`` nor a Kafka source's coordinates).
            SchemaError: ``df`` is not in the Kafka sink schema.
        """
        return foreach_writer(self.config, df, self.run_id, self.formats, max_rows, max_wait_ms)

    def _raise_dead_letters(self, report: BatchReport) -> None:
        error = dead_letter_error(self.config, report)
        if error is not None:
            raise error

    def drain(self, spark: Any = None, timeout_s: float = 60.0, tasks: int | None = None) -> DrainReport:
        """Deliver what executors' WALs still hold for this sink, writing nothing new.

        Runs one small job: its tasks adopt orphan slots (left by dead
        workers) and wait up to ``timeout_s`` for their worker's records to be
        acked. Call it at the end of a bounded job in async mode, or after a
        failure. ``pending > 0`` in the result means records are still in the
        WALs (delivered later by live workers, or by the next run).

        Classic Spark and Spark Connect alike (the job is ``spark.range`` and
        ``mapInArrow``). ``tasks`` defaults to the cluster's cores
        (:func:`.cores.drain_tasks`: under Spark Connect from the session's
        configuration, ``spark.default.parallelism`` first).

        Raises:
            RecoverableSinkError: no ``spark`` given and no active session.
            pyspark errors: the drain job failed.
        """
        from pyspark.sql import SparkSession

        spark = spark or SparkSession.getActiveSession()
        if spark is None:
            raise RecoverableSinkError("drain needs a SparkSession: pass spark= (none is active in this thread)")
        n = tasks or drain_tasks(spark)
        t0 = time.monotonic()
        with self._lock:
            confirmed = self._dead.confirmed()
        task = DrainTask(self.config, timeout_s, confirmed, known_marker_topic_id(self.config))
        rows = spark.range(0, n, 1, n).mapInArrow(task, DRAIN_DDL).collect()
        report = DrainReport(replayed=sum(r.replayed for r in rows), pending=sum(r.pending for r in rows),
                             workers=len({r.pid for r in rows}), seconds=time.monotonic() - t0,
                             units=tuple(u for r in rows for u in json.loads(r.units or "[]")),
                             dead_letters=tuple(tuple(x) for r in rows for x in json.loads(r.dead_letters or "[]")))
        log.info("sink=%s drain replayed=%d pending=%d workers=%d seconds=%.3f", self.config.name,
                 report.replayed, report.pending, report.workers, report.seconds)
        if report.pending:
            warn_pending(self.config, "drain", report.pending)
        return report

    def _run(self, df: "DataFrame", batch_id: int, run: str, streaming: bool = False, fresh: bool = False
             ) -> BatchReport:
        try:
            return self._run_batch(df, batch_id, run, streaming, fresh)
        except BaseException:
            forget_marker_topic(self.config)  # the next batch is a (re)started query's first: checked anew
            raise

    def _run_batch(self, df: "DataFrame", batch_id: int, run: str, streaming: bool, fresh: bool) -> BatchReport:
        t0 = time.monotonic()
        self._check_batch_id(batch_id)
        kafka = encode_batch(df, self.config, self.formats)  # the rows in Kafka's columns, checked
        self._say_ignored(kafka.columns)
        with self._lock:
            confirmed = self._dead.confirmed()
        plan = split_batch(df, kafka, self.config, run, batch_id, fresh)  # tasks, id scope, lanes
        writer = PartitionWriter(self.config, batch_id, run, confirmed, kafka.columns, plan.marker_topic, plan.ids)
        parts = self._run_tasks(plan, writer, batch_id)
        with self._lock:  # the driver holds these rows now: later jobs confirm their dead letters
            new_dead = self._dead.admit(parts)
        report = conclude_batch(self.config, batch_id, run, parts, time.monotonic() - t0, new_dead)
        self.reports.append(report)
        self._check_first_contact(report, earlier_batch_ended=streaming and batch_id > 0)
        if self.config.guarantee == EXACTLY_ONCE and report.pending:
            report = self._settle_lanes(plan.tasks.sparkSession, report)
        return report

    def _check_batch_id(self, batch_id: int) -> None:
        """Raises:
            ConfigError: ``batch_id`` does not fit a record id, or (exactly-once) a lane's marker.
        """
        if self.config.guarantee == EXACTLY_ONCE and not 0 <= batch_id <= MAX_BATCH:
            raise ConfigError("batch_id", f"must be 0..{MAX_BATCH} with exactly_once (a lane's marker holds it), "
                                          f"got {batch_id}")
        if not 0 <= batch_id <= MAX_ID_BATCH:
            raise ConfigError("batch_id", f"must be 0..{MAX_ID_BATCH} (a record id holds it), got {batch_id}")

    def _run_tasks(self, plan: BatchPlan, writer: PartitionWriter, batch_id: int) -> list[TaskReport]:
        """One Spark job over the plan's tasks; their report rows. After a failed job, a drain (if set) first.

        Raises:
            pyspark errors: a task failed after Spark's retries (as the job raised it).
        """
        try:
            rows = plan.tasks.mapInArrow(writer, REPORT_DDL).collect()
        except Exception:
            # The failed tasks' workers are gone, with the threads that would have
            # delivered what they accepted: leave a live worker on the job.
            if self.drain_on_failure_s > 0:
                try:
                    self.drain(plan.tasks.sparkSession, self.drain_on_failure_s)
                except Exception:  # the original error is what the caller must see
                    log.exception("sink=%s drain after a failed batch_id=%d failed", self.config.name, batch_id)
            raise
        return [TaskReport.from_row(r) for r in rows]

    def _settle_lanes(self, spark: Any, report: BatchReport) -> BatchReport:
        """Exactly-once, a batch with units pending: :meth:`_settle`; the report, with the dead letters of units
        refused while the batch waited (kept as the last report).

        Raises:
            SettleTimeoutError, or a drain job's own error: see :func:`.settle`.
        """
        offered = self._settle(spark, report)
        with self._lock:
            late = self._dead.admit_offers(offered)
        if late:  # units refused while the batch waited: its report names their records
            report = replace(report, dead_letters=report.dead_letters + late)
            self.reports[-1] = report
        return report

    def _say_ignored(self, columns: Columns) -> None:
        """Log, once per sink, the DataFrame's columns the sink does not write (Spark's sink ignores them too)."""
        if columns.ignored and not self._said_ignored:
            self._said_ignored = True
            log.info("sink=%s columns_ignored=%s", self.config.name, json.dumps(list(columns.ignored)))

    def _settle(self, spark: Any, report: BatchReport) -> list[tuple[str, str, str]]:
        """Exactly-once: :func:`.settle` with drain jobs tagged, so that one that never returns is cancelled.

        Classic Spark and Spark Connect alike (:func:`.tagged_drains`).

        Raises:
            SettleTimeoutError, or a drain job's own error: see :func:`.settle`.
        """
        tag = f"rks-settle-{uuid.uuid4().hex}"
        return settle(self.config, report, **tagged_drains(spark, lambda s, t: self.drain(s, t), tag),
                      progress=settle_metrics(self.config))

    def _check_first_contact(self, report: BatchReport, earlier_batch_ended: bool = False) -> None:
        """Fail (or log an ERROR, with ``wait_for_broker``) when a sink that never reached a broker still has not.

        Raises:
            BrokerUnreachableError: no task of this batch, nor any earlier one,
                reached a broker, and the client reported connection errors.
        """
        if self._broker_reached:  # driver memory: once reached, later outages are outages
            return
        if any(p.broker_reached or p.acked for p in report.task_reports):
            self._broker_reached = True
            remember_reached(self.config)  # a driver restarted on this host remembers it too
            return
        error = first_contact_error(self.config, report, earlier_batch_ended)
        if error is not None:
            raise error

    def __getstate__(self) -> dict[str, Any]:
        # Configuration only: reports and locks stay on the driver.
        return {"config": self.config, "drain_on_failure_s": self.drain_on_failure_s, "run_id": self.run_id,
                "formats": self.formats}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.config = state["config"]
        self.drain_on_failure_s = state["drain_on_failure_s"]
        self.run_id = state.get("run_id")
        self.formats = state.get("formats", {"value": None, "key": None})
        self.reports = deque(maxlen=100)
        self._lock = threading.Lock()
        self._dead = DeadLetterLedger()
        self._broker_reached = False
        self._said_ignored = False
        self.metrics_endpoint = None

    def __repr__(self) -> str:
        return f"RecoverableKafkaSink({self.config!r})"

