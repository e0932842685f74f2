"""The driver side: :class:`RecoverableKafkaSink`, a ``foreachBatch`` function.

Per batch, on the driver:

1. fail if an earlier batch left dead letters and no dead-letter topic is set;
2. validate the schema (before any task runs);
3. run one Spark job: ``mapInArrow`` with :class:`.PartitionWriter`, which
   returns one small report row per partition;
4. build a :class:`.BatchReport`, keep it (``last_report``, ``reports``) and
   log it as one ``key=value`` line.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from typing import TYPE_CHECKING, Any, Mapping

from .config import SinkConfig
from .contact import first_contact_failure
from .drain import DRAIN_DDL, DrainReport, DrainTask
from .errors import BrokerUnreachableError, ConfigError, DeadLetterError, RecoverableSinkError
from .partition_writer import PartitionWriter
from .report import REPORT_DDL, BatchReport, PartitionReport
from .schema import validate_spark_schema

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import DataFrame

__all__ = ["RecoverableKafkaSink", "claim_sink_name"]

log = logging.getLogger(__name__)

# -- one sink name, one streaming query (a driver-wide registry) ------------------------

_NAME_OWNERS: dict[str, str] = {}  # sink name -> id of the streaming query writing with it
_NAME_OWNERS_LOCK = threading.Lock()


def claim_sink_name(name: str, query_id: str | None, active_query_ids: Any) -> None:
    """Record that ``query_id`` writes with sink ``name``; refuse a second query at once.

    Two queries sharing a sink name share its WAL directory and record ids.
    A query that stopped gives its name up (it is no longer among
    ``active_query_ids()``, which returns ``None`` when it cannot tell: then
    nothing is refused); a restarted query keeps its id and its name.

    Raises:
        ConfigError: another active query already writes with this name.
    """
    if not query_id:
        return
    with _NAME_OWNERS_LOCK:
        owner = _NAME_OWNERS.get(name)
        active = active_query_ids() if owner is not None and owner != query_id else None
        if active is not None and owner in set(active):
            raise ConfigError("name", f"sink name {name!r} is already used by streaming query {owner}; query "
                              f"{query_id} cannot use it at the same time: give each query its own sink name")
        _NAME_OWNERS[name] = query_id


def _streaming_query(batch_df: Any) -> tuple[str | None, Any]:
    """The id of the streaming query running this ``foreachBatch`` call, and a getter of the active ids.

    A query runs its batches in a clone of the user's session, whose
    ``streams.active`` is empty: the active queries are read from the JVM's
    default and active sessions instead (``None`` when that is not possible,
    e.g. under Spark Connect: then nothing is checked).
    """
    try:
        spark = batch_df.sparkSession
        qid = spark.sparkContext.getLocalProperty("sql.streaming.queryId")
    except Exception:  # not a streaming batch, or not a classic DataFrame
        return None, lambda: None

    def active() -> list[str] | None:
        try:
            jsession = spark._jvm.org.apache.spark.sql.SparkSession
            ids = []
            for opt in (jsession.getDefaultSession(), jsession.getActiveSession()):
                if opt.isDefined():
                    ids.extend(str(q.id().toString()) for q in opt.get().streams().active())
            return ids
        except Exception:
            return None

    return qid, active


class RecoverableKafkaSink:
    """Publish a DataFrame's rows to Kafka through an executor-local write-ahead log.

    Use as ``df.writeStream.foreachBatch(sink)`` or ``sink.write(df)``. The
    DataFrame has the columns of Spark's Kafka sink: ``value`` (required),
    ``key``, ``topic``, ``partition``, ``headers``, ``timestamp``.

    Args:
        name: Stable id of this sink; goes into WAL paths and record ids.
        kafka_conf: confluent-kafka producer configuration, passed through
            (``enable.idempotence=true`` and ``acks=all`` unless set).
        topic: Default topic; a ``topic`` column overrides it per row.
        wal_dir: Executor-local directory for the write-ahead log.
        ack_timeout_s: How long a task waits for broker acks (0 = fully async).
        history: How many batch reports ``reports`` keeps.
        drain_on_failure_s: After a batch's job fails, how long a drain job
            waits for acks before the error is re-raised (0: no drain). The
            drain leaves a live worker delivering what the failed workers had
            accepted, even if the broker is still down.
        **options: Further :class:`.SinkConfig` fields (``max_wal_bytes``,
            ``max_block_s``, ``wal_sync``, ``dead_letter_topic``,
            ``checkpoint_interval_s``, ``retry_backoff_s``, ...).

    Raises:
        ConfigError: an option is wrong (the message names it).
    """

    def __init__(
        self, name: str, kafka_conf: Mapping[str, Any], topic: str | None = None,
        wal_dir: str = "/tmp/spark_recoverable_sink", ack_timeout_s: float = 30.0,
        history: int = 100, drain_on_failure_s: float = 10.0, **options: Any,
    ) -> None:
        self.config = SinkConfig.build(name, kafka_conf, wal_dir, topic=topic, ack_timeout_s=ack_timeout_s, **options)
        self.drain_on_failure_s = float(drain_on_failure_s)
        self.reports: deque[BatchReport] = deque(maxlen=max(1, history))
        self._lock = threading.Lock()
        self._unreported_dead: list[tuple[str, str]] = []
        self._broker_reached = False  # driver memory of the first-contact check

    @property
    def name(self) -> str:
        return self.config.name

    @property
    def last_report(self) -> BatchReport | None:
        return self.reports[-1] if self.reports else None

    def __call__(self, batch_df: "DataFrame", batch_id: int) -> None:
        """``foreachBatch`` entry point.

        Raises:
            DeadLetterError: an earlier batch dead-lettered records and no
                ``dead_letter_topic`` is set (they are kept in the WAL).
            SchemaError: the DataFrame is not in the Kafka sink schema.
            ConfigError: another active streaming query uses the same sink name.
            BrokerUnreachableError: the sink has never reached a broker.
            pyspark errors: a task failed after Spark's retries.
        """
        claim_sink_name(self.config.name, *_streaming_query(batch_df))
        self._raise_dead_letters()
        report = self._run(batch_df, int(batch_id))
        if report.dead_letters and self.config.dead_letter_topic is None:
            with self._lock:
                self._unreported_dead.extend(report.dead_letters)

    def write(self, df: "DataFrame", batch_id: int | None = None) -> BatchReport:
        """Write a batch DataFrame; returns its report.

        ``batch_id`` goes into record ids; pass the same one to re-run the same
        write with the same ids (default: the current time in milliseconds).

        Raises:
            DeadLetterError: records failed with a non-retriable error and no
                ``dead_letter_topic`` is set (they are kept in the WAL).
            SchemaError: the DataFrame is not in the Kafka sink schema.
        """
        self._raise_dead_letters()
        report = self._run(df, int(time.time() * 1000) if batch_id is None else int(batch_id))
        if report.dead_letters and self.config.dead_letter_topic is None:
            raise DeadLetterError(self._dead_message(report.dead_letters), [i for i, _ in report.dead_letters],
                                  dict(report.dead_letters))
        return report

    def _raise_dead_letters(self) -> None:
        with self._lock:
            dead, self._unreported_dead = self._unreported_dead, []
        if dead:
            raise DeadLetterError(self._dead_message(dead), [i for i, _ in dead], dict(dead))

    def _dead_message(self, dead: list[tuple[str, str]] | tuple[tuple[str, str], ...]) -> str:
        shown = "; ".join(f"{rid}: {err}" for rid, err in list(dead)[:10])
        more = f" (and {len(dead) - 10} more)" if len(dead) > 10 else ""
        return (f"sink={self.config.name}: {len(dead)} record(s) failed with a non-retriable Kafka error and no "
                f"dead_letter_topic is set; they are kept in the WAL's dead-letter store: {shown}{more}")

    def drain(self, spark: Any = None, timeout_s: float = 60.0, tasks: int | None = None) -> DrainReport:
        """Deliver what executors' WALs still hold for this sink, writing nothing new.

        Runs one small job: its tasks adopt orphan slots (left by dead
        workers) and wait up to ``timeout_s`` for their worker's records to be
        acked. Call it at the end of a bounded job in async mode, or after a
        failure. ``pending > 0`` in the result means records are still in the
        WALs (delivered later by live workers, or by the next run).
        """
        from pyspark.sql import SparkSession

        spark = spark or SparkSession.getActiveSession()
        if spark is None:
            raise RecoverableSinkError("drain needs a SparkSession")
        n = tasks or max(1, spark.sparkContext.defaultParallelism)
        t0 = time.monotonic()
        rows = spark.range(0, n, 1, n).mapInArrow(DrainTask(self.config, timeout_s), DRAIN_DDL).collect()
        report = DrainReport(replayed=sum(r.replayed for r in rows), pending=sum(r.pending for r in rows),
                             workers=len({r.pid for r in rows}), seconds=time.monotonic() - t0)
        log.info("sink=%s drain replayed=%d pending=%d workers=%d seconds=%.3f", self.config.name,
                 report.replayed, report.pending, report.workers, report.seconds)
        return report

    def _run(self, df: "DataFrame", batch_id: int) -> BatchReport:
        t0 = time.monotonic()
        columns = validate_spark_schema(df.schema, self.config.topic)
        writer = PartitionWriter(self.config, batch_id)
        try:
            rows = df.select(*columns).mapInArrow(writer, REPORT_DDL).collect()
        except Exception:
            # The failed tasks' workers are gone, with the threads that would have
            # delivered what they accepted: leave a live worker on the job.
            if self.drain_on_failure_s > 0:
                try:
                    self.drain(df.sparkSession, self.drain_on_failure_s)
                except Exception:  # the original error is what the caller must see
                    log.exception("sink=%s drain after a failed batch_id=%d failed", self.config.name, batch_id)
            raise
        report = BatchReport.from_partitions(batch_id, [PartitionReport.from_row(r) for r in rows],
                                             time.monotonic() - t0)
        self.reports.append(report)
        log.info("sink=%s %s", self.config.name, report.log_line())
        for problem in report.problems:
            log.error("sink=%s batch_id=%d problem=%s", self.config.name, batch_id, problem)
        self._check_first_contact(report)
        return report

    def _check_first_contact(self, report: BatchReport) -> None:
        """Fail (or warn, with ``wait_for_broker``) when a sink that never reached a broker still has not.

        Raises:
            BrokerUnreachableError: no task of this batch, nor any earlier one,
                reached a broker, and the client reported connection errors.
        """
        if self._broker_reached:
            return
        if any(p.broker_reached or p.acked for p in report.partition_reports):
            self._broker_reached = True
            return
        failure = first_contact_failure(report.partition_reports)
        if failure is None:
            return
        pending, last_error = failure
        servers = self.config.scrub(dict(self.config.kafka_conf_items)["bootstrap.servers"])
        message = (f"sink={self.config.name} has never reached a Kafka broker at bootstrap.servers={servers}: "
                   f"last connection error: {last_error}. Check bootstrap.servers (host, port, listener) and the "
                   f"security settings. Nothing was dropped: the {pending} record(s) of batch_id="
                   f"{report.batch_id} not yet acked stay in the executors' WALs and are delivered once a broker "
                   "answers (or by the next run); set wait_for_broker=True to wait instead of failing.")
        if self.config.wait_for_broker:
            log.error("%s (wait_for_broker=True: not failing)", message)
            return
        raise BrokerUnreachableError(message, servers, last_error, pending)

    def __getstate__(self) -> dict[str, Any]:
        # Configuration only: reports and locks stay on the driver.
        return {"config": self.config, "drain_on_failure_s": self.drain_on_failure_s}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.config = state["config"]
        self.drain_on_failure_s = state["drain_on_failure_s"]
        self.reports = deque(maxlen=100)
        self._lock = threading.Lock()
        self._unreported_dead = []
        self._broker_reached = False

    def __repr__(self) -> str:
        return f"RecoverableKafkaSink({self.config!r})"
