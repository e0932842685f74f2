"""Tier 1: the data source's driver side warns when a Kafka source's DataFrame meets its partition-scoped ids."""

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


def test_a_kafka_source_dataframe_with_partition_ids_is_warned_about(caplog):
    (said,) = _warnings(caplog)
    assert "id_columns=topic,partition,offset" in said and "sink=dsw" in said


def test_no_warning_once_ids_come_from_the_source_offsets(caplog):
    assert _warnings(caplog, record_ids="columns", id_columns="topic,partition,offset") == []
