"""Data-source options map onto the sink's configuration as its keywords do."""

from __future__ import annotations

import pytest

from spark_recoverable_sink import ConfigError
from spark_recoverable_sink.driver.options import parse_options

BASE = {"kafka.bootstrap.servers": "h:9092", "name": "orders", "topic": "t", "wal_dir": "/tmp/rks-opts"}


def test_kafka_prefix_is_removed_and_sink_options_are_typed():
    parsed = parse_options({**BASE, "kafka.linger.ms": "5", "kafka.sasl.password": "pw", "ack_timeout_s": "2.5",
                            "max_wal_bytes": "2097152", "wait_for_broker": "TRUE", "dead_letter_topic": "dlq",
                            "run_id": "r1", "checkpointLocation": "/chk", "path": "x"})
    c = parsed.config
    assert dict(c.kafka_conf_items) == {"bootstrap.servers": "h:9092", "linger.ms": "5", "sasl.password": "pw"}
    assert (c.name, c.topic, c.wal_dir) == ("orders", "t", "/tmp/rks-opts")
    assert c.ack_timeout_s == 2.5 and c.max_wal_bytes == 2097152 and c.wait_for_broker is True
    assert c.dead_letter_topic == "dlq" and parsed.run_id == "r1"
    assert "pw" not in repr(c)


@pytest.mark.parametrize("given, lanes", [("auto", None), (" Auto ", None), ("4", 4)])
def test_exactly_once_lanes_take_auto_or_a_count(given, lanes):
    assert parse_options({**BASE, "exactly_once_lanes": given}).config.exactly_once_lanes == lanes


def test_keys_arrive_lower_cased_and_still_match():
    parsed = parse_options({k.upper() if k.startswith("a") else k: v for k, v in {**BASE, "ACK_TIMEOUT_S": "1"}.items()})
    assert parsed.config.ack_timeout_s == 1.0


@pytest.mark.parametrize("extra, option, text", [
    ({"ack_timout_s": "1"}, "ack_timout_s", "did you mean 'ack_timeout_s'"),
    ({"wait_for_broker": "yes"}, "wait_for_broker", "must be true or false"),
    ({"max_wal_bytes": "1.5"}, "max_wal_bytes", "must be a whole number"),
    ({"run_id": "bad run"}, "run_id", "1-64 characters"),
    ({"drain_on_failure_s": "3"}, "drain_on_failure_s", "foreachBatch(sink) only"),
    ({"value_format": "avro"}, "value_format", "the data source does not have"),
    ({"key_format": "avro"}, "key_format", "the data source does not have"),
    ({"kafka.bootstrap.servers": ""}, "kafka", "bootstrap"),
])
def test_bad_options_name_the_option(extra, option, text):
    with pytest.raises(ConfigError) as info:
        parse_options({**BASE, **extra})
    assert option in str(info.value) and text in str(info.value)


def test_name_is_required():
    with pytest.raises(ConfigError, match="name"):
        parse_options({k: v for k, v in BASE.items() if k != "name"})
