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


def test_full_kafka_schema_is_accepted_case_insensitively():
    s = _schema(("KEY", StringType()), ("value", BinaryType()), ("topic", StringType()),
                ("partition", IntegerType()), ("headers", HEADERS), ("timestamp", TimestampType()))
    assert validate_spark_schema(s, None) == ["KEY", "value", "topic", "partition", "headers", "timestamp"]


def test_unknown_column_names_column_type_and_allowed():
    with pytest.raises(SchemaError) as ei:
        validate_spark_schema(_schema(("value", StringType()), ("extra", LongType())), "t")
    e = ei.value
    assert e.column == "extra" and e.actual == "bigint" and "value" in e.allowed
    assert "'extra'" in str(e) and "bigint" in str(e)


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
        validate_spark_schema(_schema(*fields, (col, typ)), "t")
    assert ei.value.column == col
    assert ei.value.actual == typ.simpleString()
    assert allowed in str(ei.value)


def test_missing_value_and_missing_topic():
    with pytest.raises(SchemaError, match="'value'"):
        validate_spark_schema(_schema(("key", StringType())), "t")
    with pytest.raises(SchemaError, match="no 'topic' column and no default topic"):
        validate_spark_schema(_schema(("value", StringType())), None)
    with pytest.raises(SchemaError, match="twice"):
        validate_spark_schema(_schema(("value", StringType()), ("VALUE", StringType())), "t")


def test_normalize_keeps_null_and_empty_and_converts():
    ts = [dt.datetime(2024, 1, 2, 3, 4, 5, 678000, tzinfo=dt.timezone.utc), None]
    b = pa.RecordBatch.from_pydict({
        "key": pa.array(["k", None], pa.string()),
        "value": pa.array(["", None], pa.large_string()),
        "topic": pa.array([None, "x"]),
        "timestamp": pa.array(ts, pa.timestamp("us", tz="UTC")),
    })
    n = normalize_batch(b, "dflt", "s:0:0:", 0)
    assert n.schema.field("value").type == pa.binary()
    assert n.column(n.schema.get_field_index("key")).to_pylist() == [b"k", None]
    assert n.column(0).to_pylist() == [b"", None]
    assert n.column(n.schema.get_field_index("topic")).to_pylist() == ["dflt", "x"]
    assert n.column(n.schema.get_field_index("timestamp")).to_pylist() == [1704164645678, None]
    assert payload_bytes(n) == 1


def test_null_topic_without_default_names_the_record():
    b = pa.RecordBatch.from_pydict({"value": [b"a", b"b", b"c"], "topic": ["t", None, "t"]})
    with pytest.raises(InvalidRecordError) as ei:
        normalize_batch(b, None, "s:4:2:", 10)
    assert ei.value.record_id == "s:4:2:11"
    assert "row 11" in str(ei.value) and "s:4:2:11" in str(ei.value)


def test_invalid_utf8_in_string_key_passes_through_as_bytes():
    raw = pa.Array.from_buffers(pa.string(), 1, [None, pa.py_buffer(b"\x00\x00\x00\x00\x02\x00\x00\x00"),
                                                 pa.py_buffer(b"\xff\xfe")])
    b = pa.RecordBatch.from_arrays([raw, pa.array([b"v"])], ["key", "value"])
    n = normalize_batch(b, "t", "s:0:0:", 0)
    assert n.column(n.schema.get_field_index("key")).to_pylist() == [b"\xff\xfe"]
