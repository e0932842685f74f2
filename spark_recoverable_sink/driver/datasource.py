"""The sink as a Python data source: ``format("recoverable-kafka")``, streaming and batch.

A drop-in for ``format("kafka")``::

    (df.writeStream.format("recoverable-kafka")
       .option("kafka.bootstrap.servers", bs).option("topic", "orders")
       .option("name", "orders-to-kafka").option("wal_dir", "/local_disk0/rks")
       .option("checkpointLocation", chk).start())

The writers are picklable builders: configuration, the columns to take and
the run id, nothing live. Per task (on an executor) they run the same
:func:`..task.writer.write_partition` as ``foreachBatch(sink)``; the
task's :class:`.TaskReport` is its commit message. Per batch the driver
side (a fresh object for every call: no state is carried from ``write``)
runs :func:`.batches.conclude_batch` in ``commit`` and logs the failed batch
in ``abort``.

Record ids (:mod:`..ids`): in a streaming query the run is the query's id
(read in each task from the ``sql.streaming.queryId`` local property, the
batch from ``streaming.sql.batchId``), in a batch write a fresh random run
per save unless ``run_id`` is given. The data source has no driver step that
could read a batch's lineage or re-split it, so when ``record_ids`` is not
set it picks by the input's columns: a DataFrame of Spark's Kafka source
(``topic``, ``partition`` and ``offset`` columns, which need not be written)
gets key ids of those three (``record_ids="columns"``), the same in every
run of a batch whatever its split; any other gets ids that name the Spark
partition (``"partition"``: the same across re-runs of sources that keep
their split, such as files). ``"content"`` is refused (it needs that
driver step).

It needs PySpark 4.1 (a streaming Arrow writer): on 3.5 and 4.0 importing
this module raises :class:`.SparkVersionError` (:func:`.versions.require_data_source`).

What the data source does not do (``foreachBatch(sink)`` does): run a drain
job after a failed batch, confirm dead letters back to the workers (a worker
lists its unreported dead letters in each of its reports), refuse a second
query with the same sink name, and exactly-once (its driver side cannot run
the job that settles a batch's transactions), and the Prometheus endpoint
(``metrics_port``: no driver process of its own lives across batches).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterator, Sequence

from ..config import COLUMN_IDS, EXACTLY_ONCE, PARTITION_IDS, SinkConfig
from ..errors import ConfigError, RecoverableSinkError
from ..report import TaskReport
from ..schema import KAFKA_SOURCE_IDS, Columns, validate_spark_schema
from ..task.writer import write_partition
from .batches import conclude_batch, dead_letter_error, ensure_log_handler, first_contact_error
from .options import parse_options
from .query import QUERY_ID_PROPERTY, RUN_LEN
from .versions import require_data_source

require_data_source()  # PySpark 4.1+: before, a SparkVersionError naming foreachBatch(sink)

from pyspark.sql.datasource import (  # noqa: E402 - after the version check
    DataSource,
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)

if TYPE_CHECKING:  # pragma: no cover
    import pyarrow as pa
    from pyspark.sql.types import StructType

__all__ = ["RecoverableKafkaDataSource", "PartitionCommit", "FORMAT_NAME", "BATCH_ID_PROPERTY", "KAFKA_SOURCE_IDS"]

log = logging.getLogger("spark_recoverable_sink.sink")

FORMAT_NAME = "recoverable-kafka"
#: The SparkContext local property carrying a micro-batch's id in its tasks (MicroBatchExecution.BATCH_ID_KEY).
BATCH_ID_PROPERTY = "streaming.sql.batchId"


@dataclass(frozen=True)
class PartitionCommit(WriterCommitMessage):
    """One task's commit message: its report and the run of its record ids."""

    report: TaskReport
    run: str


class RecoverableKafkaDataSource(DataSource):
    """``format("recoverable-kafka")``: Spark's Kafka sink options, written through the WAL.

    Options: ``kafka.*`` (producer settings, prefix removed), ``topic``,
    ``name`` (required) and every other keyword of :class:`.RecoverableKafkaSink`
    under its own name (see :mod:`.options`). Register it with
    ``spark.dataSource.register(RecoverableKafkaDataSource)``; once the package
    is installed Spark also finds it by itself (module ``pyspark_recoverable_kafka``).
    """

    @classmethod
    def name(cls) -> str:
        return FORMAT_NAME

    def _prepare(self, schema: "StructType", overwrite: bool) -> tuple[SinkConfig, Columns, str | None]:
        parsed = parse_options(self.options)
        if overwrite:
            raise ConfigError("mode", "Kafka topics can only be appended to: use mode('append')")
        if parsed.config.guarantee == EXACTLY_ONCE:
            raise ConfigError("guarantee", "exactly_once needs foreachBatch(sink): the data source's driver side "
                                           "cannot run the job that settles a batch's transactions")
        if parsed.config.metrics_port is not None:
            raise ConfigError("metrics_port", "needs foreachBatch(sink): the data source's driver side runs in "
                                              "short-lived Python workers that cannot keep an HTTP endpoint up; "
                                              "its batch reports are in the driver log (entry=recoverable-kafka)")
        config = parsed.config
        if not parsed.ids_chosen and set(KAFKA_SOURCE_IDS) <= set(schema.fieldNames()):
            # Spark's Kafka source's rows: named for good by their input's coordinates, whatever a re-run's split
            config = dataclasses.replace(config, record_ids=COLUMN_IDS, id_columns=KAFKA_SOURCE_IDS)
            log.info("sink=%s entry=%s ids=key id_columns=%s (the input's Kafka coordinates: a re-run of a batch gives "
                     "its records the same ids)", config.name, FORMAT_NAME, ",".join(KAFKA_SOURCE_IDS))
        columns = validate_spark_schema(schema, config.topic, write_timestamp=config.write_timestamp,
                                        id_columns=config.id_columns)
        if columns.ignored:
            log.info("sink=%s entry=%s columns_ignored=%s", config.name, FORMAT_NAME, json.dumps(list(columns.ignored)))
        if config.record_ids == PARTITION_IDS and set(KAFKA_SOURCE_IDS) <= set(schema.fieldNames()):
            log.warning("sink=%s entry=%s record ids name the Spark partition (record_ids=partition, chosen): Spark's "
                        "Kafka source re-runs a batch with another split, so a re-run's records get other ids; leave "
                        "record_ids unset (or record_ids=columns, id_columns=topic,partition,offset) to keep them",
                        config.name, FORMAT_NAME)
        return config, columns, parsed.run_id

    def streamWriter(self, schema: "StructType", overwrite: bool) -> "StreamWriter":
        """The streaming writer.

        Raises:
            ConfigError: an option is wrong (the message names it).
            SchemaError: the DataFrame is not in the Kafka sink schema.
        """
        return StreamWriter(*self._prepare(schema, overwrite))

    def writer(self, schema: "StructType", overwrite: bool) -> "BatchWriter":
        """The batch writer (``df.write.format("recoverable-kafka")...save()``).

        Raises:
            ConfigError: an option is wrong, or the mode is not append.
            SchemaError: the DataFrame is not in the Kafka sink schema.
        """
        config, columns, run_id = self._prepare(schema, overwrite)
        return BatchWriter(config, columns, run_id or uuid.uuid4().hex[:RUN_LEN])


def _write_task(config: SinkConfig, columns: Columns, batches: "Iterator[pa.RecordBatch]", batch_id: int,
                run: str) -> PartitionCommit:
    from pyspark import TaskContext

    ctx = TaskContext.get()
    partition = ctx.partitionId() if ctx is not None else 0
    attempt = ctx.attemptNumber() if ctx is not None else 0
    names = columns.select
    report = write_partition(config, batch_id, partition, attempt, (b.select(names) for b in batches), run=run,
                             columns=columns)
    return PartitionCommit(report, run)


def _commit(config: SinkConfig, messages: Sequence[WriterCommitMessage | None], batch_id: int, run: str,
            streaming: bool) -> None:
    ensure_log_handler()
    commits = [m for m in messages if isinstance(m, PartitionCommit)]
    parts = [m.report for m in commits]
    run = commits[0].run if commits else run
    seconds = max((p.seconds for p in parts), default=0.0)  # the driver side does not see the job start
    report = conclude_batch(config, batch_id, run, parts, seconds, entry=FORMAT_NAME)
    for error in (dead_letter_error(config, report),
                  first_contact_error(config, report, earlier_batch_ended=streaming and batch_id > 0)):
        if error is not None:
            raise error


def _abort(config: SinkConfig, messages: Sequence[WriterCommitMessage | None], batch_id: int) -> None:
    ensure_log_handler()
    done = [m.report for m in messages if isinstance(m, PartitionCommit)]
    log.error("sink=%s entry=%s batch_id=%d status=aborted tasks_done=%d rows_done=%d pending_done=%d: the batch "
              "failed; what its tasks accepted stays in the executors' WALs (delivered by their workers, or "
              "by the next run / `rks replay`)", config.name, FORMAT_NAME, batch_id, len(done),
              sum(p.rows for p in done), sum(p.pending for p in done))


class StreamWriter(DataSourceStreamArrowWriter):
    """Picklable streaming writer: configuration, columns, and a fixed run (or ``None``: the query's id)."""

    def __init__(self, config: SinkConfig, columns: Columns, run_id: str | None) -> None:
        self.config = config
        self.columns = columns
        self.run_id = run_id

    def write(self, iterator: "Iterator[pa.RecordBatch]") -> PartitionCommit:
        """Write one task's rows through the WAL; returns its report as the commit message.

        Raises:
            RecoverableSinkError: the task does not carry its micro-batch's id or query id.
            The errors of :func:`.write_partition`.
        """
        from pyspark import TaskContext

        ctx = TaskContext.get()
        batch = ctx.getLocalProperty(BATCH_ID_PROPERTY) if ctx is not None else None
        qid = ctx.getLocalProperty(QUERY_ID_PROPERTY) if ctx is not None else None
        run = self.run_id or (qid.replace("-", "")[:RUN_LEN] if qid else None)
        if batch is None or run is None:
            raise RecoverableSinkError(
                f"sink={self.config.name}: this task carries no micro-batch id ({BATCH_ID_PROPERTY}) or query id "
                f"({QUERY_ID_PROPERTY}); the streaming writer only runs inside a streaming query")
        return _write_task(self.config, self.columns, iterator, int(batch), run)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803 - Spark's name
        """Build, log and record the batch report.

        Raises:
            DeadLetterError: records were refused for good and no dead-letter topic is set.
            BrokerUnreachableError: no task of the batch reached a broker, ever.
        """
        _commit(self.config, messages, batchId, self.run_id or "", streaming=True)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803
        _abort(self.config, messages, batchId)


class BatchWriter(DataSourceArrowWriter):
    """Picklable batch writer: configuration, columns, and the run of this save's record ids (batch 0)."""

    def __init__(self, config: SinkConfig, columns: Columns, run: str) -> None:
        self.config = config
        self.columns = columns
        self.run = run

    def write(self, iterator: "Iterator[pa.RecordBatch]") -> PartitionCommit:
        """Write one task's rows through the WAL; returns its report as the commit message.

        Raises:
            The errors of :func:`.write_partition`.
        """
        return _write_task(self.config, self.columns, iterator, 0, self.run)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        """Build, log and record the report of the save.

        Raises:
            DeadLetterError / BrokerUnreachableError: as for the streaming writer.
        """
        _commit(self.config, messages, 0, self.run, streaming=False)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        _abort(self.config, messages, 0)
