"""The input schema: exactly the columns Spark's built-in Kafka sink accepts.

``validate_spark_schema`` runs on the driver, before any task: it names the
column, the type it has and the types allowed. ``normalize_batch`` runs on the
executor and turns one Arrow batch of input rows into the WAL's canonical
record batch (see :mod:`.wal.format`), keeping null and empty apart.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterator

import pyarrow as pa
import pyarrow.compute as pc

from .errors import InvalidRecordError, SchemaError

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql.types import StructType

__all__ = ["KAFKA_COLUMNS", "validate_spark_schema", "normalize_batch", "payload_bytes", "HEADERS_TYPE", "TOPIC_META",
           "RUN_META", "chunk_run", "iter_rows"]

#: Column name -> Spark type names allowed (as ``DataType.simpleString()``).
KAFKA_COLUMNS: dict[str, tuple[str, ...]] = {
    "key": ("string", "binary"),
    "value": ("string", "binary"),
    "topic": ("string",),
    "partition": ("int",),
    "headers": ("array<struct<key:string,value:binary>>",),
    "timestamp": ("timestamp",),
}

#: What to do about a column of the wrong type, by column (appended to the SchemaError).
_TYPE_HINTS: dict[str, str] = {
    "key": "cast it, e.g. F.col('key').cast('string'), or serialise it with F.to_json",
    "value": "cast it, e.g. F.col('value').cast('string'), or serialise it with F.to_json(F.struct(...))",
    "topic": "cast it with F.col('topic').cast('string')",
    "partition": "cast it with F.col('partition').cast('int'), or drop it to let the partitioner choose",
    "headers": ("headers are an array of (key string, value binary) structs, e.g. "
                "F.array(F.struct(F.lit('k').alias('key'), F.col('v').cast('binary').alias('value'))); "
                "from a map: F.transform(F.map_entries('m'), lambda e: F.struct(e['key'].alias('key'), "
                "e['value'].cast('binary').alias('value')))"),
    "timestamp": "cast it with F.col('timestamp').cast('timestamp')",
}

#: Schema metadata key of a chunk's default topic.
TOPIC_META = b"rks.topic"
#: Schema metadata key of a chunk's run id (the component that keeps ids of two
#: queries, or of two ``write()`` calls, apart). Absent in chunks of older builds.
RUN_META = b"rks.run"

HEADERS_TYPE = pa.list_(pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())]))


def validate_spark_schema(schema: "StructType", default_topic: str | None) -> list[str]:
    """Check a DataFrame schema against the Kafka sink schema.

    Returns the canonical (lower-case) column names to select, in input order.
    Column names match case-insensitively, as they do for Spark's Kafka sink.

    Raises:
        SchemaError: an unknown column, a wrong type, a duplicate, a missing
            ``value`` column, or no ``topic`` column and no default topic.
    """
    seen: dict[str, str] = {}
    for f in schema.fields:
        canon = f.name.lower()
        allowed = KAFKA_COLUMNS.get(canon)
        if allowed is None:
            raise SchemaError(
                f"column {f.name!r} ({f.dataType.simpleString()}) is not a Kafka sink column; "
                f"allowed columns: {', '.join(KAFKA_COLUMNS)}",
                column=f.name, actual=f.dataType.simpleString(), allowed=tuple(KAFKA_COLUMNS),
            )
        if canon in seen:
            raise SchemaError(f"column {f.name!r} appears twice (also as {seen[canon]!r})", column=f.name)
        actual = _spark_type_name(f.dataType)
        if actual not in allowed:
            raise SchemaError(
                f"column {f.name!r} has type {actual}; allowed: {' or '.join(allowed)}; {_TYPE_HINTS[canon]}",
                column=f.name, actual=actual, allowed=allowed,
            )
        seen[canon] = f.name
    if "value" not in seen:
        raise SchemaError("required column 'value' (string or binary) is missing",
                          column=None, allowed=KAFKA_COLUMNS["value"])
    if "topic" not in seen and default_topic is None:
        raise SchemaError("no 'topic' column and no default topic: set topic= on the sink or add a topic column",
                          column="topic", allowed=KAFKA_COLUMNS["topic"])
    return [seen[c] for c in seen]


def _spark_type_name(dt: Any) -> str:
    # Header structs may come with nullability differences; simpleString ignores nullability.
    return dt.simpleString()


def _as_binary(arr: pa.Array | pa.ChunkedArray) -> pa.Array:
    t = arr.type
    if pa.types.is_binary(t):
        return arr
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_large_binary(t):
        return pc.cast(arr, pa.binary())
    raise InvalidRecordError(f"cannot use Arrow type {t} as bytes")


def normalize_batch(batch: pa.RecordBatch, default_topic: str | None, id_prefix: str, first_seq: int,
                    run: str = "") -> pa.RecordBatch:
    """One input Arrow batch -> the canonical WAL record batch.

    The default topic and the record ids' ``run`` go into the schema metadata
    (``rks.topic``, ``rks.run``), so a replay from the WAL needs nothing else.

    Raises:
        InvalidRecordError: a row has a null topic and there is no default
            topic (no row of the batch was accepted).
    """
    names = [n.lower() for n in batch.schema.names]
    cols: dict[str, pa.Array] = dict(zip(names, batch.columns))
    arrays: list[pa.Array] = []
    fields: list[pa.Field] = []

    value = _as_binary(cols["value"])
    arrays.append(value)
    fields.append(pa.field("value", pa.binary()))
    if "key" in cols:
        arrays.append(_as_binary(cols["key"]))
        fields.append(pa.field("key", pa.binary()))
    if "topic" in cols:
        topic = cols["topic"]
        if not pa.types.is_string(topic.type):
            topic = pc.cast(topic, pa.string())
        if topic.null_count:
            if default_topic is None:
                first_null = pc.index(pc.is_null(topic), True).as_py()
                rid = f"{id_prefix}{first_seq + first_null}"
                raise InvalidRecordError(
                    f"record {rid} (row {first_seq + first_null} of its partition) has a null topic and the "
                    "sink has no default topic; set topic= on the sink or fill the topic column",
                    record_id=rid,
                )
            topic = pc.fill_null(topic, default_topic)
        arrays.append(topic)
        fields.append(pa.field("topic", pa.string()))
    if "partition" in cols:
        arrays.append(pc.cast(cols["partition"], pa.int32()))
        fields.append(pa.field("partition", pa.int32()))
    if "headers" in cols:
        h = cols["headers"]
        if h.type != HEADERS_TYPE:
            h = pc.cast(h, HEADERS_TYPE)
        arrays.append(h)
        fields.append(pa.field("headers", HEADERS_TYPE))
    if "timestamp" in cols:
        ts = cols["timestamp"]
        if pa.types.is_timestamp(ts.type):
            ts = pc.cast(ts, pa.timestamp("ms", tz=ts.type.tz), safe=False)
        arrays.append(pc.cast(ts, pa.int64()))
        fields.append(pa.field("timestamp", pa.int64()))
    meta = {TOPIC_META: default_topic.encode()} if default_topic else {}
    if run:
        meta[RUN_META] = run.encode()
    return pa.RecordBatch.from_arrays(arrays, schema=pa.schema(fields, metadata=meta or None))


def payload_bytes(batch: pa.RecordBatch) -> int:
    """Bytes of keys and values in a normalised batch (what the report counts)."""
    total = 0
    for name in ("value", "key"):
        i = batch.schema.get_field_index(name)
        if i >= 0:
            s = pc.sum(pc.binary_length(batch.column(i))).as_py()
            total += s or 0
    return total


def chunk_run(batch: pa.RecordBatch) -> str:
    """The run id a normalised chunk carries in its schema metadata (``""`` if none)."""
    meta = batch.schema.metadata
    return meta.get(RUN_META, b"").decode() if meta else ""


def iter_rows(batch: pa.RecordBatch, default_topic: str | None) -> Iterator[dict[str, Any]]:
    """Rows of a normalised chunk as dicts (slow path: dead letters, tools, tests)."""
    cols = {name: batch.column(i).to_pylist() for i, name in enumerate(batch.schema.names)}
    meta = batch.schema.metadata or {}
    topic = meta.get(TOPIC_META, b"").decode() or default_topic
    for i in range(batch.num_rows):
        yield {
            "topic": cols["topic"][i] if "topic" in cols else topic,
            "partition": cols["partition"][i] if "partition" in cols else None,
            "key": cols["key"][i] if "key" in cols else None,
            "value": cols["value"][i],
            "headers": [(h["key"], h["value"]) for h in cols["headers"][i] or []] if "headers" in cols else [],
            "timestamp": cols["timestamp"][i] if "timestamp" in cols else None,
        }
