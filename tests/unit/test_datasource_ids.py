"""Tier 1: the data source names a Kafka source's records by their coordinates unless told otherwise, and warns when
told to name them by Spark partition."""

from __future__ import annotations

import logging

import pytest

pytest.importorskip("pyspark.sql.datasource", reason="the data source needs PySpark's Python data source API")

from pyspark.sql.types import BinaryType, IntegerType, LongType, StringType, StructField, StructType  # noqa: E402

from spark_recoverable_sink.driver.datasource import RecoverableKafkaDataSource  # noqa: E402

KAFKA_SOURCE = StructType([StructField("key", BinaryType()), StructField("value", BinaryType()),
                           StructField("topic", StringType()), StructField("partition", IntegerType()),
                           StructField("offset", LongType())])
OPTS = {"kafka.bootstrap.servers": "localhost:9092", "topic": "out", "name": "dsw"}


def _warnings(caplog, **extra: str) -> list[str]:
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="spark_recoverable_sink"):
        RecoverableKafkaDataSource({**OPTS, "wal_dir": "/tmp/rks-unit-ds", **extra})._prepare(KAFKA_SOURCE, False)
    return [r.getMessage() for r in caplog.records if "record ids name the Spark partition" in r.getMessage()]


def test_a_kafka_source_dataframe_gets_key_ids_of_its_coordinates_by_default(caplog):
    assert _warnings(caplog) == []
    config, columns, _run = RecoverableKafkaDataSource({**OPTS, "wal_dir": "/tmp/rks-unit-ds"})._prepare(
        KAFKA_SOURCE, False)
    assert (config.record_ids, config.id_columns, columns.ids) == ("columns", ("topic", "partition", "offset"),
                                                                 ("topic", "partition", "offset"))
    other = StructType([StructField("key", BinaryType()), StructField("value", BinaryType())])
    config, _c, _r = RecoverableKafkaDataSource({**OPTS, "wal_dir": "/tmp/rks-unit-ds"})._prepare(other, False)
    assert config.record_ids == "partition", "any other input: ids by Spark partition"


def test_a_kafka_source_dataframe_with_partition_ids_chosen_is_warned_about(caplog):
    (said,) = _warnings(caplog, record_ids="partition")
    assert "id_columns=topic,partition,offset" in said and "sink=dsw" in said


def test_no_warning_once_ids_come_from_the_source_offsets(caplog):
    assert _warnings(caplog, record_ids="columns", id_columns="topic,partition,offset") == []
