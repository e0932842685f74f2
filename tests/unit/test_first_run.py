"""Tier 1: first-day mistakes get one error that names what to change (no broker needed)."""

from __future__ import annotations

import logging

import pytest
from confluent_kafka import KafkaError
from pyspark.sql.types import (
    ArrayType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
)

from spark_recoverable_sink import (
    BrokerUnreachableError,
    ConfigError,
    SchemaError,
    SinkConfig,
)
from spark_recoverable_sink.delivery.codes import NON_RETRIABLE
from spark_recoverable_sink.delivery.contact import (
    BrokerContact,
    ContactDeadline,
    first_contact_failure,
)
from spark_recoverable_sink.delivery.explain import explain
from spark_recoverable_sink.driver.query import claim_sink_name
from spark_recoverable_sink.driver.sink import RecoverableKafkaSink
from spark_recoverable_sink.report import BatchReport, TaskReport
from spark_recoverable_sink.schema import validate_spark_schema

SECRET = "hunter2-do-not-print"


def _config(**kw):
    return SinkConfig.build("s1", {"bootstrap.servers": "10.0.0.1:9092", "sasl.password": SECRET}, "/tmp/x",
                            topic="t", **kw)


def _part(i=0, **kw):
    base = dict(origin=i, spark_attempt=0, rows=10, bytes=10, acked=0, pending=10, retried=0, dead_lettered=0,
                replayed=0, seconds=0.1, pid=1, slot="s")
    base.update(kw)
    return TaskReport(**base)


# -- headers, partition and other column types ------------------------------------------

@pytest.mark.parametrize("dtype,hint", [
    (ArrayType(StructType([StructField("key", StringType()), StructField("value", StringType())])),
     "cast('binary')"),
    (MapType(StringType(), StringType()), "map_entries"),
    (ArrayType(StringType()), "array of (key string, value binary) structs"),
])
def test_wrong_headers_shape_says_how_to_build_them(dtype, hint):
    schema = StructType([StructField("value", StringType()), StructField("headers", dtype)])
    with pytest.raises(SchemaError) as ei:
        validate_spark_schema(schema, "t")
    assert ei.value.column == "headers"
    assert "array<struct<key:string,value:binary>>" in str(ei.value) and hint in str(ei.value)


def test_partition_column_of_the_wrong_type_says_to_cast():
    schema = StructType([StructField("value", StringType()), StructField("partition", LongType())])
    with pytest.raises(SchemaError, match=r"cast\('int'\)"):
        validate_spark_schema(schema, "t")


# -- dead-letter reasons -----------------------------------------------------------

def test_unknown_partition_names_the_topic_and_its_partition_count():
    text = explain(_config(), KafkaError._UNKNOWN_PARTITION, "Local: Unknown partition", "orders", 7, 10,
                   lambda topic: {"orders": 3}[topic])
    assert "partition column is 7" in text and "'orders' has 3 partition(s), 0..2" in text


def test_unknown_topic_names_the_topic_and_is_not_retried():
    for code in (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC):
        assert code in NON_RETRIABLE
        text = explain(_config(), code, "Broker: Unknown topic or partition", "ordres", None, 10)
        assert "topic 'ordres' does not exist" in text


def test_too_large_says_which_limit():
    conf = _config()
    producer_side = explain(conf, KafkaError.MSG_SIZE_TOO_LARGE, "Message size too large", "t", None, 2_000_000)
    assert "over the producer's message.max.bytes=1000000" in producer_side
    conf = SinkConfig.build("s1", {"bootstrap.servers": "h:1", "message.max.bytes": "10000000"}, "/tmp/x")
    broker_side = explain(conf, KafkaError.MSG_SIZE_TOO_LARGE, "Message size too large", "t", None, 2_000_000)
    assert "topic 't''s max.message.bytes" in broker_side and "within the producer's" in broker_side


# -- broker never reached ------------------------------------------------------------

class _Err:
    def __init__(self, code, text):
        self._code, self._text = code, text

    def code(self):
        return self._code

    def str(self):
        return self._text


def test_contact_remembers_connection_errors_scrubbed_and_gives_up_when_all_brokers_are_down(tmp_path):
    contact = BrokerContact(_config(), str(tmp_path))
    contact.client_error(_Err(KafkaError._MSG_TIMED_OUT, "not a connection error"))
    assert contact.last_error == "" and not contact.hopeless()
    contact.client_error(_Err(KafkaError._TRANSPORT, f"10.0.0.1:9092/bootstrap: Connect failed {SECRET}"))
    contact.client_error(_Err(KafkaError._ALL_BROKERS_DOWN, "1/1 brokers are down"))
    assert "Connect failed ***" in contact.last_error and SECRET not in contact.last_error
    assert contact.hopeless()
    assert ContactDeadline(3600, contact).expired()
    # opted into waiting: the task waits its whole ack timeout
    waiting = BrokerContact(_config(wait_for_broker=True), str(tmp_path / "w"))
    waiting.client_error(_Err(KafkaError._ALL_BROKERS_DOWN, "1/1 brokers are down"))
    assert not waiting.hopeless() and not ContactDeadline(3600, waiting).expired()


def test_reaching_a_broker_once_is_remembered_across_worker_restarts(tmp_path):
    contact = BrokerContact(_config(), str(tmp_path))
    assert not contact.reached
    contact.mark_reached()
    restarted = BrokerContact(_config(), str(tmp_path))
    assert restarted.reached
    restarted.client_error(_Err(KafkaError._ALL_BROKERS_DOWN, "1/1 brokers are down"))
    assert not restarted.hopeless()  # an outage, not a first-day mistake


def test_a_worker_learns_that_another_worker_reached_a_broker(tmp_path):
    older, other = BrokerContact(_config(), str(tmp_path)), BrokerContact(_config(), str(tmp_path))
    assert not older.reached
    other.mark_reached()
    assert older.reached


def test_first_contact_failure_needs_pending_records_no_contact_and_a_connection_error():
    err = "10.0.0.1:9092/bootstrap: Connect to ipv4#10.0.0.1:9092 failed: Connection refused"
    assert first_contact_failure([_part(0, last_error=err), _part(1)]) == (20, err)
    assert first_contact_failure([_part(0, last_error=err), _part(1, broker_reached=1)]) is None
    assert first_contact_failure([_part(0, last_error=err), _part(1, acked=1, pending=9)]) is None
    assert first_contact_failure([_part(0, last_error=err, pending=0, dead_lettered=10)]) is None
    assert first_contact_failure([_part(0)]) is None  # no error seen: keep waiting, as before


def _sink(wal_dir, **kw):
    return RecoverableKafkaSink("s1", {"bootstrap.servers": "10.0.0.1:9092", "sasl.password": SECRET},
                                topic="t", wal_dir=str(wal_dir), **kw)


def _report(*parts):
    return BatchReport.from_tasks(3, parts, 0.1)


def test_driver_fails_the_first_batch_naming_the_address_and_error_and_keeps_the_records(tmp_path):
    sink = _sink(tmp_path)
    err = "10.0.0.1:9092/bootstrap: Connect to ipv4#10.0.0.1:9092 failed: Connection refused"
    with pytest.raises(BrokerUnreachableError) as ei:
        sink._check_first_contact(_report(_part(0, last_error=err)))
    e = ei.value
    assert e.bootstrap_servers == "10.0.0.1:9092" and e.last_error == err and e.pending == 10
    assert "bootstrap.servers=10.0.0.1:9092" in str(e) and "Connection refused" in str(e)
    assert "Nothing was dropped" in str(e) and "WALs" in str(e)
    assert SECRET not in str(e)


def test_driver_that_reached_a_broker_once_keeps_waiting_through_an_outage(tmp_path):
    sink = _sink(tmp_path)
    sink._check_first_contact(_report(_part(0, acked=10, pending=0)))
    err = "Connect to ipv4#10.0.0.1:9092 failed: Connection refused"
    sink._check_first_contact(_report(_part(0, last_error=err)))  # no error: the outage is ridden out


def test_a_restarted_driver_or_a_later_streaming_batch_is_not_a_first_contact(tmp_path):
    err = "Connect to ipv4#10.0.0.1:9092 failed: Connection refused"
    # a streaming query past its first batch (its batch id comes from the checkpoint): an outage, not a mistake
    _sink(tmp_path / "a")._check_first_contact(_report(_part(0, last_error=err)), earlier_batch_ended=True)
    # a driver that saw the sink reach a broker, restarted on the same host with new executors
    _sink(tmp_path / "b")._check_first_contact(_report(_part(0, acked=10, pending=0)))
    restarted = _sink(tmp_path / "b")
    restarted._check_first_contact(_report(_part(0, last_error=err)))  # the host remembers it
    with pytest.raises(BrokerUnreachableError):  # while a host that never saw it reached still fails the batch
        _sink(tmp_path / "c")._check_first_contact(_report(_part(0, last_error=err)))


def test_wait_for_broker_warns_loudly_instead(caplog, tmp_path):
    sink = _sink(tmp_path, wait_for_broker=True)
    with caplog.at_level(logging.ERROR):
        sink._check_first_contact(_report(_part(0, last_error="Connect failed: Connection refused")))
    assert "has never reached a Kafka broker at bootstrap.servers=10.0.0.1:9092" in caplog.text
    assert "wait_for_broker=True" in caplog.text


def test_wait_for_broker_logs_an_error_as_its_option_says(caplog, tmp_path):
    from devtools import config_doc

    sink = _sink(tmp_path, wait_for_broker=True)
    with caplog.at_level(logging.DEBUG, logger="spark_recoverable_sink"):
        sink._check_first_contact(_report(_part(0, last_error="Connect failed: Connection refused")))
    assert {r.levelname for r in caplog.records if "has never reached a Kafka broker" in r.getMessage()} == {"ERROR"}
    (row,) = [r for r in config_doc.options_table().splitlines() if r.startswith("| `wait_for_broker` |")]
    assert "ERROR" in row and "warn" not in row, row


# -- one sink name per query ---------------------------------------------------------

def test_a_sink_name_used_by_two_active_queries_names_both():
    active = ["q-a", "q-b"]
    claim_sink_name("shared-1", "q-a", lambda: active)
    claim_sink_name("shared-1", "q-a", lambda: active)  # the same query, next batch
    with pytest.raises(ConfigError) as ei:
        claim_sink_name("shared-1", "q-b", lambda: active)
    assert ei.value.option == "name"
    assert "'shared-1'" in str(ei.value) and "q-a" in str(ei.value) and "q-b" in str(ei.value)
    # once q-a stopped, q-b may take the name over
    claim_sink_name("shared-1", "q-b", lambda: ["q-b"])
    claim_sink_name("shared-1", None, lambda: [])  # not a streaming batch: nothing to check
