"""Running a job template: Spark session, topics, the sink, the query loop, graceful stop and drain.

A template defines its ``source`` settings dataclass and a function
``build(spark, source) -> DataFrame`` (the input in the Kafka sink schema,
``value`` and ``key`` binary, string or a struct of the row: see
:func:`for_sink`); ``sys.exit(run_template(Source, build))`` does the rest:

1. read ``--conf`` (exit code 2 and one log line if a setting is wrong);
2. build the sink (its options are checked before Spark starts), create the
   topics if ``kafka.create_topic_partitions`` > 0, build the SparkSession;
3. start ``for_sink(build(...)).writeStream.foreachBatch(sink)`` with the
   checkpoint and trigger of ``query``;
4. run until ``query.run_seconds`` pass, SIGTERM/SIGINT, the query ends
   (``available_now``) or fails; on stop, wait up to ``query.stop_grace_s``
   for the running micro-batch, then drain records still pending in the WALs;
5. log the totals as one ``key=value`` line (``job=<name> status=stopped ...
   batches=.. rows=.. acked=..``) and write them to ``query.summary_path``.

A batch interrupted by the stop is re-run with the same batch id (and so the
same record ids) when the job restarts from the checkpoint: at-least-once.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import threading
import time
from typing import TYPE_CHECKING, Any, Callable, Mapping

from ..auth import with_callbacks
from .resolve import CLIENT_CONF_PREFIXES, producer_conf, registry_format
from .settings import (
    JobSettings,
    KafkaSettings,
    QuerySettings,
    SettingsError,
    SinkSettings,
    SparkSettings,
    load_settings,
)

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming import StreamingQuery

    from ..driver.sink import RecoverableKafkaSink

__all__ = ["BuildSource", "for_sink", "ensure_topic", "build_spark", "build_sink", "start_query", "stop_gracefully",
           "totals", "summary", "run_job", "run_template"]

log = logging.getLogger("spark_recoverable_sink.jobs")

#: ``build(spark, source_settings) -> DataFrame`` in the Kafka sink schema.
BuildSource = Callable[["SparkSession", Any], "DataFrame"]
_TOTAL_KEYS = ("rows", "acked", "pending", "retried", "dead_lettered", "replayed")


def for_sink(df: "DataFrame", sink: SinkSettings) -> "DataFrame":
    """A template's rows as the sink takes them: a struct ``value`` or ``key`` with no format is JSON text.

    The templates build the row as a struct. With ``sink.value_format`` (or
    ``sink.key_format``) set, the sink encodes that struct in the registry's
    wire format (Avro or JSON Schema, in the JVM); with it ``null``, the
    struct is written as Spark's ``to_json`` of it. Other columns pass as they are.
    Runs on the driver; builds a plan, reads no row.

    Raises:
        SettingsError: a ``json_schema`` format is set for a column that is not a struct, map or array (the
            sink would refuse every batch).
    """
    from pyspark.sql import functions as F

    from ..driver.encode import JSON_SCHEMA_TYPES

    for name, fmt in (("value", sink.value_format), ("key", sink.key_format)):
        if name not in df.columns:  # the sink finds its columns by their exact names, as Spark's sink does
            continue
        kind = type(df.schema[name].dataType).__name__
        if fmt is None and kind == "StructType":
            df = df.withColumn(name, F.to_json(F.col(name)))
        elif fmt is not None and fmt.get("type") == "json_schema" and kind not in JSON_SCHEMA_TYPES:
            raise SettingsError(f"sink.{name}_format: json_schema needs the template's {name} column to be a "
                                f"struct, map or array; it is {df.schema[name].dataType.simpleString()}")
    return df


def ensure_topic(kafka: KafkaSettings, conf: Mapping[str, Any], topic: str | None = None,
                 timeout_s: float = 30.0) -> bool:
    """Create ``topic`` (default ``kafka.topic``) if it does not exist and ``create_topic_partitions`` > 0.

    Returns whether it was created. Waits until the metadata shows its partitions.

    Raises:
        RuntimeError: it could not be created or did not appear within ``timeout_s``.
    """
    if kafka.create_topic_partitions <= 0:
        return False
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import AdminClient, NewTopic

    name = topic or kafka.topic
    admin = AdminClient(with_callbacks({k: v for k, v in conf.items() if k.startswith(CLIENT_CONF_PREFIXES)}))
    created = False
    if name not in admin.list_topics(timeout=timeout_s).topics:
        new = NewTopic(name, kafka.create_topic_partitions, kafka.create_topic_replication_factor)
        try:
            admin.create_topics([new])[name].result(timeout_s)
            created = True
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise RuntimeError(f"topic={name} could not be created: {exc.args[0].str()}") from None
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        t = admin.list_topics(name, timeout=5).topics.get(name)
        if t is not None and t.error is None and t.partitions:
            if created:
                log.info("topic=%s created=true partitions=%d", name, len(t.partitions))
            return created
        time.sleep(0.2)
    raise RuntimeError(f"topic={name} did not appear within {timeout_s}s")


def build_spark(spark: SparkSettings) -> "SparkSession":
    """The SparkSession (an active one is reused, e.g. under spark-submit)."""
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName(spark.app_name)
    if spark.master:
        builder = builder.master(spark.master)
    elif "PYSPARK_GATEWAY_PORT" not in os.environ:  # plain `python`, not spark-submit
        builder = builder.master("local[2]")
    for k, v in spark.conf.items():
        builder = builder.config(k, str(v))
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel(spark.log_level)
    return session


def build_sink(settings: JobSettings, environ: Mapping[str, str] | None = None) -> "RecoverableKafkaSink":
    """The sink, from the ``kafka`` and ``sink`` sections.

    Raises:
        ConfigError: a sink option is wrong (the message names it, never a secret value).
        SettingsError: a secret's environment variable is not set.
    """
    from ..driver.sink import RecoverableKafkaSink

    s = settings.sink
    return RecoverableKafkaSink(
        name=s.name, kafka_conf=producer_conf(settings.kafka, environ), topic=settings.kafka.topic,
        wal_dir=s.wal_dir, ack_timeout_s=s.ack_timeout_s, wal_sync=s.wal_sync, max_wal_bytes=s.max_wal_bytes,
        max_block_s=s.max_block_s, prune_interval_s=s.prune_interval_s,
        dead_letter_topic=s.dead_letter_topic, guarantee=s.guarantee, exactly_once_lanes=s.exactly_once_lanes,
        settle_timeout_s=s.settle_timeout_s, offsets_retention_s=s.offsets_retention_s, record_ids=s.record_ids,
        id_columns=tuple(s.id_columns),
        write_timestamp=s.write_timestamp, history=1000,
        value_format=registry_format("sink.value_format", s.value_format),
        key_format=registry_format("sink.key_format", s.key_format),
    )


def start_query(df: "DataFrame", sink: "RecoverableKafkaSink", query: QuerySettings) -> "StreamingQuery":
    """Start ``df.writeStream.foreachBatch(sink)`` with the checkpoint and trigger of ``query``."""
    writer = df.writeStream.queryName(sink.name.replace("-", "_").replace(".", "_")).foreachBatch(sink)
    writer = writer.option("checkpointLocation", query.checkpoint_location)
    if query.available_now:
        writer = writer.trigger(availableNow=True)
    elif query.trigger_interval_s > 0:
        writer = writer.trigger(processingTime=f"{int(query.trigger_interval_s * 1000)} milliseconds")
    return writer.start()


def _last_batch_id(q: "StreamingQuery") -> int | None:
    p = q.lastProgress
    return None if p is None else int(p["batchId"])


def stop_gracefully(q: "StreamingQuery", grace_s: float) -> None:
    """Let the micro-batch running now finish (waiting up to ``grace_s``), then stop the query.

    With back-to-back batches the next one may have started by then: it is
    interrupted, and re-runs with the same batch id when the query restarts.
    """
    end = time.monotonic() + grace_s
    running = _last_batch_id(q)
    while q.isActive and time.monotonic() < end and q.status.get("isTriggerActive", False):
        if _last_batch_id(q) != running:
            break  # the batch that was running has ended
        time.sleep(0.05)
    if q.isActive:
        q.stop()


def totals(sink: "RecoverableKafkaSink") -> dict[str, int]:
    """``batches`` plus the sums of the sink's kept batch reports (rows, acked, pending ...).

    The sink keeps its last 1000 reports (``history``): a longer run's totals cover those.
    """
    reports = list(sink.reports)
    return {"batches": len(reports), **{k: sum(getattr(r, k) for r in reports) for k in _TOTAL_KEYS}}


def summary(sink: "RecoverableKafkaSink", reason: str, seconds: float) -> dict[str, Any]:
    """The JSON summary: totals, and per batch its id, run and rows per Spark partition.

    Record ids start with ``<sink>:<run>:<batch_id>:`` (:mod:`..ids`): a reader counts
    each batch's distinct ids under its ``<sink>:<run>:<batch_id>:`` prefix against ``rows``.
    """
    return {
        "sink": sink.name, "reason": reason, "seconds": round(seconds, 3), **totals(sink),
        "reports": [{"batch_id": r.batch_id, "run": r.run, "rows": r.rows, "acked": r.acked, "pending": r.pending,
                     "dead_lettered": r.dead_lettered,
                     "task_rows": {str(p.origin): p.rows for p in r.task_reports}}
                    for r in sink.reports],
    }


def run_job(settings: JobSettings, build: BuildSource, spark: "SparkSession" | None = None,
            stop: threading.Event | None = None, environ: Mapping[str, str] | None = None,
            job: str = "job") -> "RecoverableKafkaSink":
    """Run ``build(spark, settings.source)`` through the sink until it stops; returns the sink.

    Stops when ``query.run_seconds`` pass, ``stop`` is set, or the query ends
    or fails. A SparkSession passed in is left running; one built here is too.

    Raises:
        SettingsError / ConfigError: a setting is wrong (before anything starts).
        pyspark StreamingQueryException: the query failed (e.g. the sink raised).
    """
    from pyspark.errors import StreamingQueryException

    stop = stop or threading.Event()
    sink = build_sink(settings, environ)  # validates the sink options before Spark starts
    log.info("job=%s sink=%r", job, sink)
    log.info("job=%s source=%r query=%r", job, settings.source, settings.query)
    conf = producer_conf(settings.kafka, environ)
    ensure_topic(settings.kafka, conf)
    if settings.sink.dead_letter_topic:
        ensure_topic(settings.kafka, conf, settings.sink.dead_letter_topic)
    spark = spark or build_spark(settings.spark)
    q = start_query(for_sink(build(spark, settings.source), settings.sink), sink, settings.query)
    log.info("job=%s query_id=%s run_id=%s status=started", job, q.id, q.runId)
    t0 = time.monotonic()
    deadline = t0 + settings.query.run_seconds if settings.query.run_seconds > 0 else None
    reason = "terminated"  # by itself: available_now done, or failed
    try:
        while q.isActive:
            if stop.is_set():
                reason = "stop-requested"
                break
            if deadline is not None and time.monotonic() >= deadline:
                reason = "run_seconds-elapsed"
                break
            try:
                q.awaitTermination(0.5)  # type: ignore[arg-type]  # seconds, a float in PySpark's own code
            except StreamingQueryException:
                break  # the query failed: q.exception() holds the error, raised below
    finally:
        stop_gracefully(q, settings.query.stop_grace_s)
    exc = q.exception()
    got = totals(sink)
    if exc is None:
        # Records not acked when their tasks ended (in any batch, also one older than the kept
        # reports): deliver them before the application stops. One small job; quick when none is left.
        drained = sink.drain(spark, timeout_s=settings.query.stop_grace_s)
        log.info("job=%s drain replayed=%d pending=%d workers=%d seconds=%.1f", job, drained.replayed,
                 drained.pending, drained.workers, drained.seconds)
        if drained.pending:
            log.warning("job=%s pending=%d records are still not acked; they stay in the WAL under %s and "
                        "are delivered by the next run", job, drained.pending, settings.sink.wal_dir)
    seconds = time.monotonic() - t0
    log.info("job=%s status=stopped reason=%s seconds=%.1f %s", job, reason, seconds,
             " ".join(f"{k}={v}" for k, v in got.items()))
    if settings.query.summary_path:
        with open(settings.query.summary_path, "w", encoding="utf-8") as fh:
            json.dump(summary(sink, "failed" if exc is not None else reason, seconds), fh, indent=1)
    if exc is not None:
        raise exc
    return sink


def run_template(source: type, build: BuildSource, argv: list[str] | None = None, job: str | None = None) -> int:
    """A template's command line (``--conf FILE``); returns the exit code.

    0 = stopped cleanly, 2 = a setting is wrong, 1 = the query failed. Every
    error is one ``key=value`` log line (no secret value in it).
    """
    job = job or os.path.splitext(os.path.basename(sys.argv[0]))[0] or "job"
    parser = argparse.ArgumentParser(prog=job)
    parser.add_argument("--conf", required=True, help="JSON settings file (see conf/)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s level=%(levelname)s logger=%(name)s %(message)s")
    try:
        settings = load_settings(args.conf, source)
    except (OSError, SettingsError) as exc:
        log.error("job=%s conf=%s error=%s", job, args.conf, exc)
        return 2
    stop = threading.Event()

    def _on_signal(signum: int, _frame: Any) -> None:
        log.info("job=%s signal=%s stopping=true", job, signal.Signals(signum).name)
        stop.set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, _on_signal)
    spark = None
    try:
        build_sink(settings)  # fail on a bad sink option before Spark starts
        spark = build_spark(settings.spark)
        run_job(settings, build, spark, stop, job=job)
    except Exception as exc:  # noqa: BLE001 - reported as one line, exit code 1 (2 for a setting)
        from ..errors import ConfigError

        code = 2 if isinstance(exc, (SettingsError, ConfigError)) else 1
        log.error("job=%s status=failed error_type=%s error=%s", job, type(exc).__name__,
                  (str(exc).splitlines() or [""])[0])
        return code
    finally:
        if spark is not None:
            spark.stop()
    return 0
