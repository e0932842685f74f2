"""Tier 3: first-day mistakes on real Spark: one clear error on the driver."""

from __future__ import annotations

import logging
import uuid

import pytest
from pyspark.errors import StreamingQueryException

from devtools.kafka_broker import free_port
from spark_recoverable_sink import BrokerUnreachableError, RecoverableKafkaSink

pytestmark = pytest.mark.spark


def _unreachable_sink(tmp_path, **kw):
    address = f"127.0.0.1:{free_port()}"  # nothing listens there
    kw.setdefault("ack_timeout_s", 120)
    return address, RecoverableKafkaSink(f"s-{uuid.uuid4().hex[:8]}", {"bootstrap.servers": address}, topic="t",
                                         wal_dir=str(tmp_path / "wal"), **kw)


def test_first_batch_to_an_address_without_a_broker_fails_naming_it(spark, tmp_path):
    address, sink = _unreachable_sink(tmp_path, drain_on_failure_s=0)
    df = spark.createDataFrame([(b"v%d" % i,) for i in range(6)], "value binary").repartition(2)
    with pytest.raises(BrokerUnreachableError) as ei:
        sink.write(df, batch_id=1)
    e = ei.value
    assert e.bootstrap_servers == address and e.pending == 6
    assert address in e.last_error and "Nothing was dropped" in str(e)
    assert sink.last_report is not None and sink.last_report.pending == 6  # kept in the WALs


def test_wait_for_broker_only_logs_the_error(spark, tmp_path, caplog):
    address, sink = _unreachable_sink(tmp_path, wait_for_broker=True, ack_timeout_s=1)
    df = spark.createDataFrame([(b"v",)], "value binary")
    with caplog.at_level(logging.ERROR, logger="spark_recoverable_sink.sink"):
        report = sink.write(df, batch_id=1)
    assert report.pending == 1
    assert f"has never reached a Kafka broker at bootstrap.servers={address}" in caplog.text


def test_one_sink_name_used_by_two_running_queries_names_both(spark, broker, topic, tmp_path):
    src = tmp_path / "in"
    src.mkdir()
    (src / "a.txt").write_text("one\ntwo\n")
    name = f"shared-{uuid.uuid4().hex[:6]}"

    def sink():
        return RecoverableKafkaSink(name, {"bootstrap.servers": broker.bootstrap}, topic=topic,
                                    wal_dir=str(tmp_path / "wal"))

    def start(tag):
        return (spark.readStream.text(str(src)).writeStream.foreachBatch(sink())
                .option("checkpointLocation", str(tmp_path / f"chk-{tag}")).start())

    first = start("a")
    try:
        first.processAllAvailable()
        second = start("b")
        try:
            with pytest.raises(StreamingQueryException) as ei:
                second.processAllAvailable()
            text = str(ei.value)
            assert f"sink name {name!r} is already used by streaming query {first.id}" in text
            assert second.id in text
        finally:
            second.stop()
        assert first.isActive and first.exception() is None
    finally:
        first.stop()
