"""The input schema: the columns Spark's built-in Kafka sink takes, found and typed as it finds them.

``validate_spark_schema`` runs on the driver, before any task: it says which
columns the sink writes and which it ignores, and names a used column of the
wrong type, the type it has and the types allowed. ``normalize_batch`` runs on the
executor and turns one Arrow batch of input rows into the WAL's canonical
record batch (see :mod:`.wal.format`), keeping null and empty apart.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterator, Sequence

import pyarrow as pa
import pyarrow.compute as pc

from .arrays import column
from .errors import InvalidRecordError, SchemaError

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql.types import StructType

__all__ = ["KAFKA_COLUMNS", "Columns", "ID_COLUMN_TYPES", "validate_spark_schema", "normalize_batch", "payload_bytes",
           "HEADERS_TYPE", "TOPIC_META", "RUN_META", "chunk_run", "iter_rows"]

#: Column name -> Spark type names allowed (as ``DataType.simpleString()``).
#: The columns of Spark's Kafka source that name an input record for good: the default ids of the data source and
#: of the real-time foreach writer (``record_ids="columns"``).
KAFKA_SOURCE_IDS = ("topic", "partition", "offset")

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

# A WAL chunk's schema metadata: what these keys and the columns below mean is part of the WAL's version (change
# them and bump .wal.format.WAL_VERSION).
#: Schema metadata key of a chunk's default topic.
TOPIC_META = b"rks.topic"
#: Schema metadata key of a chunk's run id (the component that keeps ids of two
#: queries, or of two ``write()`` calls, apart). Absent when the writer was given no run (tools, tests).
RUN_META = b"rks.run"

HEADERS_TYPE = pa.list_(pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())]))


@dataclass(frozen=True)
class Columns:
    """What the sink takes of a DataFrame (:func:`validate_spark_schema`); picklable, names only.

    Attributes:
        kafka: The Kafka columns it writes, by their names (``value`` first).
        ids: The columns record ids are made of (``record_ids="columns"``), in the order given.
        ignored: Every other column, as ``name: why`` (for the sink's one-time log line).
    """

    kafka: tuple[str, ...]
    ids: tuple[str, ...] = ()
    ignored: tuple[str, ...] = ()

    @property
    def select(self) -> list[str]:
        """The columns to hand to the tasks: the Kafka ones, then the id columns not among them."""
        return list(self.kafka) + [c for c in self.ids if c not in self.kafka]


#: Columns the sink itself adds on the driver (a lane, a partition tag): never the user's, never reported.
INTERNAL_PREFIX = "__rks_"

#: Spark types an id column may have (its values are turned into text to be hashed: :func:`.ids.key_hashes`).
ID_COLUMN_TYPES = ("string", "binary", "tinyint", "smallint", "int", "bigint", "timestamp", "date")


def validate_spark_schema(schema: "StructType", default_topic: str | None, *, write_timestamp: bool = False,
                          id_columns: Sequence[str] = ()) -> Columns:
    """Check a DataFrame schema as Spark's Kafka sink does; say which columns the sink takes.

    Spark's rules (``KafkaWriter``): a column is found by its exact name
    (``value``, ``key``, ``topic``, ``partition``, ``headers``); one of
    those with the wrong type is refused; every other column is ignored;
    the ``topic`` option, when set, overrides a ``topic`` column (which is
    then ignored too). ``timestamp`` is written only with
    ``write_timestamp=True`` (Spark's sink up to 4.2 never writes it).
    ``id_columns`` must exist, with a type of :data:`ID_COLUMN_TYPES`.

    Raises:
        SchemaError: a missing ``value`` column, a used column of the wrong
            type or given twice, no ``topic`` column and no topic option,
            ``write_timestamp`` without a ``timestamp`` column, or an id
            column missing or of a type ids cannot be made of.
    """
    by_name: dict[str, Any] = {}
    twice: set[str] = set()
    for f in schema.fields:
        if f.name in by_name:
            twice.add(f.name)
        by_name.setdefault(f.name, f)
    used = [c for c in KAFKA_COLUMNS if c in by_name and (c != "topic" or default_topic is None)
            and (c != "timestamp" or write_timestamp)]
    for name in sorted(twice & (set(used) | set(id_columns))):  # an ignored column may be there twice
        raise SchemaError(f"column {name!r} appears twice", column=name)
    for name in used:
        actual = _spark_type_name(by_name[name].dataType)
        if actual not in KAFKA_COLUMNS[name]:
            raise SchemaError(
                f"column {name!r} has type {actual}; allowed: {' or '.join(KAFKA_COLUMNS[name])}; {_TYPE_HINTS[name]}",
                column=name, actual=actual, allowed=KAFKA_COLUMNS[name],
            )
    if "value" not in by_name:
        near = [n for n in by_name if n.lower() == "value"]
        hint = (f" ({near[0]!r} is not it: Spark's Kafka sink finds its columns by their lower-case names)"
                if near else "")
        raise SchemaError(f"required column 'value' (string or binary) is missing{hint}", column=None,
                          allowed=KAFKA_COLUMNS["value"])
    if "topic" not in by_name and default_topic is None:
        raise SchemaError("no 'topic' column and no topic option: set topic= on the sink (.option('topic', ...)) "
                          "or add a topic column", column="topic", allowed=KAFKA_COLUMNS["topic"])
    if write_timestamp and "timestamp" not in by_name:
        raise SchemaError("write_timestamp=True but the DataFrame has no 'timestamp' column", column="timestamp",
                          allowed=KAFKA_COLUMNS["timestamp"])
    for name in id_columns:
        if name not in by_name:
            raise SchemaError(f"id column {name!r} (id_columns) is not in the DataFrame; its columns: "
                              f"{', '.join(by_name)}", column=name, allowed=ID_COLUMN_TYPES)
        actual = _spark_type_name(by_name[name].dataType)
        if actual not in ID_COLUMN_TYPES:
            raise SchemaError(f"id column {name!r} has type {actual}; ids are made of columns of type "
                              f"{', '.join(ID_COLUMN_TYPES)}", column=name, actual=actual, allowed=ID_COLUMN_TYPES)
    ignored = tuple(f"{n}: {_why_ignored(n, default_topic)}" for n in by_name
                    if n not in used and n not in id_columns and not n.startswith(INTERNAL_PREFIX))
    return Columns(kafka=tuple(used), ids=tuple(id_columns), ignored=ignored)


def _why_ignored(name: str, default_topic: str | None) -> str:
    if name == "topic" and default_topic is not None:
        return "the topic option overrides it"
    if name == "timestamp":
        return "not written unless write_timestamp=True"
    if name.lower() in KAFKA_COLUMNS:
        return f"not a Kafka column (Spark's sink reads {name.lower()!r}, by its exact name)"
    return "not a Kafka column"


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


def normalize_batch(batch: pa.RecordBatch, default_topic: str | None, first_seq: int = 0, run: str = "",
                    where: str = "") -> pa.RecordBatch:
    """One input Arrow batch -> the canonical WAL record batch (its ids are added by :func:`.ids.with_ids`).

    The default topic and the record ids' ``run`` go into the schema metadata
    (``rks.topic``, ``rks.run``), so a replay from the WAL needs nothing else.
    A refused row is named by its position among the rows of ``where`` (e.g.
    ``batch 3 partition 1``): it was never accepted, so it has no id.

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
                first_null = pc.indices_nonzero(pc.is_null(topic))[0].as_py()
                row = f"row {first_seq + first_null}{' of ' + where if where else ''}"
                raise InvalidRecordError(
                    f"record {row} has a null topic and the sink has no default topic; set topic= on the sink or "
                    "fill the topic column", record_id=row,
                )
            topic = pc.fill_null(topic, column([default_topic], pa.string())[0])  # a str would import pandas
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
