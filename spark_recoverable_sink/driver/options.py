"""Data-source options -> the sink's configuration, with the sink's own validation.

``.option(...)`` values arrive as strings, keys lower-cased by Spark. They
map onto :class:`.SinkConfig` exactly as the keyword arguments of
:class:`.RecoverableKafkaSink` do:

* ``kafka.<option>`` -> ``kafka_conf[<option>]`` (the prefix removed, as in
  Spark's Kafka sink; the Java producer's settings are then mapped to
  librdkafka's by :class:`.SinkConfig`, see :mod:`..javaconf`);
* ``name``, ``topic``, ``wal_dir``, ``run_id`` and every other sink keyword
  under its own name, converted to the field's type (``true``/``false`` for
  booleans);
* options Spark itself consumes (``checkpointLocation``, ``path``) are ignored.

A misspelt option fails with the same :class:`.ConfigError` (naming the
closest valid one) as a misspelt keyword.
"""

from __future__ import annotations

import types
import typing
from dataclasses import dataclass, fields
from typing import Any, Mapping

from ..checks import DEFAULT_WAL_DIR, check_option_names
from ..config import AUTO_OPTIONS, CONTENT_IDS, PARTITION_IDS, SinkConfig
from ..errors import ConfigError
from .query import check_run_id

__all__ = ["SinkOptions", "parse_options", "KAFKA_PREFIX", "SPARK_OPTIONS", "DRIVER_STEP_KEYWORDS"]

KAFKA_PREFIX = "kafka."
#: Options Spark passes through to every writer; not the sink's.
SPARK_OPTIONS = frozenset({"checkpointlocation", "path"})
#: Keywords of :class:`.RecoverableKafkaSink` (not :class:`.SinkConfig` fields) the data source refuses, and why.
DRIVER_STEP_KEYWORDS = {
    "history": "an option of foreachBatch(sink) only; the data source keeps no driver state",
    "drain_on_failure_s": "an option of foreachBatch(sink) only; the data source keeps no driver state",
    "value_format": "needs a driver step that builds the batch's plan, which the data source does not have (Spark "
                    "runs its writer per partition): use foreachBatch(sink), sink.write(df) or a job template",
    "key_format": "needs a driver step that builds the batch's plan, which the data source does not have (Spark "
                  "runs its writer per partition): use foreachBatch(sink), sink.write(df) or a job template",
}
_FIXED = ("kafka_conf_items", "name", "wal_dir")


@dataclass(frozen=True)
class SinkOptions:
    """What the data source's options say: the sink configuration, a fixed run id (or ``None``), and whether the user
    chose ``record_ids`` (else the data source picks by the input's columns: :mod:`.datasource`)."""

    config: SinkConfig
    run_id: str | None
    ids_chosen: bool = True


def _convert(option: str, raw: str, hint: Any) -> Any:
    if option in AUTO_OPTIONS and raw.strip().lower() == "auto":
        return None
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        hint = next(a for a in typing.get_args(hint) if a is not type(None))
    try:
        if hint is bool:
            low = raw.strip().lower()
            if low not in ("true", "false"):
                raise ValueError
            return low == "true"
        if hint is int:
            return int(raw)
        if hint is float:
            return float(raw)
    except ValueError:
        kind = {bool: "true or false", int: "a whole number", float: "a number"}[hint]
        raise ConfigError(option, f"must be {kind}, got {raw!r}") from None
    return raw


def parse_options(options: Mapping[str, str]) -> SinkOptions:
    """Build the sink configuration from data-source options.

    Raises:
        ConfigError: an unknown or misspelt option, a value of the wrong type,
            a missing ``name`` or ``kafka.bootstrap.servers``, or any check of
            :class:`.SinkConfig` (the message names the option).
    """
    kafka_conf: dict[str, str] = {}
    sink_opts: dict[str, str] = {}
    for key, value in options.items():
        key = key.lower()
        if key in SPARK_OPTIONS:
            continue
        if key.startswith(KAFKA_PREFIX):
            kafka_conf[key[len(KAFKA_PREFIX):]] = value
        else:
            sink_opts[key] = value
    name = sink_opts.pop("name", None)
    if not name:
        raise ConfigError("name", "is required: .option('name', ...) is the sink's stable id (WAL paths, record ids)")
    wal_dir = sink_opts.pop("wal_dir", DEFAULT_WAL_DIR)
    run_id = check_run_id("run_id", sink_opts.pop("run_id", None))
    for opt, why in DRIVER_STEP_KEYWORDS.items():
        if opt in sink_opts:
            raise ConfigError(opt, ("is " if why.startswith("an ") else "") + why)
    ids_chosen = "record_ids" in sink_opts
    if sink_opts.get("guarantee", "").lower() != "exactly_once":  # (refused by the data source itself)
        sink_opts.setdefault("record_ids", PARTITION_IDS)  # no driver step to re-split by content (datasource.py)
    if sink_opts.get("record_ids") == CONTENT_IDS:
        raise ConfigError("record_ids", "'content' needs the driver step that re-splits a batch by its records, which "
                                        "the data source does not have: use foreachBatch(sink) or sink.write(df), or "
                                        "record_ids='columns' with id_columns (e.g. 'topic,partition,offset' of "
                                        "Spark's Kafka source)")
    hints = typing.get_type_hints(SinkConfig)
    names = [f.name for f in fields(SinkConfig) if f.name not in _FIXED]
    check_option_names(sink_opts, names)
    typed = {k: _convert(k, v, hints[k]) for k, v in sink_opts.items()}
    if not kafka_conf.get("bootstrap.servers"):
        raise ConfigError("kafka.bootstrap.servers", "is required")
    return SinkOptions(SinkConfig.build(name, kafka_conf, wal_dir, **typed), run_id, ids_chosen)
