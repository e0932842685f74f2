"""Stream rows into Kafka through :class:`RecoverableKafkaSink`: a spark-submit job template.

Usage::

    spark-submit --master 'local[2]' jobs/stream_to_kafka.py --conf conf/stream_to_kafka.json
    python jobs/stream_to_kafka.py --conf conf/stream_to_kafka.json     # master from the conf, else local[2]

Every setting comes from the JSON conf file; the sections and keys are the
fields of the dataclasses below (:func:`setting_keys` lists them as dotted
names, ``kafka.bootstrap_servers`` ...). Unknown keys are refused, so a typo
in the conf fails the job instead of being ignored. Two things may come from
the environment instead of the file:

* ``KAFKA_BOOTSTRAP`` overrides ``kafka.bootstrap_servers``;
* a value in ``kafka.producer_conf`` written as ``{"env": "NAME"}`` is read
  from the environment variable ``NAME`` when the job starts (use this for
  ``sasl.password`` and other secrets; they never appear in a log line: the
  job logs the sink's repr, which redacts them, never the producer conf).

The source is Spark's ``rate`` source (or ``rate-micro-batch``), mapped to
``key`` = the row's number and ``value`` = ``{"n": <number>, "ts": "<time>"}``;
replace :func:`build_source` with the job's real input.

The query runs until ``query.run_seconds`` have passed (0 = until stopped by
SIGTERM/SIGINT or an error). On stop it waits up to ``query.stop_grace_s``
for the running micro-batch to finish. A batch interrupted anyway is re-run
with the same batch id (and so the same record ids) when the job restarts
from ``query.checkpoint_location``; records it already delivered then appear
twice in Kafka with the same ``rks-id`` header (at-least-once), none is lost.
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
import types
import typing
from dataclasses import MISSING, dataclass, field, fields
from typing import TYPE_CHECKING, Any, Mapping

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming import StreamingQuery

    from spark_recoverable_sink import RecoverableKafkaSink

__all__ = [
    "JobSettings", "SparkSettings", "KafkaSettings", "SinkSettings", "SourceSettings", "QuerySettings",
    "SettingsError", "SECTIONS", "ENV_OVERRIDES", "setting_keys", "required_keys", "load_settings",
    "parse_sections", "section_keys", "settings_from_dict", "producer_conf", "CLIENT_CONF_PREFIXES",
    "ensure_topic", "build_spark", "build_sink", "build_source", "start_query", "run_job", "main",
]

log = logging.getLogger("stream_to_kafka")


class SettingsError(ValueError):
    """The conf file is wrong: the message names the dotted key and why."""


# -- settings -------------------------------------------------------------------------


@dataclass(frozen=True)
class SparkSettings:
    """``spark``: how the SparkSession is built.

    Attributes:
        app_name: Spark application name.
        master: Master URL; ``null`` = the one spark-submit was given (or
            ``local[2]`` when the job runs under plain ``python``).
        log_level: Spark's log level once the session is up (``WARN``, ``ERROR`` ...).
        conf: Extra Spark configuration, ``{"spark.x": "value"}``.
    """

    app_name: str = "stream-to-kafka"
    master: str | None = None
    log_level: str = "WARN"
    conf: dict = field(default_factory=dict)


@dataclass(frozen=True)
class KafkaSettings:
    """``kafka``: the cluster and topic.

    Attributes:
        bootstrap_servers: ``host:port[,host:port]``; env ``KAFKA_BOOTSTRAP`` overrides it.
        topic: Topic the rows go to.
        producer_conf: Further confluent-kafka producer options (secrets as ``{"env": "NAME"}``).
        create_topic_partitions: Create ``topic`` (and ``sink.dead_letter_topic``) with
            this many partitions if it does not exist (0 = never create topics).
        create_topic_replication_factor: Replication factor when creating it.
    """

    bootstrap_servers: str
    topic: str
    producer_conf: dict = field(default_factory=dict, repr=False)
    create_topic_partitions: int = 0
    create_topic_replication_factor: int = 1


@dataclass(frozen=True)
class SinkSettings:
    """``sink``: the :class:`RecoverableKafkaSink` options (see ``SinkConfig``)."""

    name: str
    wal_dir: str
    ack_timeout_s: float = 30.0
    wal_sync: str = "commit"
    max_wal_bytes: int = 20 * 1024**3
    max_block_s: float = 60.0
    checkpoint_interval_s: float = 1.0
    dead_letter_topic: str | None = None


@dataclass(frozen=True)
class SourceSettings:
    """``source``: the demo input.

    Attributes:
        format: ``rate`` (``rows_per_second``) or ``rate-micro-batch`` (``rows_per_batch``).
        rows_per_second: Rows per second of the ``rate`` source.
        rows_per_batch: Rows per micro-batch of the ``rate-micro-batch`` source.
        num_partitions: Spark partitions of the source (= sink tasks per batch).
    """

    format: str = "rate"
    rows_per_second: int = 1000
    rows_per_batch: int = 10000
    num_partitions: int = 2


@dataclass(frozen=True)
class QuerySettings:
    """``query``: the streaming query.

    Attributes:
        checkpoint_location: Spark's checkpoint directory (keep it with the WAL across restarts).
        trigger_interval_s: Processing-time trigger interval (0 = next batch as soon as one ends).
        run_seconds: Stop after this long (0 = run until stopped).
        stop_grace_s: On stop, how long to wait for the running batch to finish.
    """

    checkpoint_location: str
    trigger_interval_s: float = 1.0
    run_seconds: float = 0.0
    stop_grace_s: float = 30.0


@dataclass(frozen=True)
class JobSettings:
    """Everything the job reads, one section per conf-file object."""

    spark: SparkSettings
    kafka: KafkaSettings
    sink: SinkSettings
    source: SourceSettings
    query: QuerySettings


#: Conf-file section -> its dataclass.
SECTIONS: dict[str, type] = {
    "spark": SparkSettings, "kafka": KafkaSettings, "sink": SinkSettings,
    "source": SourceSettings, "query": QuerySettings,
}
#: Environment variable -> the dotted setting it overrides.
ENV_OVERRIDES: dict[str, str] = {"KAFKA_BOOTSTRAP": "kafka.bootstrap_servers"}
SOURCE_FORMATS = ("rate", "rate-micro-batch")


def setting_keys() -> list[str]:
    """Every dotted key the job reads (``section.field``), in conf-file order."""
    return section_keys(SECTIONS)


def required_keys() -> list[str]:
    """The dotted keys without a default: a conf file must set them."""
    return section_keys(SECTIONS, required_only=True)


def _check_type(key: str, value: Any, hint: Any) -> Any:
    """``value`` if it has the type ``hint`` allows (ints pass as floats); else SettingsError."""
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(hint)
        if value is None and type(None) in args:
            return None
        (hint,) = [a for a in args if a is not type(None)]
    if hint is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if hint is int and isinstance(value, bool):
        raise SettingsError(f"{key}: must be a whole number, got {value!r}")
    if not isinstance(value, hint):
        raise SettingsError(f"{key}: must be {hint.__name__}, got {type(value).__name__}")
    return value


def parse_sections(raw: Any, sections: Mapping[str, type], overrides: Mapping[str, Any] | None = None,
                   ) -> dict[str, Any]:
    """Validate a parsed conf file against ``sections`` (name -> dataclass); returns built sections.

    ``overrides`` maps dotted keys to values that win over the file. Shared
    with ``jobs/demo.py``.

    Raises:
        SettingsError: an unknown section or key, a missing required key or a
            wrong type; the message names the dotted key.
    """
    overrides = overrides or {}
    if not isinstance(raw, Mapping):
        raise SettingsError(f"the conf must be a JSON object, got {type(raw).__name__}")
    unknown = sorted(set(raw) - set(sections))
    if unknown:
        raise SettingsError(f"unknown section(s) {unknown}; allowed: {sorted(sections)}")
    built: dict[str, Any] = {}
    for section, cls in sections.items():
        given = raw.get(section, {})
        if not isinstance(given, Mapping):
            raise SettingsError(f"{section}: must be an object, got {type(given).__name__}")
        hints = typing.get_type_hints(cls)
        names = {f.name for f in fields(cls)}
        bad = sorted(set(given) - names)
        if bad:
            raise SettingsError(f"{section}: unknown key(s) {bad}; allowed: {sorted(names)}")
        values: dict[str, Any] = {}
        for f in fields(cls):
            key = f"{section}.{f.name}"
            if key in overrides:
                values[f.name] = _check_type(key, overrides[key], hints[f.name])
            elif f.name in given:
                values[f.name] = _check_type(key, given[f.name], hints[f.name])
            elif f.default is MISSING and f.default_factory is MISSING:
                raise SettingsError(f"{key}: required")
        built[section] = cls(**values)
    return built


def section_keys(sections: Mapping[str, type], required_only: bool = False) -> list[str]:
    """Dotted keys (``section.field``) of ``sections``; with ``required_only``, those without a default."""
    return [f"{section}.{f.name}" for section, cls in sections.items() for f in fields(cls)
            if not required_only or (f.default is MISSING and f.default_factory is MISSING)]


def settings_from_dict(raw: Mapping[str, Any], environ: Mapping[str, str] | None = None) -> JobSettings:
    """Validate a parsed conf file (plus ``ENV_OVERRIDES`` from ``environ``) into settings.

    Raises:
        SettingsError: an unknown section or key, a missing required key, a
            wrong type or value; the message names the dotted key.
    """
    environ = os.environ if environ is None else environ
    overrides = {key: environ[var] for var, key in ENV_OVERRIDES.items() if environ.get(var)}
    settings = JobSettings(**parse_sections(raw, SECTIONS, overrides))
    _check_values(settings)
    return settings


def _check_values(s: JobSettings) -> None:
    if s.source.format not in SOURCE_FORMATS:
        raise SettingsError(f"source.format: must be one of {SOURCE_FORMATS}, got {s.source.format!r}")
    for key, v in (("source.rows_per_second", s.source.rows_per_second),
                   ("source.rows_per_batch", s.source.rows_per_batch),
                   ("source.num_partitions", s.source.num_partitions),
                   ("kafka.create_topic_replication_factor", s.kafka.create_topic_replication_factor)):
        if v <= 0:
            raise SettingsError(f"{key}: must be > 0, got {v}")
    for key, v in (("query.trigger_interval_s", s.query.trigger_interval_s),
                   ("query.run_seconds", s.query.run_seconds), ("query.stop_grace_s", s.query.stop_grace_s),
                   ("kafka.create_topic_partitions", s.kafka.create_topic_partitions)):
        if v < 0:
            raise SettingsError(f"{key}: must be >= 0, got {v}")
    for key, v in (("kafka.bootstrap_servers", s.kafka.bootstrap_servers),
                   ("query.checkpoint_location", s.query.checkpoint_location)):
        if not v:
            raise SettingsError(f"{key}: must not be empty")
    for name, v in s.kafka.producer_conf.items():
        ok = isinstance(v, (str, int, float, bool)) or (
            isinstance(v, Mapping) and set(v) == {"env"} and isinstance(v["env"], str))
        if not ok:  # the value itself is never echoed: it may be a secret
            raise SettingsError(f"kafka.producer_conf[{name!r}]: must be a string, number, boolean "
                                f"or {{\"env\": \"VARIABLE\"}}")
    from spark_recoverable_sink.config import is_secret_option

    for name, v in s.kafka.producer_conf.items():
        if is_secret_option(name) and not isinstance(v, Mapping):
            raise SettingsError(f"kafka.producer_conf[{name!r}]: holds a secret; write it as "
                                f"{{\"env\": \"VARIABLE\"}} and set the variable, not in the conf file")
    if "bootstrap.servers" in s.kafka.producer_conf:
        raise SettingsError("kafka.producer_conf['bootstrap.servers']: set kafka.bootstrap_servers instead")


def load_settings(path: str, environ: Mapping[str, str] | None = None) -> JobSettings:
    """Read and validate the JSON conf file at ``path``.

    Raises:
        SettingsError: the file is not valid JSON or a setting is wrong.
        OSError: the file cannot be read.
    """
    with open(path, encoding="utf-8") as fh:
        try:
            raw = json.load(fh)
        except json.JSONDecodeError as exc:
            raise SettingsError(f"{path}: not valid JSON: {exc}") from None
    return settings_from_dict(raw, environ)


def producer_conf(kafka: KafkaSettings, environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The confluent-kafka configuration: bootstrap servers plus ``producer_conf``, secrets resolved.

    Never log the result: it holds secrets.

    Raises:
        SettingsError: a ``{"env": NAME}`` value names an unset variable.
    """
    environ = os.environ if environ is None else environ
    conf: dict[str, Any] = {"bootstrap.servers": kafka.bootstrap_servers}
    for name, v in kafka.producer_conf.items():
        if isinstance(v, Mapping):
            if v["env"] not in environ:
                raise SettingsError(f"kafka.producer_conf[{name!r}]: environment variable {v['env']} is not set")
            v = environ[v["env"]]
        conf[name] = v
    return conf


# -- building blocks ------------------------------------------------------------------

#: Producer options other clients (admin, consumer) need too: connection and security.
CLIENT_CONF_PREFIXES = ("bootstrap.servers", "security.", "sasl.", "ssl.", "client.id", "socket.",
                   "broker.address.family", "client.dns.lookup")


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
    admin = AdminClient({k: v for k, v in conf.items() if k.startswith(CLIENT_CONF_PREFIXES)})
    md = admin.list_topics(timeout=timeout_s)
    created = False
    if name not in md.topics:
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
    from spark_recoverable_sink import RecoverableKafkaSink

    s = settings.sink
    return RecoverableKafkaSink(
        name=s.name, kafka_conf=producer_conf(settings.kafka, environ), topic=settings.kafka.topic,
        wal_dir=s.wal_dir, ack_timeout_s=s.ack_timeout_s, wal_sync=s.wal_sync, max_wal_bytes=s.max_wal_bytes,
        max_block_s=s.max_block_s, checkpoint_interval_s=s.checkpoint_interval_s,
        dead_letter_topic=s.dead_letter_topic,
    )


def build_source(spark: "SparkSession", source: SourceSettings) -> "DataFrame":
    """The streaming input in the Kafka sink schema: ``key`` (string), ``value`` (string JSON)."""
    reader = spark.readStream.format(source.format).option("numPartitions", source.num_partitions)
    if source.format == "rate":
        reader = reader.option("rowsPerSecond", source.rows_per_second)
    else:
        reader = reader.option("rowsPerBatch", source.rows_per_batch)
    return reader.load().selectExpr(
        "cast(value as string) as key",
        "to_json(named_struct('n', value, 'ts', cast(timestamp as string))) as value",
    )


def start_query(df: "DataFrame", sink: "RecoverableKafkaSink", query: QuerySettings) -> "StreamingQuery":
    """Start ``df.writeStream.foreachBatch(sink)`` with the checkpoint and trigger of ``query``."""
    writer = df.writeStream.queryName(sink.name.replace("-", "_").replace(".", "_")).foreachBatch(sink)
    writer = writer.option("checkpointLocation", query.checkpoint_location)
    if query.trigger_interval_s > 0:
        writer = writer.trigger(processingTime=f"{int(query.trigger_interval_s * 1000)} milliseconds")
    return writer.start()


def _stop_gracefully(q: "StreamingQuery", grace_s: float) -> None:
    """Wait up to ``grace_s`` for no micro-batch to be running, then stop the query."""
    end = time.monotonic() + grace_s
    while q.isActive and time.monotonic() < end:
        if not q.status.get("isTriggerActive", False):
            break
        time.sleep(0.05)
    if q.isActive:
        q.stop()


def _totals(sink: "RecoverableKafkaSink") -> dict[str, int]:
    reports = list(sink.reports)
    keys = ("rows", "acked", "pending", "retried", "dead_lettered", "replayed")
    out = {"batches": len(reports)}
    out.update({k: sum(getattr(r, k) for r in reports) for k in keys})
    return out


def run_job(settings: JobSettings, spark: "SparkSession" | None = None,
            stop: threading.Event | None = None, environ: Mapping[str, str] | None = None,
            ) -> "RecoverableKafkaSink":
    """Run the streaming job until ``run_seconds`` pass, ``stop`` is set, or the query fails.

    Returns the sink (its ``reports`` hold the batches of this run, up to its
    history). A SparkSession passed in is left running; one built here is too
    (``main`` stops it).

    Raises:
        SettingsError / ConfigError: a setting is wrong (before anything starts).
        pyspark StreamingQueryException: the query failed (e.g. the sink raised).
    """
    stop = stop or threading.Event()
    sink = build_sink(settings, environ)  # validates the sink options before Spark starts
    log.info("job=stream_to_kafka sink=%r", sink)
    log.info("job=stream_to_kafka source=%s rows_per_second=%d rows_per_batch=%d num_partitions=%d "
             "checkpoint_location=%s trigger_interval_s=%s run_seconds=%s", settings.source.format,
             settings.source.rows_per_second, settings.source.rows_per_batch, settings.source.num_partitions,
             settings.query.checkpoint_location, settings.query.trigger_interval_s, settings.query.run_seconds)
    conf = producer_conf(settings.kafka, environ)
    ensure_topic(settings.kafka, conf)
    if settings.sink.dead_letter_topic:
        ensure_topic(settings.kafka, conf, settings.sink.dead_letter_topic)
    spark = spark or build_spark(settings.spark)
    q = start_query(build_source(spark, settings.source), sink, settings.query)
    log.info("job=stream_to_kafka query_id=%s run_id=%s status=started", q.id, q.runId)
    t0 = time.monotonic()
    deadline = t0 + settings.query.run_seconds if settings.query.run_seconds > 0 else None
    reason = "terminated"
    try:
        while q.isActive:
            if stop.is_set():
                reason = "stop-requested"
                break
            if deadline is not None and time.monotonic() >= deadline:
                reason = "run_seconds-elapsed"
                break
            q.awaitTermination(0.5)
    finally:
        _stop_gracefully(q, settings.query.stop_grace_s)
    exc = q.exception()
    totals = _totals(sink)
    log.info("job=stream_to_kafka status=stopped reason=%s seconds=%.1f %s", reason, time.monotonic() - t0,
             " ".join(f"{k}={v}" for k, v in totals.items()))
    if totals["pending"] and exc is None:
        # Records not acked when their tasks ended: deliver them before the application stops.
        drained = sink.drain(spark, timeout_s=settings.query.stop_grace_s)
        log.info("job=stream_to_kafka drain replayed=%d pending=%d workers=%d seconds=%.1f",
                 drained.replayed, drained.pending, drained.workers, drained.seconds)
        if drained.pending:
            log.warning("job=stream_to_kafka pending=%d records are still not acked; they stay in the WAL "
                        "under %s and are delivered by the next run", drained.pending, settings.sink.wal_dir)
    if exc is not None:
        raise exc
    return sink


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point; returns the exit code (2 = bad settings, 1 = the query failed)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--conf", required=True, help="JSON settings file (see conf/stream_to_kafka.json)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s level=%(levelname)s logger=%(name)s %(message)s")
    try:
        settings = load_settings(args.conf)
    except (OSError, SettingsError) as exc:
        log.error("job=stream_to_kafka conf=%s error=%s", args.conf, exc)
        return 2
    stop = threading.Event()

    def _on_signal(signum: int, _frame: Any) -> None:
        log.info("job=stream_to_kafka signal=%s stopping=true", signal.Signals(signum).name)
        stop.set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, _on_signal)
    spark = None
    try:
        build_sink(settings)  # fail on a bad sink option before Spark starts
        spark = build_spark(settings.spark)
        run_job(settings, spark, stop)
    except Exception as exc:  # noqa: BLE001 - reported as one line, exit code 1
        from spark_recoverable_sink import ConfigError

        code = 2 if isinstance(exc, (SettingsError, ConfigError)) else 1
        log.error("job=stream_to_kafka status=failed error_type=%s error=%s", type(exc).__name__,
                  str(exc).splitlines()[0] if str(exc) else "")
        return code
    finally:
        if spark is not None:
            spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
