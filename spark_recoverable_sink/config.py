"""Sink configuration: one frozen dataclass, validated when it is built.

The Kafka configuration is copied and passed to confluent-kafka as it is,
except that the safe producer settings (``enable.idempotence=true``,
``acks=all``) are filled in when the user did not set them. Values of secret
options never appear in reprs, logs or error messages: :func:`redact` and
:meth:`SinkConfig.scrub` are the only ways this package prints Kafka config.
"""

from __future__ import annotations

import difflib
import logging
import math
import os
import re
import stat
from dataclasses import dataclass, field, fields
from typing import Any, Mapping

from .errors import ConfigError

__all__ = [
    "SinkConfig",
    "AT_LEAST_ONCE",
    "EXACTLY_ONCE",
    "WAL_SYNC_MODES",
    "DEFAULT_MAX_WAL_BYTES",
    "DEFAULT_WAL_DIR",
    "redact",
    "is_secret_option",
    "check_kafka_conf",
]

log = logging.getLogger(__name__)

AT_LEAST_ONCE = "at_least_once"
EXACTLY_ONCE = "exactly_once"
WAL_SYNC_MODES = ("commit", "none")
DEFAULT_MAX_WAL_BYTES = 20 * 1024**3

_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")
_TOPIC_RE = re.compile(r"^[A-Za-z0-9._-]{1,249}$")
_SECRET_RE = re.compile(
    r"(password|secret|passwd|\.pem$|jaas|oauthbearer\.config|token|credential|api\.key|private)",
    re.IGNORECASE,
)
_SAFE_DEFAULTS = {"enable.idempotence": "true", "acks": "all"}
_JAVA_PARTITIONER = "murmur2_random"  # the Java client's default: murmur2 of the key, random when null
_REDACTED = "***"


def is_secret_option(name: str) -> bool:
    """Whether a Kafka config option holds a secret (its value is never printed)."""
    return bool(_SECRET_RE.search(name))


def redact(conf: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of ``conf`` with the values of secret options replaced by ``***``."""
    return {k: (_REDACTED if is_secret_option(k) else v) for k, v in conf.items()}


def _positive(option: str, value: Any, *, allow_zero: bool = False, integer: bool = False) -> None:
    kinds = (int,) if integer else (int, float)
    if isinstance(value, bool) or not isinstance(value, kinds):
        raise ConfigError(option, f"must be a {'whole' if integer else ''} number, got {type(value).__name__}")
    if isinstance(value, float) and not math.isfinite(value):
        raise ConfigError(option, f"must be finite, got {value!r}")
    if value < 0 or (value == 0 and not allow_zero):
        raise ConfigError(option, f"must be {'>= 0' if allow_zero else '> 0'}, got {value!r}")


# Private to the user the Python workers run as, on a persistent disk; ``~`` is
# expanded on each executor, never on the driver (another host, maybe another user).
DEFAULT_WAL_DIR = "~/.local/state/spark_recoverable_sink"


def _check_wal_dir(wal_dir: Any) -> None:
    """Reject, on the driver, a ``wal_dir`` that is wrong on every host; never creates anything.

    Only what is certainly wrong is refused here: the path (or its nearest
    existing ancestor) exists as something other than a directory, or it is a
    symbolic link. Ownership, permissions and writability are checked on the
    executor (:func:`.slots.sink_dir`), where the directory is used.
    """
    if not isinstance(wal_dir, str) or not wal_dir:
        raise ConfigError("wal_dir", "must be a non-empty path")
    if wal_dir.startswith("~"):
        return  # expanded on the executor, for the user it runs as
    path = os.path.abspath(wal_dir)
    try:
        if stat.S_ISLNK(os.lstat(path).st_mode):
            raise ConfigError("wal_dir", f"{wal_dir} is a symbolic link; the sink never follows one there: "
                                         "give the real directory")
    except (FileNotFoundError, NotADirectoryError):
        pass
    except OSError:
        return  # not ours to judge from the driver
    while True:  # the path, else its nearest existing ancestor, must be a directory
        try:
            st = os.stat(path)
        except (FileNotFoundError, NotADirectoryError):
            if os.path.dirname(path) == path:
                return
            path = os.path.dirname(path)
            continue
        except OSError:
            return
        if not stat.S_ISDIR(st.st_mode):
            where = wal_dir if path == os.path.abspath(wal_dir) else f"{wal_dir}: its parent {path}"
            raise ConfigError("wal_dir", f"{where} exists and is not a directory; choose a directory the "
                                         f"sink may create (default {DEFAULT_WAL_DIR})")
        return


#: Options of :class:`.RecoverableKafkaSink` that are not config fields (for "did you mean").
_SINK_ONLY_OPTIONS = ("name", "kafka_conf", "history", "drain_on_failure_s")
#: Kafka options whose values are executor-local files or start network activity of their
#: own: left out of the driver's check (their names are librdkafka's and checked there).
_NOT_CHECKED_ON_DRIVER = re.compile(r"(\.location$|^sasl\.kerberos\.|^sasl\.oauthbearer\.|^plugin\.library\.paths$)")
_TIMEOUT_OPTIONS = ("message.timeout.ms", "delivery.timeout.ms")
#: librdkafka's names in its errors -> the alias users usually write.
_ALIASES = {"queue.buffering.max.ms": "linger.ms", "request.required.acks": "acks",
            "message.timeout.ms": "delivery.timeout.ms"}


def _check_option_names(options: Mapping[str, Any]) -> None:
    """Unknown keyword options -> ``ConfigError`` naming the closest valid one."""
    known = [f.name for f in fields(SinkConfig) if f.name not in ("kafka_conf_items", "name", "wal_dir")]
    valid = known + ["wal_dir", *_SINK_ONLY_OPTIONS]
    for opt in options:
        if opt in known:
            continue
        close = difflib.get_close_matches(opt, valid, n=1, cutoff=0.6)
        hint = f"; did you mean {close[0]!r}?" if close else f"; valid options: {', '.join(sorted(valid))}"
        if "." in opt:
            hint += " (Kafka client options go into kafka_conf)"
        raise ConfigError(opt, f"is not an option of the sink{hint}")


def check_kafka_conf(config: "SinkConfig") -> None:
    """Let librdkafka check the Kafka configuration on the driver, without connecting.

    A producer is created and destroyed with the user's options minus
    ``bootstrap.servers`` (so it connects to nothing; it costs well under a
    millisecond), minus options naming executor-local files or starting their
    own network activity. Its log is silenced; secrets are scrubbed.

    Raises:
        ConfigError: naming ``kafka_conf`` and librdkafka's reason.
    """
    try:
        from confluent_kafka import KafkaException, Producer
    except ImportError:  # pragma: no cover - a dependency of the package
        return
    conf: dict[str, Any] = {k: v for k, v in config.producer_conf().items()
                            if k != "bootstrap.servers" and not _NOT_CHECKED_ON_DRIVER.search(k)}
    protocol = conf.pop("security.protocol", None)
    if protocol is not None and str(protocol).lower() not in ("plaintext", "ssl", "sasl_plaintext", "sasl_ssl"):
        raise ConfigError("kafka_conf['security.protocol']",
                          f"must be plaintext, ssl, sasl_plaintext or sasl_ssl, got {config.scrub(str(protocol))!r}")
    conf["log_level"] = 0
    try:
        producer = Producer(conf)
    except (KafkaException, ValueError, TypeError) as exc:
        err = exc.args[0] if exc.args else exc
        text = err.str() if hasattr(err, "str") else str(err)
        named = re.search(r'property:? "([^"]+)"', text)
        prop = named.group(1) if named else ""
        prop = prop if prop in conf else _ALIASES.get(prop, "")
        option = f"kafka_conf[{prop!r}]" if prop in conf else "kafka_conf"
        raise ConfigError(option, f"refused by the Kafka client: {config.scrub(text)}") from None
    del producer  # destroyed here: it never had a broker to talk to


def _warn_ack_timeout(name: str, ack_timeout_s: float, conf: Mapping[str, str]) -> None:
    """``ack_timeout_s`` longer than the client's own delivery timeout: a warning, not an error.

    Nothing is lost either way (a record the client times out is retried from
    the WAL), so the configuration is valid; but the task then waits through
    timeouts and retries instead of for one delivery, which is rarely meant.
    """
    for opt in _TIMEOUT_OPTIONS:
        raw = conf.get(opt)
        try:
            ms = int(raw) if raw is not None else None
        except ValueError:
            continue  # librdkafka names the bad value
        if ms and ack_timeout_s * 1000 > ms:
            log.warning(
                "sink=%s ack_timeout_s=%s is longer than kafka option %s=%d: records the client times out "
                "are retried from the WAL while the task waits; lower ack_timeout_s to at most %.1f or raise %s",
                name, ack_timeout_s, opt, ms, ms / 1000, opt,
            )


@dataclass(frozen=True)
class SinkConfig:
    """Everything a task needs to write; picklable, holds no live handle.

    Attributes:
        name: Stable id of the sink; goes into WAL paths and record ids.
        kafka_conf: Items of the user's confluent-kafka configuration (a copy).
        topic: Default topic; a ``topic`` column overrides it per row.
        wal_dir: Executor-local directory for the write-ahead log (default
            ``~/.local/state/spark_recoverable_sink``, ``~`` expanded on the executor); must be
            private to the user the workers run as (see :mod:`.slots`).
        ack_timeout_s: How long a task waits for broker acks (0 = fully async).
        checkpoint_interval_s: Longest time between two prunes of acked records.
        max_wal_bytes: Live WAL bytes one slot (one Python worker) may hold.
        max_block_s: How long an append waits for space before ``WalFullError``.
        wal_sync: ``"commit"`` (fsync per WAL transaction) or ``"none"``.
        dead_letter_topic: Where records with non-retriable errors are copied.
        retry_backoff_s / retry_backoff_max_s: Backoff of retries from the WAL.
        guarantee: ``"at_least_once"`` (``"exactly_once"`` is reserved).
        id_header: Name of the header carrying each record's deterministic id.
        wait_for_broker: When the first batch of a sink cannot reach any
            broker: ``False`` (default) fails it with ``BrokerUnreachableError``,
            ``True`` only warns and keeps waiting (records stay in the WAL).
    """

    name: str
    kafka_conf_items: tuple[tuple[str, str], ...] = field(repr=False)
    wal_dir: str
    topic: str | None = None
    ack_timeout_s: float = 30.0
    checkpoint_interval_s: float = 1.0
    max_wal_bytes: int = DEFAULT_MAX_WAL_BYTES
    max_block_s: float = 60.0
    wal_sync: str = "commit"
    dead_letter_topic: str | None = None
    retry_backoff_s: float = 0.5
    retry_backoff_max_s: float = 30.0
    guarantee: str = AT_LEAST_ONCE
    id_header: str = "rks-id"
    wait_for_broker: bool = False

    @classmethod
    def build(cls, name: str, kafka_conf: Mapping[str, Any], wal_dir: str, **options: Any) -> "SinkConfig":
        """Validate and copy user options into a config.

        Raises:
            ConfigError: naming the option that is wrong and why.
        """
        _check_option_names(options)
        if not isinstance(kafka_conf, Mapping):
            raise ConfigError("kafka_conf", f"must be a mapping, got {type(kafka_conf).__name__}")
        items = []
        for k, v in kafka_conf.items():
            if not isinstance(k, str):
                raise ConfigError("kafka_conf", f"keys must be strings, got {type(k).__name__}")
            if callable(v):
                raise ConfigError(
                    f"kafka_conf[{k!r}]",
                    "callables cannot be shipped to executors; use plain values",
                )
            # confluent-kafka accepts str/int/float/bool; keep the user's value as text.
            items.append((k, v if isinstance(v, str) else (str(v).lower() if isinstance(v, bool) else str(v))))
        conf = cls(name=name, kafka_conf_items=tuple(sorted(items)), wal_dir=wal_dir, **options)
        check_kafka_conf(conf)
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
        _check_wal_dir(self.wal_dir)
        for opt in ("topic", "dead_letter_topic"):
            v = getattr(self, opt)
            if v is not None and (not isinstance(v, str) or not _TOPIC_RE.match(v)):
                raise ConfigError(opt, f"must be a Kafka topic name ([A-Za-z0-9._-], 1-249 chars), got {v!r}")
        if self.dead_letter_topic is not None and self.dead_letter_topic == self.topic:
            raise ConfigError("dead_letter_topic", "must differ from the default topic")
        _positive("ack_timeout_s", self.ack_timeout_s, allow_zero=True)
        _positive("checkpoint_interval_s", self.checkpoint_interval_s)
        _positive("max_block_s", self.max_block_s, allow_zero=True)
        _positive("retry_backoff_s", self.retry_backoff_s)
        _positive("retry_backoff_max_s", self.retry_backoff_max_s)
        _positive("max_wal_bytes", self.max_wal_bytes, integer=True)
        if self.max_wal_bytes < 1024 * 1024:
            raise ConfigError("max_wal_bytes", f"must be at least 1 MiB, got {self.max_wal_bytes}")
        if self.retry_backoff_max_s < self.retry_backoff_s:
            raise ConfigError("retry_backoff_max_s", "must be >= retry_backoff_s")
        if self.wal_sync not in WAL_SYNC_MODES:
            raise ConfigError("wal_sync", f"must be one of {WAL_SYNC_MODES}, got {self.wal_sync!r}")
        if self.guarantee == EXACTLY_ONCE:
            raise ConfigError("guarantee", "'exactly_once' is not available yet; use 'at_least_once'")
        if self.guarantee != AT_LEAST_ONCE:
            raise ConfigError("guarantee", f"must be {AT_LEAST_ONCE!r}, got {self.guarantee!r}")
        if not isinstance(self.id_header, str) or not self.id_header:
            raise ConfigError("id_header", "must be a non-empty string")
        if not isinstance(self.wait_for_broker, bool):
            raise ConfigError("wait_for_broker", f"must be True or False, got {self.wait_for_broker!r}")
        _warn_ack_timeout(self.name, self.ack_timeout_s, conf)
        for k, safe in _SAFE_DEFAULTS.items():
            v = conf.get(k)
            if v is not None and str(v).lower() not in (safe, "-1" if k == "acks" else safe):
                log.warning(
                    "sink=%s kafka option %s=%s weakens delivery: the broker may lose or duplicate "
                    "acknowledged records (safe value: %s)", self.name, k, v, safe,
                )

    # -- Kafka configuration -------------------------------------------------

    def producer_conf(self) -> dict[str, str]:
        """The configuration handed to ``confluent_kafka.Producer``: the user's, plus defaults.

        Besides the safe defaults, ``partitioner`` is ``murmur2_random`` unless
        set: keyed records land on the partition the Java client (and so
        Spark's ``format("kafka")``) picks; librdkafka's own default
        (``consistent_random``, CRC32) would put them elsewhere.
        """
        conf = dict(_SAFE_DEFAULTS)
        conf["partitioner"] = _JAVA_PARTITIONER
        conf.update(self.kafka_conf_items)
        return conf

    def secret_values(self) -> tuple[str, ...]:
        """Values of secret options (to scrub from texts produced by the Kafka client)."""
        return tuple(v for k, v in self.kafka_conf_items if is_secret_option(k) and v)

    def scrub(self, text: str) -> str:
        """``text`` with every secret value of the Kafka config replaced by ``***``."""
        for secret in self.secret_values():
            text = text.replace(secret, _REDACTED)
        return text

    def __repr__(self) -> str:
        return (
            f"SinkConfig(name={self.name!r}, topic={self.topic!r}, wal_dir={self.wal_dir!r}, "
            f"kafka_conf={redact(dict(self.kafka_conf_items))!r}, ack_timeout_s={self.ack_timeout_s}, "
            f"wal_sync={self.wal_sync!r}, max_wal_bytes={self.max_wal_bytes}, "
            f"dead_letter_topic={self.dead_letter_topic!r}, guarantee={self.guarantee!r})"
        )

    __str__ = __repr__
