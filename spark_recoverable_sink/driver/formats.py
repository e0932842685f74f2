"""Schema Registry formats of the ``value`` and ``key`` columns: :class:`Avro` and :class:`JsonSchema`.

``value_format=Avro(schema=..., registry={"url": ...})`` turns a ``struct``
``value`` column into the bytes Kafka consumers, Kafka Connect, ksqlDB and
Flink expect from a Schema Registry serializer (Confluent's wire format):
``0x00``, the schema's 4-byte registry id (big-endian), then the payload.
Per batch, on the driver:

1. resolve each format's subject (strategy ``topic``: ``<topic>-value`` /
   ``<topic>-key``; ``record``: the schema's full name (Avro) or ``title``
   (JSON Schema); ``topic_record``: ``<topic>-<record>``; or ``subject=``);
2. get the schema's id from the registry, once per process (:mod:`.registry`);
   a registry down, credentials refused or an incompatible schema fail the
   batch here, before any record is written;
3. replace the column by ``concat(header, payload)``, built in the JVM by
   Spark's own functions: ``to_avro(column, schema)`` (the ``spark-avro``
   package) or ``to_json(column)``. A null value stays null (a tombstone).

No record crosses to Python for this: the tasks receive bytes as from any
other binary column. The JSON payload is Spark's ``to_json`` of the row: the
registry checks the schema's compatibility, but rows are not validated
against the JSON Schema one by one (the Spark schema decides their shape:
:func:`check_json_fields` refuses a struct that lacks a required property).

Where it runs: the driver. What pickles: the formats (schema, subject,
strategy, the registry's conf as given; Spark Connect ships ``foreachBatch``
functions), never a client.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Mapping

from ..errors import ConfigError, SchemaError
from .registry import RegistryClient, scrub_url

if TYPE_CHECKING:  # pragma: no cover
    pass

__all__ = ["Avro", "JsonSchema", "RegistryFormat", "check_json_fields", "STRATEGIES"]

STRATEGIES = ("topic", "record", "topic_record")
MAGIC = b"\x00"
AVRO_PACKAGE = "org.apache.spark:spark-avro"  # + _<Scala binary version>:<Spark version>


@dataclass(frozen=True, repr=False)
class RegistryFormat:
    """A column serialized with a schema from a Schema Registry (use :class:`Avro` or :class:`JsonSchema`).

    Args:
        schema: The schema's text (an Avro schema / a JSON Schema, as JSON).
        registry: ``SchemaRegistryClient`` options: ``url`` (required),
            ``basic.auth.user.info`` (``user:password``), ``bearer.auth.*``,
            ``ssl.*``, ``timeout`` ... A value may be ``{"env": "NAME"}``, read
            from the driver's environment when the client is made.
        subject: The subject; ``None``: from ``strategy``.
        strategy: ``"topic"`` (``<topic>-value``), ``"record"`` (the
            schema's name) or ``"topic_record"`` (``<topic>-<name>``).
        auto_register: Register the schema (the subject's compatibility
            rules apply); ``False``: it must be registered already.

    Raises:
        ConfigError: naming the argument that is wrong.
    """

    schema: str
    registry: Mapping[str, Any] = field(default_factory=dict)
    subject: str | None = None
    strategy: str = "topic"
    auto_register: bool = True
    _parsed: Any = field(default=None, init=False, repr=False, compare=False)  # the schema's JSON (__post_init__)
    schema_type = ""  # the registry's name of the format

    def __post_init__(self) -> None:
        if not isinstance(self.schema, str) or not self.schema.strip():
            raise ConfigError("schema", "must be the schema's text (JSON)")
        try:
            parsed = json.loads(self.schema)
        except ValueError as exc:
            raise ConfigError("schema", f"is not JSON: {exc}") from None
        object.__setattr__(self, "_parsed", parsed)
        if not isinstance(self.registry, Mapping) or not self.registry.get("url"):
            raise ConfigError("registry", "must be a mapping with the registry's 'url'")
        object.__setattr__(self, "registry", dict(self.registry))
        if self.strategy not in STRATEGIES:
            raise ConfigError("strategy", f"must be one of {STRATEGIES}, got {self.strategy!r}")
        if self.subject is not None and (not isinstance(self.subject, str) or not self.subject):
            raise ConfigError("subject", "must be a non-empty string or None")
        if not isinstance(self.auto_register, bool):
            raise ConfigError("auto_register", f"must be True or False, got {self.auto_register!r}")
        if self.subject is None and self.strategy != "topic":
            self.record_name()  # refused here rather than at the first batch

    def record_name(self) -> str:
        """The name the ``record`` strategies use. Raises: ConfigError: the schema has none."""
        raise NotImplementedError

    def subject_for(self, topic: str | None, column: str) -> str:
        """The subject of this format for rows going to ``topic`` (``None``: a ``topic`` column decides).

        Raises:
            ConfigError: the strategy needs one topic and there is none.
        """
        if self.subject is not None:
            return self.subject
        if self.strategy == "record":
            return self.record_name()
        if topic is None:
            raise ConfigError(f"{column}_format", f"strategy {self.strategy!r} names the subject after the topic, "
                              "and the rows have no single topic (a topic column, or no topic= on the sink): use "
                              "strategy='record' or give subject=")
        return f"{topic}-{column}" if self.strategy == "topic" else f"{topic}-{self.record_name()}"

    def client(self, environ: Mapping[str, str] | None = None) -> RegistryClient:
        """The registry client, ``{"env": NAME}`` values read from ``environ`` (default: the process's).

        Raises:
            ConfigError: a variable is not set, or a value is not text.
        """
        environ = os.environ if environ is None else environ
        conf: dict[str, Any] = {}
        for k, v in self.registry.items():
            if isinstance(v, Mapping) and set(v) == {"env"}:
                if v["env"] not in environ:
                    raise ConfigError(f"registry[{k!r}]", f"environment variable {v['env']} is not set")
                v = environ[v["env"]]
            if not isinstance(v, (str, int, float, bool)):
                raise ConfigError(f"registry[{k!r}]", f"must be text, a number, a boolean or {{'env': NAME}}, got "
                                                      f"{type(v).__name__}")
            conf[k] = v  # numbers stay numbers (timeout, max.retries ...): the client checks their types
        return RegistryClient(conf)

    def __repr__(self) -> str:
        url = self.registry.get("url")
        shown = scrub_url(url) if isinstance(url, str) else "{env}"
        return (f"{type(self).__name__}(subject={self.subject!r}, strategy={self.strategy!r}, "
                f"auto_register={self.auto_register}, registry={shown!r})")


class Avro(RegistryFormat):
    """Avro in Confluent's wire format, serialized by Spark's ``to_avro`` (package ``spark-avro``)."""

    schema_type = "AVRO"

    def record_name(self) -> str:
        s = self._parsed
        if not isinstance(s, dict) or not isinstance(s.get("name"), str):
            raise ConfigError("schema", "the 'record' strategies need a named Avro schema (a record's 'name')")
        name, ns = s["name"], s.get("namespace")
        return name if "." in name or not ns else f"{ns}.{name}"


class JsonSchema(RegistryFormat):
    """JSON Schema in Confluent's wire format, the payload being Spark's ``to_json`` of the column."""

    schema_type = "JSON"

    def record_name(self) -> str:
        s = self._parsed
        if not isinstance(s, dict) or not isinstance(s.get("title"), str):
            raise ConfigError("schema", "the 'record' strategies need a JSON Schema with a 'title'")
        return s["title"]


def check_json_fields(fmt: JsonSchema, column: str, data_type: Any) -> None:
    """Refuse a struct that lacks a property the JSON Schema requires, or has one it forbids.

    Raises:
        SchemaError: naming the column and the property.
    """
    s = fmt._parsed
    names = {f.name for f in getattr(data_type, "fields", ())}
    if not isinstance(s, dict) or not names:
        return
    missing = [p for p in s.get("required", ()) if p not in names]
    if missing:
        raise SchemaError(f"{column}: the JSON Schema requires {missing}, which the struct does not have", column)
    props = s.get("properties")
    if s.get("additionalProperties") is False and isinstance(props, dict):
        extra = sorted(names - set(props))
        if extra:
            raise SchemaError(f"{column}: the JSON Schema allows no property {extra} (additionalProperties: false)",
                              column)
