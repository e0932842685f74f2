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
    ({"guarantee": "exactly_once", "ack_timeout_s": 0}, "ack_timeout_s"),
    ({"guarantee": "exactly_once", "marker_topic": "t"}, "marker_topic"),
    ({"marker_topic": "bad topic"}, "marker_topic"),
    ({"settle_timeout_s": 0}, "settle_timeout_s"),
    ({"exactly_once_lanes": -1}, "exactly_once_lanes"),
    ({"exactly_once_lanes": 2.5}, "exactly_once_lanes"),
    ({"exactly_once_lanes": "some"}, "exactly_once_lanes"),
    ({"offsets_retention_s": -1}, "offsets_retention_s"),
    ({"guarantee": "exactly_once", "dead_letter_topic": "dlq"}, "dead_letter_topic"),
    ({"guarantee": "exactly_once", "kafka_conf": {"bootstrap.servers": "h", "acks": "1"}}, "kafka_conf['acks']"),
    ({"guarantee": "exactly_once", "kafka_conf": {"bootstrap.servers": "h", "message.timeout.ms": 90000}},
     "kafka_conf['message.timeout.ms']"),
    ({"guarantee": "at_most_once"}, "guarantee"),
    ({"prune_interval_s": 0}, "prune_interval_s"),
    ({"wal_dir": ""}, "wal_dir"),
    ({"no_such_option": 1}, "no_such_option"),
    ({"wait_for_broker": "yes"}, "wait_for_broker"),
])
def test_bad_options_are_named(kw, option):
    with pytest.raises(ConfigError) as ei:
        _sink(**kw)
    assert ei.value.option == option
    assert option in str(ei.value)


def test_exactly_once_refuses_a_dead_letter_topic_saying_what_happens_to_a_refused_record():
    """guarantees.md: a refused record refuses its whole unit, every record of which goes to the WAL's dead-letter
    store, and the batch fails with DeadLetterError; nothing is left pending."""
    with pytest.raises(ConfigError) as ei:
        _sink(guarantee="exactly_once", dead_letter_topic="dlq")
    reason = ei.value.reason
    assert "DeadLetterError" in reason and "dead-letter store" in reason and "whole" in reason, reason
    assert "pending" not in reason and "stays in the WAL" not in reason, reason


def test_exactly_once_is_accepted_with_a_default_topic():
    conf = _sink(guarantee="exactly_once", kafka_conf={"bootstrap.servers": "h:1", "transaction.timeout.ms": 30000})
    assert conf.config.guarantee == "exactly_once"
    assert conf.config.producer_conf()["transaction.timeout.ms"] == "30000"


@pytest.mark.parametrize("given", [{}, {"exactly_once_lanes": "auto"}, {"exactly_once_lanes": "AUTO"},
                                   {"exactly_once_lanes": None}])
def test_exactly_once_lanes_are_auto_by_default_or_when_asked(given):
    assert _sink(guarantee="exactly_once", **given).config.exactly_once_lanes is None


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


@pytest.mark.parametrize("typo,meant", [
    ("wal_sinc", "wal_sync"), ("ack_timout_s", "ack_timeout_s"), ("dead_letter_topik", "dead_letter_topic"),
    ("max_wal_byte", "max_wal_bytes"), ("drain_on_failur_s", "drain_on_failure_s"),
])
def test_misspelt_option_names_the_closest_valid_one(typo, meant):
    with pytest.raises(ConfigError) as ei:
        _sink(**{typo: "commit"})
    assert ei.value.option == typo
    assert f"did you mean {meant!r}" in str(ei.value)


def test_kafka_option_given_as_sink_option_says_where_it_goes():
    with pytest.raises(ConfigError, match="kafka_conf") as ei:
        RecoverableKafkaSink("s1", {"bootstrap.servers": "h:1"}, topic="t", wal_dir="/tmp/x", **{"linger.ms": 5})
    assert ei.value.option == "linger.ms"


def _listening_socket():
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(8)
    s.setblocking(False)
    return s


@pytest.mark.parametrize("conf,option,needle", [
    ({"no.such.option": "1"}, "kafka_conf['no.such.option']", "No such configuration property"),
    ({"linger.ms": "soon"}, "kafka_conf['linger.ms']", "Invalid value"),
    ({"acks": "most"}, "kafka_conf['acks']", "request.required.acks"),
    ({"security.protocol": "tls"}, "kafka_conf['security.protocol']", "plaintext"),
])
def test_kafka_conf_is_checked_on_the_driver_without_connecting(conf, option, needle):
    listener = _listening_socket()
    try:
        port = listener.getsockname()[1]
        with pytest.raises(ConfigError) as ei:
            _sink(kafka_conf={"bootstrap.servers": f"127.0.0.1:{port}", "sasl.password": SECRET, **conf})
        assert ei.value.option == option
        assert needle in str(ei.value)
        assert SECRET not in str(ei.value)
        # the check created a client but it never connected to the configured address
        with pytest.raises(BlockingIOError):
            listener.accept()
    finally:
        listener.close()


def test_a_valid_kafka_conf_builds_without_connecting():
    listener = _listening_socket()
    try:
        port = listener.getsockname()[1]
        _sink(kafka_conf={"bootstrap.servers": f"127.0.0.1:{port}", "linger.ms": 5, "sasl.password": SECRET,
                          "ssl.ca.location": "/only/on/executors/ca.pem", "security.protocol": "SASL_SSL",
                          "sasl.mechanism": "PLAIN", "sasl.username": "u"})
        with pytest.raises(BlockingIOError):
            listener.accept()
    finally:
        listener.close()


@pytest.mark.parametrize("option", ["message.timeout.ms", "delivery.timeout.ms"])
def test_ack_timeout_longer_than_the_clients_delivery_timeout_warns(caplog, option):
    with caplog.at_level(logging.WARNING):
        _sink(ack_timeout_s=60, kafka_conf={"bootstrap.servers": "h:1", option: "5000"})
    assert f"ack_timeout_s=60 is longer than kafka option {option}=5000" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        _sink(ack_timeout_s=5, kafka_conf={"bootstrap.servers": "h:1", option: "5000"})
    assert "is longer than" not in caplog.text
