"""Tier 1: the Kafka sink input schema (driver check) and Arrow normalisation."""

from __future__ import annotations

import datetime as dt

import pyarrow as pa
import pytest
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from spark_recoverable_sink.errors import InvalidRecordError, SchemaError
from spark_recoverable_sink.schema import (
    normalize_batch,
    payload_bytes,
    validate_spark_schema,
)

HEADERS = ArrayType(StructType([StructField("key", StringType()), StructField("value", BinaryType())]))


def _schema(*fields):
    return StructType([StructField(n, t) for n, t in fields])


def test_columns_are_found_by_their_exact_names_as_spark_finds_them():
    s = _schema(("KEY", StringType()), ("value", BinaryType()), ("topic", StringType()),
                ("partition", IntegerType()), ("headers", HEADERS), ("timestamp", TimestampType()))
    cols = validate_spark_schema(s, None)
    assert cols.kafka == ("value", "topic", "partition", "headers")
    assert [i.split(":")[0] for i in cols.ignored] == ["KEY", "timestamp"]
    assert "exact name" in cols.ignored[0] and "write_timestamp" in cols.ignored[1]
    assert validate_spark_schema(s, None, write_timestamp=True).kafka == ("value", "topic", "partition", "headers",
                                                                          "timestamp")


def test_the_kafka_source_dataframe_is_taken_and_the_topic_option_overrides_its_topic():
    source = _schema(("key", BinaryType()), ("value", BinaryType()), ("topic", StringType()),
                     ("partition", IntegerType()), ("offset", LongType()), ("timestamp", TimestampType()),
                     ("timestampType", IntegerType()), ("headers", HEADERS))
    cols = validate_spark_schema(source, "out")
    assert cols.kafka == ("key", "value", "partition", "headers")  # the sink's own order, not the input's
    assert {i.split(":")[0] for i in cols.ignored} == {"topic", "offset", "timestamp", "timestampType"}
    assert "topic option overrides" in next(i for i in cols.ignored if i.startswith("topic"))
    assert validate_spark_schema(source, None).kafka == ("key", "value", "topic", "partition", "headers")


def test_id_columns_are_selected_beside_the_kafka_columns():
    source = _schema(("value", BinaryType()), ("topic", StringType()), ("partition", IntegerType()),
                     ("offset", LongType()))
    cols = validate_spark_schema(source, "out", id_columns=("topic", "partition", "offset"))
    assert cols.kafka == ("value", "partition") and cols.ids == ("topic", "partition", "offset")
    assert cols.select == ["value", "partition", "topic", "offset"]
    with pytest.raises(SchemaError, match="'nope'.*not in the DataFrame"):
        validate_spark_schema(source, "out", id_columns=("nope",))
    with pytest.raises(SchemaError, match="id column 'h' has type"):
        validate_spark_schema(_schema(("value", BinaryType()), ("h", HEADERS)), "out", id_columns=("h",))


def test_unknown_columns_are_ignored_not_refused():
    cols = validate_spark_schema(_schema(("value", StringType()), ("extra", LongType())), "t")
    assert cols.kafka == ("value",) and cols.ignored == ("extra: not a Kafka column",)


@pytest.mark.parametrize("col,typ,allowed", [
    ("value", LongType(), "string or binary"),
    ("key", IntegerType(), "string or binary"),
    ("topic", BinaryType(), "string"),
    ("partition", LongType(), "int"),
    ("timestamp", StringType(), "timestamp"),
    ("headers", ArrayType(StringType()), "array<struct<key:string,value:binary>>"),
])
def test_wrong_type_is_named(col, typ, allowed):
    fields = [("value", BinaryType())] if col != "value" else []
    with pytest.raises(SchemaError) as ei:
        validate_spark_schema(_schema(*fields, (col, typ)), None if col == "topic" else "t", write_timestamp=True)
    assert ei.value.column == col
    assert ei.value.actual == typ.simpleString()
    assert allowed in str(ei.value)


def test_a_column_the_sink_ignores_is_not_type_checked():
    assert validate_spark_schema(_schema(("value", BinaryType()), ("topic", BinaryType())), "t").kafka == ("value",)
    assert validate_spark_schema(_schema(("value", BinaryType()), ("timestamp", StringType())), "t").kafka == (
        "value",)


def test_missing_value_and_missing_topic():
    with pytest.raises(SchemaError, match="'value'"):
        validate_spark_schema(_schema(("key", StringType())), "t")
    with pytest.raises(SchemaError, match="'VALUE' is not it"):
        validate_spark_schema(_schema(("VALUE", StringType())), "t")
    with pytest.raises(SchemaError, match="no 'topic' column and no topic option"):
        validate_spark_schema(_schema(("value", StringType())), None)
    with pytest.raises(SchemaError, match="twice"):
        validate_spark_schema(_schema(("value", StringType()), ("value", StringType())), "t")
    with pytest.raises(SchemaError, match="no 'timestamp' column"):
        validate_spark_schema(_schema(("value", StringType())), "t", write_timestamp=True)


def test_normalize_keeps_null_and_empty_and_converts():
    ts = [dt.datetime(2024, 1, 2, 3, 4, 5, 678000, tzinfo=dt.timezone.utc), None]
    b = pa.RecordBatch.from_pydict({
        "key": pa.array(["k", None], pa.string()),
        "value": pa.array(["", None], pa.large_string()),
        "topic": pa.array([None, "x"]),
        "timestamp": pa.array(ts, pa.timestamp("us", tz="UTC")),
    })
    n = normalize_batch(b, "dflt", 0)
    assert n.schema.field("value").type == pa.binary()
    assert n.column(n.schema.get_field_index("key")).to_pylist() == [b"k", None]
    assert n.column(0).to_pylist() == [b"", None]
    assert n.column(n.schema.get_field_index("topic")).to_pylist() == ["dflt", "x"]
    assert n.column(n.schema.get_field_index("timestamp")).to_pylist() == [1704164645678, None]
    assert payload_bytes(n) == 1


def test_null_topic_without_default_names_the_record():
    b = pa.RecordBatch.from_pydict({"value": [b"a", b"b", b"c"], "topic": ["t", None, "t"]})
    with pytest.raises(InvalidRecordError) as ei:
        normalize_batch(b, None, 10, "r", "batch 4 partition 2")
    assert ei.value.record_id == "row 11 of batch 4 partition 2"
    assert "record row 11 of batch 4 partition 2 has a null topic" in str(ei.value)


def test_invalid_utf8_in_string_key_passes_through_as_bytes():
    raw = pa.Array.from_buffers(pa.string(), 1, [None, pa.py_buffer(b"\x00\x00\x00\x00\x02\x00\x00\x00"),
                                                 pa.py_buffer(b"\xff\xfe")])
    b = pa.RecordBatch.from_arrays([raw, pa.array([b"v"])], ["key", "value"])
    n = normalize_batch(b, "t", 0)
    assert n.column(n.schema.get_field_index("key")).to_pylist() == [b"\xff\xfe"]


def test_an_ignored_column_may_appear_twice():
    """Spark's sink takes the first column of a name and ignores the rest: so does the sink, for every column it
    ignores (a join's two timestamps, two topic columns under a topic option)."""
    cols = validate_spark_schema(_schema(("value", StringType()), ("timestamp", TimestampType()),
                                         ("timestamp", TimestampType()), ("topic", StringType()),
                                         ("topic", StringType())), "t")
    assert "timestamp" not in cols.kafka and "topic" not in cols.kafka
    with pytest.raises(SchemaError, match="'topic' appears twice"):
        validate_spark_schema(_schema(("value", StringType()), ("topic", StringType()), ("topic", StringType())), None)
