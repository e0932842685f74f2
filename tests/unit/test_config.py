"""Tier 1: configuration validation, safe defaults, secrets."""

from __future__ import annotations

import logging
import pickle

import pytest

from spark_recoverable_sink import ConfigError, RecoverableKafkaSink, SinkConfig

SECRET = "hunter2-do-not-print"


def _sink(**kw):
    base = dict(name="s1", kafka_conf={"bootstrap.servers": "h:1"}, topic="t", wal_dir="/tmp/x")
    base.update(kw)
    return RecoverableKafkaSink(**base)


@pytest.mark.parametrize("kw,option", [
    ({"name": "bad name"}, "name"),
    ({"name": "../escape"}, "name"),
    ({"kafka_conf": {}}, "kafka_conf"),
    ({"kafka_conf": {"bootstrap.servers": "h", "transactional.id": "x"}}, "kafka_conf['transactional.id']"),
    ({"kafka_conf": {"bootstrap.servers": "h", "on_delivery": print}}, "kafka_conf['on_delivery']"),
    ({"ack_timeout_s": -1}, "ack_timeout_s"),
    ({"ack_timeout_s": "1"}, "ack_timeout_s"),
    ({"wal_sync": "always"}, "wal_sync"),
    ({"max_wal_bytes": 10}, "max_wal_bytes"),
    ({"max_wal_bytes": 1.5e9}, "max_wal_bytes"),
    ({"topic": "bad topic"}, "topic"),
    ({"dead_letter_topic": "t"}, "dead_letter_topic"),
    ({"guarantee": "exactly_once"}, "guarantee"),
    ({"guarantee": "at_most_once"}, "guarantee"),
    ({"checkpoint_interval_s": 0}, "checkpoint_interval_s"),
    ({"wal_dir": ""}, "wal_dir"),
    ({"no_such_option": 1}, None),
])
def test_bad_options_are_named(kw, option):
    if option is None:
        with pytest.raises(TypeError, match="no_such_option"):
            _sink(**kw)
        return
    with pytest.raises(ConfigError) as ei:
        _sink(**kw)
    assert ei.value.option == option
    assert option in str(ei.value)


def test_safe_defaults_filled_and_user_values_pass_through():
    conf = _sink(kafka_conf={"bootstrap.servers": "h:1", "linger.ms": 20, "compression.type": "lz4"}).config
    pc = conf.producer_conf()
    assert pc["enable.idempotence"] == "true" and pc["acks"] == "all"
    assert pc["linger.ms"] == "20" and pc["compression.type"] == "lz4"


def test_weakening_delivery_settings_warns(caplog):
    with caplog.at_level(logging.WARNING):
        conf = _sink(kafka_conf={"bootstrap.servers": "h:1", "acks": "1", "enable.idempotence": False}).config
    assert conf.producer_conf()["acks"] == "1"
    text = caplog.text
    assert "acks=1" in text and "enable.idempotence=false" in text


def test_secrets_never_in_repr_str_or_pickle_text():
    sink = _sink(kafka_conf={"bootstrap.servers": "h:1", "sasl.password": SECRET, "ssl.key.password": SECRET,
                             "sasl.oauthbearer.client.secret": SECRET})
    for text in (repr(sink), str(sink.config), repr(sink.config)):
        assert SECRET not in text
        assert "***" in text
    assert sink.config.scrub(f"error near {SECRET}!") == "error near ***!"
    # the real value still reaches the client
    assert sink.config.producer_conf()["sasl.password"] == SECRET


def test_sink_pickles_configuration_only():
    sink = _sink()
    sink.reports.append("not-a-real-report")  # type: ignore[arg-type]
    back = pickle.loads(pickle.dumps(sink))
    assert back.config == sink.config
    assert len(back.reports) == 0
    cfg = pickle.loads(pickle.dumps(sink.config))
    assert cfg == sink.config and hash(cfg) == hash(sink.config)


def test_config_is_frozen():
    conf = SinkConfig.build("s", {"bootstrap.servers": "h"}, "/tmp/w")
    with pytest.raises(Exception):
        conf.topic = "other"  # type: ignore[misc]
