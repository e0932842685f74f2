"""A batch's rows in Kafka's columns: ``value`` / ``key`` encoded in a Schema Registry format, in the JVM
(:mod:`.formats` steps 1-3), and the result checked as Spark's Kafka sink checks it.

:func:`encode_batch` is the sink's one step for it: the columns encoded, then
the Kafka sink schema checked (the encoded columns are ``binary``), giving
:class:`Encoded`: the encoded frame and the columns the sink takes.

Where it runs: the driver, once per batch, before any task. It builds the plan
only: the rows are encoded by Spark's ``to_avro`` / ``to_json`` in the
executors' JVMs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterator, Mapping

from ..config import SinkConfig
from ..errors import ConfigError, SchemaError
from ..schema import Columns, validate_spark_schema
from .formats import AVRO_PACKAGE, MAGIC, Avro, JsonSchema, RegistryFormat, check_json_fields
from .versions import scala_binary

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import Column, DataFrame

__all__ = ["Encoded", "encode_batch", "JSON_SCHEMA_TYPES"]

#: The Spark column types JSON Schema encodes (``to_json`` of them is a JSON object or array).
JSON_SCHEMA_TYPES = ("StructType", "MapType", "ArrayType")


@dataclass(frozen=True)
class Encoded:
    """A batch in Kafka's columns: ``frame`` (the batch with each formatted column encoded, every other column as
    it was) and ``columns``, what the sink takes of it (:class:`..schema.Columns`)."""

    frame: "DataFrame"
    columns: Columns
    steps: tuple[tuple[str, Any, "Column"], ...] = ()  # (column, format, encoded expression), as applied to frame

    def of(self, df: "DataFrame") -> "DataFrame":
        """``df``, the batch with columns added to it (the lane :mod:`.split` takes before any encoding), encoded
        as ``frame`` is: the same expressions, no registry asked again.

        Raises:
            ConfigError: Avro and the ``spark-avro`` package is not on the classpath.
        """
        return _apply(df, self.steps)


def encode_batch(df: "DataFrame", config: SinkConfig, formats: Mapping[str, RegistryFormat | None],
                 environ: Mapping[str, str] | None = None) -> Encoded:
    """The batch's rows in Kafka's columns: each column of ``formats`` (``"value"``, ``"key"``) encoded (steps 1-3
    of :mod:`.formats`), then the Kafka sink schema checked (:func:`..schema.validate_spark_schema`).

    A subject is named after the sink's ``topic``; without one, a ``topic``
    column means the rows have no single topic.

    Raises:
        SchemaError: a formatted column is missing, or does not fit its
            schema (JSON Schema: a required property missing; Avro: Spark's
            check of the struct against the schema, where the JVM can be
            asked); or the encoded DataFrame is not in the Kafka sink schema.
        ConfigError: the subject cannot be named, or Avro and the
            ``spark-avro`` package is not on the classpath (the message names
            the ``--packages`` coordinate).
        RegistryError: the registry refused or failed (its subclasses).
    """
    frame, steps = df, []
    if any(formats.values()):
        for step in _planned(df, config.topic, formats, environ):  # a column is set as soon as its schema id is
            frame = _apply(frame, (step,))
            steps.append(step)
    columns = validate_spark_schema(frame.schema, config.topic, write_timestamp=config.write_timestamp,
                                    id_columns=config.id_columns)
    return Encoded(frame, columns, tuple(steps))


def _planned(df: "DataFrame", topic: str | None, formats: Mapping[str, RegistryFormat | None],
             environ: Mapping[str, str] | None) -> Iterator[tuple[str, Any, "Column"]]:
    """Steps 1-2 of :func:`encode_batch`: every column checked (at the first item), then each one's schema id asked
    of the registry, one item at a time: the expression step 3 sets the column to."""
    from pyspark.sql import functions as F

    # Spark's rules (schema.validate_spark_schema): columns by their exact names, the topic option over a topic
    # column; without the option, the rows may have several topics.
    single = topic if topic is not None or "topic" not in df.columns else None
    planned = []
    for column, fmt in formats.items():  # every column checked before any schema is registered
        if fmt is None:
            continue
        if column not in df.columns:
            raise SchemaError(f"{column}_format is set and the DataFrame has no {column!r} column", column)
        name = column
        data_type = df.schema[name].dataType
        subject = fmt.subject_for(single, column)  # Step 1
        src = F.col(f"`{name}`")
        if isinstance(fmt, Avro):
            _check_avro(df, fmt, name, data_type, column)
            payload = _to_avro(src, fmt.schema)
        elif isinstance(fmt, JsonSchema):
            if type(data_type).__name__ not in JSON_SCHEMA_TYPES:
                raise SchemaError(f"{name}: JsonSchema needs a struct, map or array column, got "
                                  f"{data_type.simpleString()}", name, data_type.simpleString(), ("struct",))
            check_json_fields(fmt, name, data_type)
            payload = F.to_json(src).cast("binary")
        else:
            raise ConfigError(f"{column}_format", f"must be Avro(...) or JsonSchema(...), got {type(fmt).__name__}")
        planned.append((column, name, fmt, subject, payload))
    for _column, name, fmt, subject, payload in planned:
        sid = fmt.client(environ).schema_id(subject, fmt.schema, fmt.schema_type, fmt.auto_register)  # Step 2
        header = MAGIC + sid.to_bytes(4, "big")
        yield name, fmt, F.concat(F.lit(bytearray(header)), payload)  # Step 3's: a null stays null


def _apply(df: "DataFrame", steps: tuple[tuple[str, Any, "Column"], ...]) -> "DataFrame":
    """Step 3: each column set to its encoded expression (its name is the column's: ``value``, ``key``).

    Raises:
        ConfigError: Avro and the ``spark-avro`` package is not on the classpath (Spark: AVRO_NOT_LOADED).
    """
    for name, fmt, encoded in steps:
        try:
            df = df.withColumn(name, encoded)
        except Exception as exc:  # noqa: BLE001 - told apart by Spark's error class
            if isinstance(fmt, Avro) and _avro_not_loaded(exc):
                raise _missing_avro(df.sparkSession.version, name, "Spark: AVRO_NOT_LOADED") from exc
            raise
    return df


def _avro_not_loaded(exc: BaseException) -> bool:
    text = str(exc)
    return "AVRO_NOT_LOADED" in text or ("avro" in text.lower() and "not loaded" in text.lower())


def _to_avro(col: "Column", schema: str) -> "Column":
    from pyspark.sql.avro.functions import to_avro

    return to_avro(col, schema)


def _missing_avro(spark_version: str, column: str, why: str) -> ConfigError:
    scala = scala_binary(spark_version)  # PyPI's PySpark: 2.12 before 4.0
    return ConfigError(f"{column}_format", f"Avro needs Spark's spark-avro package on the classpath ({why}): start "
                                       f"Spark with --packages {AVRO_PACKAGE}_{scala}:{spark_version} (or spark."
                                       f"jars.packages; the jar spark-avro_{scala}-{spark_version}.jar in spark.jars)")


def _check_avro(df: "DataFrame", fmt: Avro, name: str, data_type: Any, column: str = "value") -> None:
    """Before the schema is registered: the spark-avro package is there, and (classic Spark) its serializer
    accepts the struct for the schema. On Spark Connect the plan's analysis finds a missing package; a struct
    that does not fit fails in the tasks (Spark builds the serializer there)."""
    spark = df.sparkSession
    jvm = getattr(getattr(spark, "sparkContext", None), "_jvm", None) if _classic(spark) else None
    if jvm is None:
        from pyspark.errors import AnalysisException

        try:
            _ = df.select(_to_avro(df[name], fmt.schema)).schema  # analysed now: a struct that does not fit fails here
        except Exception as exc:  # noqa: BLE001 - told apart by Spark's error class
            if _avro_not_loaded(exc):
                raise _missing_avro(spark.version, column, "Spark: AVRO_NOT_LOADED") from exc
            if not isinstance(exc, AnalysisException):
                raise  # not about the column (a lost Connect session ...): as it is
            raise SchemaError(f"{name}: Spark refuses to_avro of this column with the schema: {exc}", name) from exc
        return
    # Spark 4 keeps the to_avro functions and AvroSerializer in its own jars; the package brings the expression
    if type(getattr(jvm, "org.apache.spark.sql.avro.CatalystDataToAvro")).__name__ != "JavaClass":
        raise _missing_avro(spark.version, column, "class org.apache.spark.sql.avro.CatalystDataToAvro not found")
    try:
        parsed = jvm.org.apache.avro.Schema.Parser().parse(fmt.schema)
        catalyst = jvm.org.apache.spark.sql.types.DataType.fromJson(data_type.json())
        nullable = bool(df.schema[name].nullable)
        jvm.org.apache.spark.sql.avro.AvroSerializer(catalyst, parsed, nullable)
    except Exception as exc:  # noqa: BLE001 - py4j wraps the JVM's error
        text = str(exc).splitlines()
        reason = next((ln.strip() for ln in text if "Exception" in ln), text[0] if text else type(exc).__name__)
        raise SchemaError(f"{name}: the struct does not fit the Avro schema: {reason}", name,
                          data_type.simpleString()) from None


def _classic(spark: Any) -> bool:
    try:
        from pyspark.sql.utils import is_remote
    except ImportError:  # pragma: no cover - older PySpark
        return True
    return not is_remote() and hasattr(spark, "_jsparkSession")
