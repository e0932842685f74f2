"""Settings of the spark-submit job templates (``jobs/*.py``): a strict JSON conf file.

A conf file is a JSON object with the sections ``spark``, ``kafka``,
``sink``, ``source`` and ``query``. Four are shared by every template (the
dataclasses below); ``source`` is the template's own dataclass. Unknown
sections and keys are refused, so a typo fails the job instead of being
ignored; :func:`setting_keys` lists the dotted keys (``kafka.topic`` ...).

Two things may come from the environment instead of the file:

* ``KAFKA_BOOTSTRAP`` overrides ``kafka.bootstrap_servers`` (:data:`ENV_OVERRIDES`);
* a client option written as ``{"env": "NAME"}`` (in ``kafka.producer_conf``,
  or a template's own client options) is read from the variable ``NAME`` when
  the job starts. Secret options (``sasl.password`` ...) must be written this
  way; their values never appear in an error message or a log line
  (:mod:`.resolve` reads them). In a Schema Registry format's ``registry``
  (``sink.value_format`` / ``sink.key_format``) the variable is checked when
  the job starts and read by the driver each time it asks the registry.

A ``source`` dataclass checks its own values in ``__post_init__`` by raising
:class:`SettingsError` naming the dotted key.
"""

from __future__ import annotations

import json
import os
import types
import typing
from dataclasses import MISSING, dataclass, field, fields
from typing import Any, Mapping

from ..config import AUTO_OPTIONS, default_of, is_secret_option

__all__ = [
    "SettingsError", "SparkSettings", "KafkaSettings", "SinkSettings", "QuerySettings", "JobSettings",
    "COMMON_SECTIONS", "ENV_OVERRIDES", "sections_for", "setting_keys",
    "required_keys", "section_keys", "parse_sections", "settings_from_dict", "load_settings", "read_json",
    "check_client_conf", "check_format",
]


class SettingsError(ValueError):
    """The conf file is wrong: the message names the dotted key and why (never a secret value)."""


@dataclass(frozen=True)
class SparkSettings:
    """``spark``: how the SparkSession is built.

    Attributes:
        app_name: Spark application name.
        master: Master URL; ``null`` = the one spark-submit was given (``local[2]`` under plain ``python``).
        log_level: Spark's log level once the session is up (``WARN``, ``ERROR`` ...).
        conf: Extra Spark configuration, ``{"spark.x": "value"}``.
    """

    app_name: str = "rks-job"
    master: str | None = None
    log_level: str = "WARN"
    conf: dict = field(default_factory=dict)


@dataclass(frozen=True)
class KafkaSettings:
    """``kafka``: the cluster and topic written to.

    Attributes:
        bootstrap_servers: ``host:port[,host:port]``; env ``KAFKA_BOOTSTRAP`` overrides it.
        topic: Topic the rows go to.
        producer_conf: Further confluent-kafka producer options (secrets as ``{"env": "NAME"}``).
        create_topic_partitions: Create ``topic`` (and ``sink.dead_letter_topic``) with this
            many partitions if it does not exist (0 = never create topics).
        create_topic_replication_factor: Replication factor when creating it.
    """

    bootstrap_servers: str
    topic: str
    producer_conf: dict = field(default_factory=dict, repr=False)
    create_topic_partitions: int = 0
    create_topic_replication_factor: int = 1


@dataclass(frozen=True)
class SinkSettings:
    """``sink``: the :class:`RecoverableKafkaSink` options (see ``SinkConfig``).

    ``value_format`` / ``key_format`` is a Schema Registry format of the
    column (``null``: a binary or string column as it is, a struct as JSON
    text, see :func:`.runner.for_sink`): ``{"type": "avro" | "json_schema",
    "schema_file": path (or "schema": text), "registry": {"url": ...,
    "basic.auth.user.info": {"env": "NAME"}, ...}, "subject": null,
    "strategy": "topic" | "record" | "topic_record", "auto_register": true}``.
    """

    name: str
    wal_dir: str
    ack_timeout_s: float = default_of("ack_timeout_s")  # every default is SinkConfig's (config.default_of)
    wal_sync: str = default_of("wal_sync")
    max_wal_bytes: int = default_of("max_wal_bytes")
    max_block_s: float = default_of("max_block_s")
    prune_interval_s: float = default_of("prune_interval_s")
    dead_letter_topic: str | None = default_of("dead_letter_topic")
    guarantee: str = default_of("guarantee")
    exactly_once_lanes: int | None = default_of("exactly_once_lanes")  # None: "auto"
    settle_timeout_s: float = default_of("settle_timeout_s")
    offsets_retention_s: float = default_of("offsets_retention_s")  # the brokers' offsets.retention.minutes, in s
    record_ids: str = default_of("record_ids")
    id_columns: list = field(default_factory=lambda: list(default_of("id_columns")))
    write_timestamp: bool = default_of("write_timestamp")
    value_format: dict | None = field(default=None, repr=False)
    key_format: dict | None = field(default=None, repr=False)


@dataclass(frozen=True)
class QuerySettings:
    """``query``: the streaming query.

    Attributes:
        checkpoint_location: Spark's checkpoint directory (keep it with the WAL across restarts).
        trigger_interval_s: Processing-time trigger interval (0 = next batch as soon as one ends).
        available_now: Process what the source holds now, then stop (``Trigger.AvailableNow``;
            file and Kafka sources). ``trigger_interval_s`` is then unused.
        run_seconds: Stop after this long (0 = run until stopped or, with ``available_now``, done).
        stop_grace_s: On stop, how long to wait for the running batch to finish (and to drain).
        summary_path: Write the run's batch totals there as JSON when the job ends (null = don't).
    """

    checkpoint_location: str
    trigger_interval_s: float = 1.0
    available_now: bool = False
    run_seconds: float = 0.0
    stop_grace_s: float = 30.0
    summary_path: str | None = None


@dataclass(frozen=True)
class JobSettings:
    """Everything a template reads: the shared sections plus its own ``source``."""

    spark: SparkSettings
    kafka: KafkaSettings
    sink: SinkSettings
    source: Any
    query: QuerySettings


#: The sections every template has (``source`` is added per template).
COMMON_SECTIONS: dict[str, type] = {"spark": SparkSettings, "kafka": KafkaSettings, "sink": SinkSettings,
                                    "query": QuerySettings}
#: Environment variable -> the dotted setting it overrides.
ENV_OVERRIDES: dict[str, str] = {"KAFKA_BOOTSTRAP": "kafka.bootstrap_servers"}


def sections_for(source: type) -> dict[str, type]:
    """Section name -> dataclass of a template whose ``source`` section is ``source``, in conf-file order."""
    return {"spark": SparkSettings, "kafka": KafkaSettings, "sink": SinkSettings, "source": source,
            "query": QuerySettings}


def section_keys(sections: Mapping[str, type], required_only: bool = False) -> list[str]:
    """Dotted keys (``section.field``) of ``sections``; with ``required_only``, those without a default."""
    return [f"{section}.{f.name}" for section, cls in sections.items() for f in fields(cls)
            if not required_only or (f.default is MISSING and f.default_factory is MISSING)]


def setting_keys(source: type) -> list[str]:
    """Every dotted key a template with this ``source`` dataclass reads."""
    return section_keys(sections_for(source))


def required_keys(source: type) -> list[str]:
    """The dotted keys without a default: a conf file must set them."""
    return section_keys(sections_for(source), required_only=True)


def _check_type(key: str, value: Any, hint: Any) -> Any:
    """``value`` if it has the type ``hint`` allows (ints pass as floats); else SettingsError."""
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        args = typing.get_args(hint)
        if value is None and type(None) in args or key.rpartition(".")[2] in AUTO_OPTIONS and \
                str(value).lower() == "auto":
            return None
        (hint,) = [a for a in args if a is not type(None)]
    hint = typing.get_origin(hint) or hint  # dict[str, Any] -> dict
    if hint is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if hint in (int, float) and isinstance(value, bool):
        raise SettingsError(f"{key}: must be a number, got {value!r}")
    if not isinstance(value, hint):
        raise SettingsError(f"{key}: must be {hint.__name__}, got {type(value).__name__}")
    return value


def parse_sections(raw: Any, sections: Mapping[str, type], overrides: Mapping[str, Any] | None = None,
                   ) -> dict[str, Any]:
    """Validate a parsed conf file against ``sections`` (name -> dataclass); returns the built sections.

    ``overrides`` maps dotted keys to values that win over the file.

    Raises:
        SettingsError: an unknown section or key, a missing required key, a
            wrong type, or a value a dataclass's ``__post_init__`` refused.
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
        names = [f.name for f in fields(cls)]
        bad = sorted(set(given) - set(names))
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


def check_client_conf(key: str, conf: Mapping[str, Any]) -> None:
    """Check Kafka client options: plain scalars or ``{"env": "NAME"}``; secrets only as the latter.

    Raises:
        SettingsError: naming ``key[option]``, never the value.
    """
    for name, v in conf.items():
        ref = isinstance(v, Mapping) and set(v) == {"env"} and isinstance(v["env"], str)
        if not (ref or isinstance(v, (str, int, float, bool))):
            raise SettingsError(f"{key}[{name!r}]: must be a string, number, boolean or {{\"env\": \"VARIABLE\"}}")
        if is_secret_option(name) and not ref:
            raise SettingsError(f"{key}[{name!r}]: holds a secret; write it as {{\"env\": \"VARIABLE\"}} and set "
                                "the variable, not in the conf file")


FORMAT_KEYS = frozenset({"type", "schema", "schema_file", "registry", "subject", "strategy", "auto_register"})
FORMAT_TYPES = ("avro", "json_schema")


def check_format(key: str, fmt: Mapping[str, Any]) -> None:
    """Check a ``sink.value_format`` / ``sink.key_format`` object (see :class:`SinkSettings`).

    Raises:
        SettingsError: naming the dotted key, never a secret value.
    """
    bad = sorted(set(fmt) - FORMAT_KEYS)
    if bad:
        raise SettingsError(f"{key}: unknown key(s) {bad}; allowed: {sorted(FORMAT_KEYS)}")
    if fmt.get("type") not in FORMAT_TYPES:
        raise SettingsError(f"{key}.type: must be one of {FORMAT_TYPES}, got {fmt.get('type')!r}")
    if ("schema" in fmt) == ("schema_file" in fmt):
        raise SettingsError(f"{key}: give exactly one of schema (its text) and schema_file (a path)")
    registry = fmt.get("registry")
    if not isinstance(registry, Mapping) or not registry.get("url"):
        raise SettingsError(f"{key}.registry: must be an object with the registry's url")
    from ..driver.registry import url_credentials

    if isinstance(registry["url"], str) and url_credentials(registry["url"]):  # any URL of a list, any scheme
        raise SettingsError(f"{key}.registry['url']: holds credentials (user:password@); put them in "
                            "basic.auth.user.info as {\"env\": \"VARIABLE\"}")
    check_client_conf(f"{key}.registry", registry)


def _check_common(s: JobSettings) -> None:
    v: Any
    for key, v in (("kafka.create_topic_replication_factor", s.kafka.create_topic_replication_factor),):
        if v <= 0:
            raise SettingsError(f"{key}: must be > 0, got {v}")
    for key, v in (("query.trigger_interval_s", s.query.trigger_interval_s),
                   ("query.run_seconds", s.query.run_seconds), ("query.stop_grace_s", s.query.stop_grace_s),
                   ("kafka.create_topic_partitions", s.kafka.create_topic_partitions)):
        if v < 0:
            raise SettingsError(f"{key}: must be >= 0, got {v}")
    for key, v in (("kafka.bootstrap_servers", s.kafka.bootstrap_servers), ("kafka.topic", s.kafka.topic),
                   ("query.checkpoint_location", s.query.checkpoint_location)):
        if not v:
            raise SettingsError(f"{key}: must not be empty")
    check_client_conf("kafka.producer_conf", s.kafka.producer_conf)
    for key, fmt in (("sink.value_format", s.sink.value_format), ("sink.key_format", s.sink.key_format)):
        if fmt is not None:
            check_format(key, fmt)
    if "bootstrap.servers" in s.kafka.producer_conf:
        raise SettingsError("kafka.producer_conf['bootstrap.servers']: set kafka.bootstrap_servers instead")


def settings_from_dict(raw: Mapping[str, Any], source: type, environ: Mapping[str, str] | None = None,
                       ) -> JobSettings:
    """Validate a parsed conf file (plus :data:`ENV_OVERRIDES` from ``environ``) into settings.

    Raises:
        SettingsError: an unknown section or key, a missing required key, a
            wrong type or value; the message names the dotted key.
    """
    environ = os.environ if environ is None else environ
    overrides = {key: environ[var] for var, key in ENV_OVERRIDES.items() if environ.get(var)}
    settings = JobSettings(**parse_sections(raw, sections_for(source), overrides))
    _check_common(settings)
    return settings


def read_json(path: str) -> Any:
    """The parsed JSON file at ``path``.

    Raises:
        SettingsError: not valid JSON.
        OSError: the file cannot be read.
    """
    with open(path, encoding="utf-8") as fh:
        try:
            return json.load(fh)
        except json.JSONDecodeError as exc:
            raise SettingsError(f"{path}: not valid JSON: {exc}") from None


def load_settings(path: str, source: type, environ: Mapping[str, str] | None = None) -> JobSettings:
    """Read and validate the JSON conf file at ``path`` for a template with this ``source`` dataclass.

    Raises:
        SettingsError: the file is not valid JSON or a setting is wrong.
        OSError: the file cannot be read.
    """
    return settings_from_dict(read_json(path), source, environ)
