"""Checks of a sink configuration made on the driver, before any task runs.

Each one refuses what is certainly wrong on every executor (an unknown
option, a Kafka property librdkafka rejects, a ``wal_dir`` that is a file)
with a :class:`.ConfigError` naming the option, or warns about what is valid
but rarely meant. Nothing here connects to a broker or creates a file.
"""

from __future__ import annotations

import difflib
import logging
import os
import re
import stat
from typing import Any, Callable, Mapping

from .errors import ConfigError

__all__ = ["DEFAULT_WAL_DIR", "JAVA_PARTITIONER", "check_exactly_once", "check_record_ids",
           "check_wal_dir", "check_option_names", "check_kafka_conf", "warn_ack_timeout"]

log = logging.getLogger("spark_recoverable_sink.config")

JAVA_PARTITIONER = "murmur2_random"  # the Java client's default: murmur2 of the key, random when null

# Private to the user the Python workers run as, on a persistent disk; ``~`` is
# expanded on each executor, never on the driver (another host, maybe another user).
DEFAULT_WAL_DIR = "~/.local/state/spark_recoverable_sink"


def check_wal_dir(wal_dir: Any) -> None:
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
_SINK_ONLY_OPTIONS = ("name", "kafka_conf", "history", "drain_on_failure_s", "run_id")
#: Kafka options whose values are executor-local files or start network activity of their
#: own: left out of the driver's check (their names are librdkafka's and checked there).
_NOT_CHECKED_ON_DRIVER = re.compile(
    r"(\.location$|^sasl\.kerberos\.|^sasl\.oauthbearer\.|^plugin\.library\.paths$|^oauth_cb$)")
_TIMEOUT_OPTIONS = ("message.timeout.ms", "delivery.timeout.ms")
#: librdkafka's names in its errors -> the alias users usually write.
_ALIASES = {"queue.buffering.max.ms": "linger.ms", "request.required.acks": "acks",
            "message.timeout.ms": "delivery.timeout.ms"}


def check_option_names(options: Mapping[str, Any], known: list[str]) -> None:
    """Unknown keyword options -> ``ConfigError`` naming the closest valid one."""
    valid = known + ["wal_dir", *_SINK_ONLY_OPTIONS]
    for opt in options:
        if opt in known:
            continue
        close = difflib.get_close_matches(opt, valid, n=1, cutoff=0.6)
        hint = f"; did you mean {close[0]!r}?" if close else f"; valid options: {', '.join(sorted(valid))}"
        if "." in opt:
            hint += " (Kafka client options go into kafka_conf)"
        raise ConfigError(opt, f"is not an option of the sink{hint}")


def check_kafka_conf(producer_conf: Mapping[str, str], scrub: Callable[[str], str],
                     origin: Mapping[str, str] | None = None) -> None:
    """Let librdkafka check a producer configuration on the driver, without connecting.

    A producer is created and destroyed with the user's options minus
    ``bootstrap.servers`` (so it connects to nothing; it costs well under a
    millisecond), minus options naming executor-local files or starting their
    own network activity. Its log is silenced; ``scrub`` removes secrets from its messages.
    ``origin`` maps a librdkafka name to the Java setting that gave it (:mod:`.javaconf`), named instead.

    Raises:
        ConfigError: naming ``kafka_conf`` and librdkafka's reason.
    """
    try:
        from confluent_kafka import KafkaException, Producer
    except ImportError:  # pragma: no cover - a dependency of the package
        return
    conf: dict[str, Any] = {k: v for k, v in producer_conf.items()
                            if k != "bootstrap.servers" and not _NOT_CHECKED_ON_DRIVER.search(k)}
    protocol = conf.pop("security.protocol", None)
    if protocol is not None and str(protocol).lower() not in ("plaintext", "ssl", "sasl_plaintext", "sasl_ssl"):
        raise ConfigError("kafka_conf['security.protocol']",
                          f"must be plaintext, ssl, sasl_plaintext or sasl_ssl, got {scrub(str(protocol))!r}")
    conf["log_level"] = 0
    try:
        producer = Producer(conf)
    except (KafkaException, ValueError, TypeError) as exc:
        err = exc.args[0] if exc.args else exc
        text = err.str() if hasattr(err, "str") else str(err)
        named = re.search(r'property:? "([^"]+)"', text)
        prop = named.group(1) if named else ""
        prop = prop if prop in conf else _ALIASES.get(prop, "")
        given = (origin or {}).get(prop, prop)
        option = f"kafka_conf[{given!r}]" if prop in conf else "kafka_conf"
        via = f" ({given} is librdkafka's {prop})" if given != prop else ""
        raise ConfigError(option, f"refused by the Kafka client: {scrub(text)}{via}") from None
    del producer  # destroyed here: it never had a broker to talk to
    _check_queue_holds_a_record(producer_conf, origin or {})


def _check_queue_holds_a_record(conf: Mapping[str, str], origin: Mapping[str, str]) -> None:
    """The producer's queue must hold the largest record it may send: librdkafka refuses a record larger than
    its queue with QUEUE_FULL even when the queue is empty, a local error the sink would retry for ever.

    Raises:
        ConfigError: ``queue.buffering.max.kbytes`` (Java's ``buffer.memory``) below ``message.max.bytes``.
    """
    try:
        queue = int(conf.get("queue.buffering.max.kbytes", 1048576)) * 1024
        largest = int(conf.get("message.max.bytes", 1000000))
    except (TypeError, ValueError):
        return  # librdkafka refused or accepted the text itself above
    if queue < largest:
        q = origin.get("queue.buffering.max.kbytes", "queue.buffering.max.kbytes")
        m = origin.get("message.max.bytes", "message.max.bytes")
        raise ConfigError(f"kafka_conf[{q!r}]",
                          f"the producer's queue ({queue} bytes) is smaller than the largest record it may send "
                          f"({m}: {largest} bytes): such a record could never be queued; raise {q} or lower {m}")


def warn_ack_timeout(name: str, ack_timeout_s: float, conf: Mapping[str, str]) -> None:
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


def check_record_ids(record_ids: Any, id_columns: Any, guarantee: str) -> None:
    """Refuse a ``record_ids`` / ``id_columns`` pair that cannot make ids (:mod:`.ids`).

    Raises:
        ConfigError: an unknown ``record_ids``; ``"columns"`` without
            ``id_columns`` or ``id_columns`` with another mode; a mode other
            than the default with exactly-once (its ids are its lanes').
    """
    modes = ("content", "partition", "columns")
    if record_ids not in modes:
        raise ConfigError("record_ids", f"must be one of {', '.join(modes)}, got {record_ids!r}")
    if not isinstance(id_columns, tuple) or not all(isinstance(c, str) and c for c in id_columns):
        raise ConfigError("id_columns", f"must be a list of column names, got {id_columns!r}")
    if len(set(id_columns)) != len(id_columns):
        raise ConfigError("id_columns", f"names a column twice: {', '.join(id_columns)}")
    if (record_ids == "columns") != bool(id_columns):
        raise ConfigError("id_columns", "is required with record_ids='columns', and only with it (got "
                                        f"record_ids={record_ids!r}, id_columns={list(id_columns)!r})")
    if guarantee == "exactly_once" and record_ids != "content":
        raise ConfigError("record_ids", "must be left 'content' with exactly_once: its record ids are its lanes' "
                                        "(exactly_once_lanes), the same in every run of a batch")


def check_exactly_once(config: Any, conf: Mapping[str, str]) -> None:
    """Refuse what exactly-once cannot work with (``config`` is a :class:`.SinkConfig` being built).

    Raises:
        ConfigError: naming the option: async acks, a marker topic that is a
            data topic, a dead-letter topic, ``acks`` other than all, or a
            message timeout above the transaction timeout.
    """
    if config.ack_timeout_s <= 0:
        raise ConfigError("ack_timeout_s", "must be > 0 with exactly_once: a task publishes its unit in a "
                                           "transaction before it returns (0 would make every unit wait "
                                           "for the poller and every batch for settle())")
    if config.marker_topic in (config.topic, config.dead_letter_topic):
        raise ConfigError("marker_topic", "must differ from the sink's data topics")
    if config.dead_letter_topic is not None:
        raise ConfigError("dead_letter_topic", "is not supported with exactly_once: a record refused for good "
                                               "refuses its whole unit (a lane's records of the batch), every "
                                               "record of which goes to the WAL's dead-letter store, and the batch "
                                               "fails with DeadLetterError (docs/guarantees.md); "
                                               "`rks dead-letters` lists them")
    if str(conf.get("acks", "all")).lower() not in ("all", "-1"):
        raise ConfigError("kafka_conf['acks']", "must be 'all' with exactly_once (Kafka transactions need it)")
    ms = {}
    for opt in ("transaction.timeout.ms", "message.timeout.ms", "delivery.timeout.ms"):
        try:
            ms[opt] = int(conf[opt]) if opt in conf else None
        except ValueError:
            ms[opt] = None  # librdkafka names the bad value (check_kafka_conf)
    txn_ms = ms["transaction.timeout.ms"] or 60000
    for opt in ("message.timeout.ms", "delivery.timeout.ms"):
        limit = ms[opt]
        if limit is not None and limit > txn_ms:
            raise ConfigError(f"kafka_conf[{opt!r}]", f"must not exceed transaction.timeout.ms={txn_ms} "
                                                      "with exactly_once (the client refuses it)")
