"""What a job resolves when it starts: secrets from the environment, schema files.

Kept apart from :mod:`.settings` (which only validates the conf file): the
results here may hold secrets and are never logged.
"""

from __future__ import annotations

import json
from typing import Any, Mapping

from ..config import resolve_env_values
from ..errors import ConfigError
from ..javaconf import to_librdkafka
from .settings import KafkaSettings, SettingsError

__all__ = ["CLIENT_CONF_PREFIXES", "resolve_client_conf", "producer_conf", "load_schema", "registry_format"]

#: Producer options other clients (admin, consumer) need too: connection and security.
CLIENT_CONF_PREFIXES = ("bootstrap.servers", "security.", "sasl.", "ssl.", "client.id", "socket.",
                        "broker.address.family", "client.dns.lookup", "oauth_cb")


def resolve_client_conf(key: str, conf: Mapping[str, Any], environ: Mapping[str, str] | None = None,
                        ) -> dict[str, Any]:
    """``conf`` with every ``{"env": "NAME"}`` replaced by the variable's value. Never log the result.

    Raises:
        SettingsError: a variable is not set.
    """
    try:
        return resolve_env_values(conf, environ)
    except ConfigError as exc:
        raise SettingsError(f"{key}[{exc.option!r}]: {exc.reason}") from None


def producer_conf(kafka: KafkaSettings, environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The confluent-kafka configuration: bootstrap servers plus ``producer_conf``, secrets resolved.

    The Java producer's settings in it are mapped to librdkafka's (:mod:`..javaconf`, as the sink
    maps them), so the admin client that creates topics gets the same connection settings.
    Never log the result: it holds secrets.

    Raises:
        SettingsError: a ``{"env": NAME}`` value names an unset variable.
        ConfigError: a Java setting is refused (named, with what does its job; never a secret value).
    """
    resolved = resolve_client_conf("kafka.producer_conf", kafka.producer_conf, environ)
    return to_librdkafka({"bootstrap.servers": kafka.bootstrap_servers, **resolved})[0]


def load_schema(path: str) -> Any:
    """A schema file: a Spark DDL string (``id bigint, name string``) or a StructType's JSON.

    Returns the DDL string or a ``pyspark.sql.types.StructType``, either of
    which ``DataStreamReader.schema`` takes.

    Raises:
        SettingsError: the file is empty or its JSON is not a StructType.
        OSError: the file cannot be read.
    """
    with open(path, encoding="utf-8") as fh:
        text = fh.read().strip()
    if not text:
        raise SettingsError(f"{path}: the schema file is empty")
    if not text.startswith("{"):
        return text
    from pyspark.sql.types import StructType

    try:
        return StructType.fromJson(json.loads(text))
    except (ValueError, KeyError, TypeError) as exc:
        raise SettingsError(f"{path}: not a Spark StructType JSON schema: {exc!r}") from None


def registry_format(key: str, fmt: Mapping[str, Any] | None) -> Any:
    """The :class:`..driver.formats.Avro` / ``JsonSchema`` of a checked format setting (``None`` for ``None``).

    ``{"env": NAME}`` values of its registry stay references (the sink, which
    Spark pickles, never holds the secret): the driver reads them from its
    environment each time it asks the registry. Each must be set when the job
    starts (checked here, in the driver's environment, where they are read).

    Raises:
        SettingsError: the schema file cannot be read, a variable is not set, or the format refuses a value
            (naming ``key``).
    """
    if fmt is None:
        return None
    from ..driver.formats import Avro, JsonSchema

    schema = fmt.get("schema")
    if schema is None:
        try:
            with open(fmt["schema_file"], encoding="utf-8") as fh:
                schema = fh.read()
        except OSError as exc:
            raise SettingsError(f"{key}.schema_file: cannot be read: {exc.strerror or exc}") from None
    kind = Avro if fmt["type"] == "avro" else JsonSchema
    try:
        made = kind(schema, dict(fmt["registry"]), subject=fmt.get("subject"),
                    strategy=fmt.get("strategy", "topic"), auto_register=fmt.get("auto_register", True))
        made.client()  # its {"env": NAME} values are set and its settings usable now, not at the first batch
        return made
    except ConfigError as exc:
        raise SettingsError(f"{key}.{exc.option}: {exc.reason}") from None
