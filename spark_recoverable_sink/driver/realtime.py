"""The sink as a ``foreach`` writer: the entry point of Spark's real-time mode (``trigger(realTime=...)``).

Real-time mode (Spark 4.1+) runs long-running tasks that each read one
source partition for an *epoch* (the trigger's duration) and hands rows to
the sink as they come; its sinks are Spark's Kafka sink and ``foreach``
(``foreachBatch`` and Python data sources are refused)::

    (df.writeStream.foreach(sink.foreach_writer(df)).outputMode("update")
       .trigger(realTime="5 seconds").option("checkpointLocation", chk).start())

:meth:`.RecoverableKafkaSink.foreach_writer` checks the DataFrame on the
driver (its Kafka columns as ``foreachBatch(sink)`` takes them, its id
columns) and returns a :class:`ForeachWriter`: configuration, the columns'
positions and Arrow types, nothing live. Per epoch task, on an executor,
``open`` builds a :class:`..task.foreach.RealTimeTask` (the worker's runtime,
its slot, orphans adopted), ``process`` buffers each row, group commits write
them WAL first, then Kafka, and ``close`` commits the rest, waits for acks up
to ``ack_timeout_s`` and logs the task's report line (``entry=foreach``,
``batch_id`` the epoch) in the executor's log.

Record ids are KEY ids (:mod:`..ids`) of the columns that name a row for
good, with batch 0: an epoch that fails runs again from its start offsets,
and may end elsewhere, so ids cannot name the epoch or the Spark partition.
The run is the streaming query's id (first 16 hex digits of the task's
``sql.streaming.queryId`` local property) or the sink's ``run_id``.

What this entry point does not have, having no driver step between epochs:
batch reports on the driver (``sink.reports``) and its metrics, the drain job
after a failed epoch, dead-letter confirmation (as the data source:
:mod:`.datasource`), and exactly-once (refused).
"""

from __future__ import annotations

import dataclasses
import logging
import time
from typing import TYPE_CHECKING, Any

from ..config import COLUMN_IDS, EXACTLY_ONCE, SinkConfig
from ..errors import ConfigError, RecoverableSinkError
from ..schema import KAFKA_SOURCE_IDS, Columns, validate_spark_schema
from ..task.foreach import DEFAULT_MAX_ROWS, DEFAULT_MAX_WAIT_S, RealTimeTask
from .batches import conclude_batch, dead_letter_error, ensure_log_handler, first_contact_error
from .query import QUERY_ID_PROPERTY, RUN_LEN

if TYPE_CHECKING:  # pragma: no cover
    import pyarrow as pa
    from pyspark.sql import DataFrame

__all__ = ["ForeachWriter", "foreach_writer", "ENTRY"]

log = logging.getLogger("spark_recoverable_sink.sink")

ENTRY = "foreach"


def foreach_writer(config: SinkConfig, df: "DataFrame", run_id: str | None, formats: dict[str, Any],
                   max_rows: int = DEFAULT_MAX_ROWS, max_wait_ms: float = DEFAULT_MAX_WAIT_S * 1000
                   ) -> "ForeachWriter":
    """The ``foreach`` writer of ``df`` (:meth:`.RecoverableKafkaSink.foreach_writer`).

    Raises:
        ConfigError: exactly-once, a Schema Registry format, bounds out of range, or a DataFrame with no columns
            that name its rows for good (neither ``id_columns`` nor a Kafka source's topic, partition, offset).
        SchemaError: the DataFrame is not in the Kafka sink schema.
    """
    if config.guarantee == EXACTLY_ONCE:
        raise ConfigError("guarantee", "exactly_once needs foreachBatch(sink): a foreach writer has no driver step "
                                       "between epochs to settle their transactions")
    for column, fmt in formats.items():
        if fmt is not None:
            raise ConfigError(f"{column}_format", "a foreach writer cannot encode columns in the JVM; encode the "
                                                  f"{column} column in the query (to_avro, to_json) instead")
    if int(max_rows) < 1 or not 0 <= float(max_wait_ms) <= 60_000:
        raise ConfigError("max_wait_ms", f"a group commit holds 1 row or more and waits 0-60000 ms, got "
                                         f"max_rows={max_rows}, max_wait_ms={max_wait_ms}")
    names = df.schema.fieldNames()
    if config.record_ids != COLUMN_IDS:
        if not set(KAFKA_SOURCE_IDS) <= set(names):
            raise ConfigError("id_columns", "a foreach writer names records by columns whose values name each row "
                                            "for good (a real-time epoch that fails runs again, cut elsewhere): "
                                            "keep the Kafka source's topic, partition and offset columns in the "
                                            "DataFrame, or pass record_ids='columns', id_columns=[...] to the sink")
        config = dataclasses.replace(config, record_ids=COLUMN_IDS, id_columns=KAFKA_SOURCE_IDS)
    columns = validate_spark_schema(df.schema, config.topic, write_timestamp=config.write_timestamp,
                                    id_columns=config.id_columns)
    log.info("sink=%s entry=%s ids=key id_columns=%s max_rows=%d max_wait_ms=%g", config.name, ENTRY,
             ",".join(config.id_columns), int(max_rows), float(max_wait_ms))
    return ForeachWriter(config, columns, [names.index(c) for c in columns.select],
                         _arrow_schema(df, columns.select), run_id, int(max_rows), float(max_wait_ms) / 1000)


def _arrow_schema(df: "DataFrame", select: list[str]) -> "pa.Schema":
    from pyspark.sql.pandas.types import to_arrow_schema
    from pyspark.sql.types import StructType

    return to_arrow_schema(StructType([df.schema[c] for c in select]))


class ForeachWriter:
    """Picklable ``foreach`` writer: configuration, the columns taken (positions, Arrow types), a fixed run or
    ``None`` (the query's id), the group commit's bounds. Spark gives each task its own copy."""

    def __init__(self, config: SinkConfig, columns: Columns, positions: list[int], schema: "pa.Schema",
                 run_id: str | None, max_rows: int, max_wait_s: float) -> None:
        self.config = config
        self.columns = columns
        self.positions = positions
        self.schema = schema
        self.run_id = run_id
        self.max_rows = max_rows
        self.max_wait_s = max_wait_s
        self._task: RealTimeTask | None = None
        self._run = ""

    def open(self, partition_id: int, epoch_id: int) -> bool:
        """Start the epoch's task on this worker (its runtime and slot, orphan slots adopted).

        Raises:
            RecoverableSinkError: no query id to name the run and no ``run_id``.
            The errors of getting the worker's runtime and slot.
        """
        from pyspark import TaskContext

        ensure_log_handler()
        ctx = TaskContext.get()
        qid = ctx.getLocalProperty(QUERY_ID_PROPERTY) if ctx is not None else None
        run = self.run_id or (qid.replace("-", "")[:RUN_LEN] if qid else None)
        if run is None:
            raise RecoverableSinkError(
                f"sink={self.config.name}: this task carries no streaming query id ({QUERY_ID_PROPERTY}) to name "
                "its records' run; pass run_id= to the sink (the same across restarts of this query)")
        self._run = run
        self._task = RealTimeTask(self.config, self.columns, self.positions, self.schema, int(epoch_id),
                                  int(partition_id), ctx.attemptNumber() if ctx is not None else 0, run,
                                  self.max_rows, self.max_wait_s)
        return True

    def process(self, row: Any) -> None:
        """Buffer one row; group commits write the WAL, then Kafka.

        Raises:
            The errors of a group commit (nothing of that group accepted): the task fails, Spark re-runs the epoch.
        """
        assert self._task is not None, "process before open"
        self._task.process(row)

    def close(self, error: BaseException | None) -> None:
        """End the epoch's task: what is buffered into the WAL, the attempt committed, acks awaited up to
        ``ack_timeout_s`` (a pending record stays in the WAL: not an error); log the task's report.

        Raises:
            DeadLetterError: records were refused for good and no dead-letter topic is set.
            BrokerUnreachableError: the sink has never reached a broker.
            The errors of the last group commit.
        """
        task, self._task = self._task, None
        if task is None:  # open failed: Spark calls close with its error
            return
        reports = task.close(failed=error is not None)
        if not reports:
            log.warning("sink=%s entry=%s batch_id=%d spark_partition=%d status=failed: the epoch failed (%s); "
                        "what its task wrote stays in the WAL until acked, Spark runs the epoch again",
                        self.config.name, ENTRY, task.epoch, task.spark_partition, type(error).__name__)
            return
        report = conclude_batch(self.config, task.epoch, self._run, reports, time.monotonic() - task.t0, entry=ENTRY)
        for err in (dead_letter_error(self.config, report),
                    first_contact_error(self.config, report, earlier_batch_ended=task.epoch > 0)):
            if err is not None:
                raise err
