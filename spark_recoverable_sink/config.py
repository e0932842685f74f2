"""Sink configuration: one frozen dataclass, validated when it is built.

The Kafka configuration is copied, the Java producer's settings in it mapped
to librdkafka's (:mod:`.javaconf`: ``kafka.max.request.size``,
``sasl.jaas.config``, ... as Spark's ``format("kafka")`` takes them), and
passed to confluent-kafka; the safe producer settings (``enable.idempotence=true``,
``acks=all``) are filled in when the user did not set them. Values of secret
options never appear in reprs, logs or error messages: :func:`redact` and
:meth:`SinkConfig.scrub` are the only ways this package prints Kafka config.
"""

from __future__ import annotations

import logging
import math
import os
import re
from dataclasses import MISSING, dataclass, field, fields
from typing import Any, Mapping

from .auth import CALLBACK_OPTIONS, load_callable, with_callbacks
from .checks import (
    DEFAULT_WAL_DIR,
    JAVA_PARTITIONER,
    check_exactly_once,
    check_kafka_conf,
    check_option_names,
    check_record_ids,
    check_wal_dir,
    warn_ack_timeout,
)
from .errors import ConfigError
from .jaas import options as jaas_options
from .javaconf import ignored, to_librdkafka

__all__ = ["SinkConfig", "AT_LEAST_ONCE", "EXACTLY_ONCE", "WAL_SYNC_MODES", "DELIVERY_ENGINES", "DEFAULT_MAX_WAL_BYTES",
           "DEFAULT_WAL_DIR", "RECORD_IDS", "CONTENT_IDS", "PARTITION_IDS", "COLUMN_IDS", "AUTO_LANES", "AUTO_OPTIONS",
           "default_of", "redact",
           "scrub_secrets", "is_secret_option", "resolve_env_values"]

log = logging.getLogger(__name__)

AT_LEAST_ONCE = "at_least_once"
EXACTLY_ONCE = "exactly_once"
WAL_SYNC_MODES = ("commit", "none")
DELIVERY_ENGINES = ("auto", "native", "python")
DEFAULT_MAX_WAL_BYTES = 20 * 1024**3
CONTENT_IDS, PARTITION_IDS, COLUMN_IDS = "content", "partition", "columns"
RECORD_IDS = (CONTENT_IDS, PARTITION_IDS, COLUMN_IDS)
#: ``exactly_once_lanes="auto"`` where the cluster's cores cannot be told, or dynamic allocation changes them
AUTO_LANES = 8
#: Options whose ``"auto"`` (any case) is their ``None``: the sink chooses
AUTO_OPTIONS = ("exactly_once_lanes",)

_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")
_TOPIC_RE = re.compile(r"^[A-Za-z0-9._-]{1,249}$")
_SECRET_RE = re.compile(r"(password|secret|passwd|\.pem$|keystore\.key$|jaas|oauthbearer\.config|token|credential|"
                        r"api\.key|private|user\.info)", re.IGNORECASE)
#: Names that match :data:`_SECRET_RE` but say where credentials come from, not what they are
#: (Schema Registry's ``bearer.auth.credentials.source``: ``STATIC_TOKEN``, ``OAUTHBEARER``, ...).
_NOT_SECRET_RE = re.compile(r"credentials\.source$", re.IGNORECASE)
_SAFE_DEFAULTS = {"enable.idempotence": "true", "acks": "all"}
_REDACTED = "***"


def is_secret_option(name: str) -> bool:
    """Whether a Kafka config option holds a secret (its value is never printed)."""
    return bool(_SECRET_RE.search(name)) and not _NOT_SECRET_RE.search(name)


def redact(conf: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of ``conf`` with the values of secret options replaced by ``***``."""
    return {k: (_REDACTED if is_secret_option(k) else v) for k, v in conf.items()}


def scrub_secrets(conf: Mapping[str, Any], text: str) -> str:
    """``text`` with every value of a secret option of ``conf`` replaced by ``***`` (longest first).

    A ``sasl.jaas.config`` string is removed whole, and so is each secret value inside it (its password).
    """
    found = {str(v) for k, v in conf.items() if is_secret_option(k) and str(v)}
    jaas = conf.get("sasl.jaas.config")
    found |= {v for k, v in jaas_options(jaas).items() if is_secret_option(k) and v} if isinstance(jaas, str) else set()
    secrets = sorted(found, key=len, reverse=True)
    for secret in secrets:
        text = text.replace(secret, _REDACTED)
    return text


def resolve_env_values(conf: Mapping[str, Any], environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """``conf`` with every ``{"env": "NAME"}`` value replaced by that environment variable. Never log the result.

    The one rule for Kafka settings kept out of files (job settings, ``rks --kafka-conf``).

    Raises:
        ConfigError: ``option`` names the key whose variable is not set (never a value).
    """
    environ = os.environ if environ is None else environ
    out: dict[str, Any] = {}
    for name, v in conf.items():
        if isinstance(v, Mapping):
            if v["env"] not in environ:
                raise ConfigError(name, f"environment variable {v['env']} is not set")
            v = environ[v["env"]]
        out[name] = v
    return out


def _positive(option: str, value: Any, *, allow_zero: bool = False, integer: bool = False) -> None:
    kinds = (int,) if integer else (int, float)
    if isinstance(value, bool) or not isinstance(value, kinds):
        raise ConfigError(option, f"must be a {'whole' if integer else ''} number, got {type(value).__name__}")
    if isinstance(value, float) and not math.isfinite(value):
        raise ConfigError(option, f"must be finite, got {value!r}")
    if value < 0 or (value == 0 and not allow_zero):
        raise ConfigError(option, f"must be {'>= 0' if allow_zero else '> 0'}, got {value!r}")


@dataclass(frozen=True)
class SinkConfig:
    """Everything a task needs to write; picklable, holds no live handle.

    Attributes:
        name: Stable id of the sink (1-100 of ``[A-Za-z0-9._-]``); names its
            WAL directory, its lanes and leads every record id.
        kafka_conf: confluent-kafka producer settings (a copy). The sink sets
            ``enable.idempotence=true``, ``acks=all`` and ``partitioner=murmur2_random``
            (the Java client's) unless given; the Java producer's settings, as ``format("kafka")`` takes
            them, are mapped, ignored or refused (docs/migrating-from-spark-kafka.md#producer-settings).
        topic: The topic of every record; when set, a ``topic`` column is
            ignored (Spark's rule). Unset: each row's ``topic`` column.
        wal_dir: Executor-local directory of the write-ahead log, on a disk
            that outlives the worker (not tmpfs); ``~`` is expanded on the executor.
            Must be private to the user the workers run as (docs/configuration.md#wal_dir).
        ack_timeout_s: How long a task waits for acks before it returns with
            records pending in the WAL (0 = fully async: return once in the WAL).
        prune_interval_s: Longest time between two prunes of acked records.
        max_wal_bytes: Live WAL bytes one Python worker may hold: its own slot and the slots of dead
            workers it adopted, together.
        max_block_s: How long an append waits for space before ``WalFullError``.
        wal_sync: ``"commit"`` (fsync per WAL transaction) or ``"none"`` (survives
            a process crash, not a system crash).
        dead_letter_topic: Where records refused for good are copied (with their
            error in headers); unset, the batch that finds one fails with ``DeadLetterError``.
        retry_backoff_s: First wait before records the broker failed are produced again from the
            WAL; doubled after each further failure of them, up to ``retry_backoff_max_s``.
        retry_backoff_max_s: Longest wait between two retries of the same records (where the
            doubling of ``retry_backoff_s`` stops).
        guarantee: ``"at_least_once"`` or ``"exactly_once"`` (Kafka transactions; docs/guarantees.md).
        id_header: Name of the header carrying each record's id.
        wait_for_broker: When the first batch of a sink cannot reach any
            broker: ``False`` (default) fails it with ``BrokerUnreachableError``,
            ``True`` logs that error's message at ERROR instead and goes on (records
            stay in the WAL, delivered once a broker answers).
        metrics_port: Driver only: serve Prometheus metrics on this port
            (``0`` = a free port; ``None`` = no endpoint; docs/monitoring.md).
        marker_topic: Exactly-once: the compacted topic holding the lanes'
            markers (created by the sink if missing; shared by sinks, keyed by lane).
        offsets_retention_s: Exactly-once: the brokers' ``offsets.retention.minutes``
            in seconds: a marker record stands in for an expired marker offset
            only once it is older than this.
        delivery_engine: ``"auto"`` (the native engine, a C extension, where it loads, else the
            Python one, slower), ``"native"`` (tasks fail where it does not load) or ``"python"``.
        settle_timeout_s: Driver only, exactly-once: how long a batch may wait
            for its lanes' transactions (restarted by each part of a unit committed in parts) before it
            fails with :class:`.SettleTimeoutError` naming every lane still pending.
        exactly_once_lanes: Driver only, exactly-once: the *lanes* a batch is split into, each one
            Kafka transaction per batch (docs/guarantees.md#exactly-once). ``None`` or ``"auto"`` (default),
            decided at the run's first batch: where each Spark partition reads one named input (a
            Kafka offset range, a file split) and there are at most 4 per core, as ``0``; otherwise
            the cluster's cores then (8 where they cannot be told or dynamic allocation is on). A
            count: every batch is re-split into that many lanes by Spark's hash of each record's key
            (of its topic and partition columns when a partition is set, of its value without a
            key), a shuffle; a key's records keep their order. ``0``: each Spark partition is a
            lane, no shuffle, named by its input where it has a name (whatever partition index a
            re-run gives it), else by its index (then only for sources whose re-runs keep their
            split). Pinned per run: a batch a lane committed is refused under another explicit
            count (``ConfigError``, nothing produced); ``"auto"`` keeps the run's.
        coalesce_tasks: Driver only, through ``foreachBatch`` / ``write()``: a
            batch with more Spark partitions than the cluster has cores is read
            by one task per core (a coalesce, no shuffle; ids unchanged), for
            ``record_ids`` ``"partition"`` / ``"columns"`` and before exactly-once's
            lane shuffle. ``False``: one task per partition, as Spark split it.
        write_timestamp: Write a ``timestamp`` column as the records'
            timestamps (Spark's sink up to 4.2 never does; unset, the producer
            stamps them). A source's timestamps passed through are subject to
            the brokers' timestamp limits and time-based retention.
        record_ids: How record ids stay the same across re-runs of a batch
            (docs/guarantees.md#record-ids): ``"content"`` (default): the driver reads each
            batch's plan and names a record by its position in a named input (a Kafka offset
            range, a file split), by its content where each Spark partition is one of a hash
            exchange's (a ``groupBy``, ``repartition(n, col)``), else re-splits the batch by where
            each record goes (its partition column, else its key, else its value; a shuffle) and
            names it by its content; ``"partition"`` (no re-split; ids
            name the Spark partition: for sources that keep their split) or ``"columns"`` (ids from
            ``id_columns``; no re-split).
        id_columns: With ``record_ids="columns"``: the columns whose values
            identify a record in its batch (e.g. the Kafka source's ``topic``,
            ``partition``, ``offset``); they need not be written.
    """

    name: str
    kafka_conf_items: tuple[tuple[str, str], ...] = field(repr=False)
    wal_dir: str
    topic: str | None = None
    ack_timeout_s: float = 30.0
    prune_interval_s: float = 1.0
    max_wal_bytes: int = DEFAULT_MAX_WAL_BYTES
    max_block_s: float = 60.0
    wal_sync: str = "commit"
    dead_letter_topic: str | None = None
    retry_backoff_s: float = 0.5
    retry_backoff_max_s: float = 30.0
    guarantee: str = AT_LEAST_ONCE
    id_header: str = "rks-id"
    wait_for_broker: bool = False
    metrics_port: int | None = field(default=None, compare=False)  # driver only: not part of the runtime key
    marker_topic: str = "rks-markers"
    offsets_retention_s: float = 7 * 24 * 3600.0
    settle_timeout_s: float = field(default=600.0, compare=False)  # driver only
    exactly_once_lanes: int | None = field(default=None, compare=False)  # driver only; None: AUTO_LANES
    delivery_engine: str = "auto"
    coalesce_tasks: bool = field(default=True, compare=False)  # driver only
    write_timestamp: bool = field(default=False, compare=False)  # per write, not per worker runtime
    record_ids: str = field(default=CONTENT_IDS, compare=False)
    id_columns: tuple[str, ...] = field(default=(), compare=False)

    @classmethod
    def build(cls, name: str, kafka_conf: Mapping[str, Any], wal_dir: str, **options: Any) -> "SinkConfig":
        """Validate and copy user options into a config (the Java producer's settings mapped: :mod:`.javaconf`).

        Raises:
            ConfigError: naming the option that is wrong and why (a refused Java setting: what does its job).
        """
        fixed = ("kafka_conf_items", "name", "wal_dir")  # given positionally, or not an option
        check_option_names(options, [f.name for f in fields(cls) if f.name not in fixed])
        if not isinstance(kafka_conf, Mapping):
            raise ConfigError("kafka_conf", f"must be a mapping, got {type(kafka_conf).__name__}")
        items = []
        for k, v in kafka_conf.items():
            if not isinstance(k, str):
                raise ConfigError("kafka_conf", f"keys must be strings, got {type(k).__name__}")
            if k in CALLBACK_OPTIONS:  # a callback by reference: imported here once, as a check
                if callable(v):
                    raise ConfigError(f"kafka_conf[{k!r}]", "give the function as 'package.module:function' (a "
                                                            "value: the executors import it), not the callable")
                load_callable(k, v)
            elif callable(v):
                raise ConfigError(
                    f"kafka_conf[{k!r}]",
                    "callables cannot be shipped to executors; use plain values",
                )
            # confluent-kafka accepts str/int/float/bool; keep the user's value as text.
            items.append((k, v if isinstance(v, str) else (str(v).lower() if isinstance(v, bool) else str(v))))
        options.update({k: None for k in AUTO_OPTIONS if str(options.get(k)).lower() == "auto"})
        if isinstance(options.get("id_columns"), (list, str)):  # a list from Python, "a,b" from an option
            ids = options["id_columns"]
            options["id_columns"] = tuple(c.strip() for c in (ids.split(",") if isinstance(ids, str) else ids))
        mapped, origin = to_librdkafka(dict(items))  # the Java producer's settings in librdkafka's terms
        conf = cls(name=name, kafka_conf_items=tuple(sorted(mapped.items())), wal_dir=wal_dir, **options)
        check_kafka_conf(conf.producer_conf(), conf.scrub, origin)
        if origin:
            log.info("sink=%s java_settings_mapped=%s", name, ",".join(sorted(set(origin.values()))))
        if dropped := ignored(dict(items)):  # no counterpart in librdkafka, none needed (javaconf.TABLE says why)
            log.info("sink=%s java_settings_ignored=%s", name, ",".join(dropped))
        return conf

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _NAME_RE.match(self.name):
            raise ConfigError(
                "name", "must be 1-100 characters of letters, digits, '.', '_' or '-', "
                f"starting with a letter or digit, got {self.name!r}",
            )
        conf = dict(self.kafka_conf_items)
        if not conf.get("bootstrap.servers"):
            raise ConfigError("kafka_conf", "'bootstrap.servers' is required")
        for reserved in ("transactional.id",):
            if reserved in conf:
                raise ConfigError(f"kafka_conf[{reserved!r}]", "is set by the sink itself (exactly-once mode)")
        check_wal_dir(self.wal_dir)
        for opt in ("topic", "dead_letter_topic", "marker_topic"):
            v = getattr(self, opt)
            if v is not None and (not isinstance(v, str) or not _TOPIC_RE.match(v)):
                raise ConfigError(opt, f"must be a Kafka topic name ([A-Za-z0-9._-], 1-249 chars), got {v!r}")
        if self.dead_letter_topic is not None and self.dead_letter_topic == self.topic:
            raise ConfigError("dead_letter_topic", "must differ from the default topic")
        _positive("ack_timeout_s", self.ack_timeout_s, allow_zero=True)
        _positive("prune_interval_s", self.prune_interval_s)
        _positive("max_block_s", self.max_block_s, allow_zero=True)
        _positive("offsets_retention_s", self.offsets_retention_s)
        _positive("settle_timeout_s", self.settle_timeout_s)
        if self.exactly_once_lanes is not None:
            _positive("exactly_once_lanes", self.exactly_once_lanes, allow_zero=True, integer=True)
        _positive("retry_backoff_s", self.retry_backoff_s)
        _positive("retry_backoff_max_s", self.retry_backoff_max_s)
        _positive("max_wal_bytes", self.max_wal_bytes, integer=True)
        if self.max_wal_bytes < 1024 * 1024:
            raise ConfigError("max_wal_bytes", f"must be at least 1 MiB, got {self.max_wal_bytes}")
        if self.retry_backoff_max_s < self.retry_backoff_s:
            raise ConfigError("retry_backoff_max_s", "must be >= retry_backoff_s")
        if self.wal_sync not in WAL_SYNC_MODES:
            raise ConfigError("wal_sync", f"must be one of {WAL_SYNC_MODES}, got {self.wal_sync!r}")
        if self.delivery_engine not in DELIVERY_ENGINES:
            raise ConfigError("delivery_engine", f"must be one of {DELIVERY_ENGINES}, got {self.delivery_engine!r}")
        if self.guarantee not in (AT_LEAST_ONCE, EXACTLY_ONCE):
            raise ConfigError("guarantee", f"must be {AT_LEAST_ONCE!r} or {EXACTLY_ONCE!r}, got {self.guarantee!r}")
        if self.guarantee == EXACTLY_ONCE:
            check_exactly_once(self, conf)
        if not isinstance(self.id_header, str) or not self.id_header:
            raise ConfigError("id_header", "must be a non-empty string")
        if not isinstance(self.wait_for_broker, bool):
            raise ConfigError("wait_for_broker", f"must be True or False, got {self.wait_for_broker!r}")
        for flag in ("coalesce_tasks", "write_timestamp"):
            if not isinstance(getattr(self, flag), bool):
                raise ConfigError(flag, f"must be True or False, got {getattr(self, flag)!r}")
        check_record_ids(self.record_ids, self.id_columns, self.guarantee)
        if self.metrics_port is not None and (isinstance(self.metrics_port, bool) or not isinstance(
                self.metrics_port, int) or not 0 <= self.metrics_port <= 65535):
            raise ConfigError("metrics_port", f"must be None or a port number 0-65535, got {self.metrics_port!r}")
        warn_ack_timeout(self.name, self.ack_timeout_s, conf)
        for k, safe in _SAFE_DEFAULTS.items():
            v = conf.get(k)
            if v is not None and str(v).lower() not in (safe, "-1" if k == "acks" else safe):
                log.warning(
                    "sink=%s kafka option %s=%s weakens delivery: the broker may lose or duplicate "
                    "acknowledged records (safe value: %s)", self.name, k, v, safe,
                )

    # -- Kafka configuration -------------------------------------------------

    def producer_conf(self) -> dict[str, Any]:
        """The configuration handed to the producer: the user's, plus defaults, callbacks imported.

        A callback given by reference (``oauth_cb``: :mod:`.auth`) is imported
        in this process and handed over as the callable. Besides the safe
        defaults, ``partitioner`` is ``murmur2_random`` unless set: keyed
        records land on the partition the Java client (and so Spark's
        ``format("kafka")``) picks; librdkafka's own default
        (``consistent_random``, CRC32) would put them elsewhere.
        """
        conf = dict(_SAFE_DEFAULTS)
        conf["partitioner"] = JAVA_PARTITIONER
        conf.update(self.kafka_conf_items)
        return with_callbacks(conf)

    def scrub(self, text: str) -> str:
        """``text`` with every secret value of the Kafka config replaced by ``***``."""
        return scrub_secrets(dict(self.kafka_conf_items), text)

    def __repr__(self) -> str:
        return (
            f"SinkConfig(name={self.name!r}, topic={self.topic!r}, wal_dir={self.wal_dir!r}, "
            f"kafka_conf={redact(dict(self.kafka_conf_items))!r}, ack_timeout_s={self.ack_timeout_s}, "
            f"wal_sync={self.wal_sync!r}, max_wal_bytes={self.max_wal_bytes}, "
            f"dead_letter_topic={self.dead_letter_topic!r}, guarantee={self.guarantee!r})"
        )

    __str__ = __repr__


def default_of(option: str) -> Any:
    """The default of a :class:`SinkConfig` option: the one place every other default (the sink's signature, the job
    templates' settings, the ``rks`` command's options) is taken from.

    Raises:
        KeyError: no such option.
    """
    f = {f.name: f for f in fields(SinkConfig)}[option]
    return f.default_factory() if f.default_factory is not MISSING else f.default
