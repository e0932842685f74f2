"""Tier 1: the Java producer's settings, as ``format("kafka")`` users write them, in librdkafka's terms.

Every row of ``javaconf.TABLE`` has an example here, checked on the configuration the producer gets
(``SinkConfig.producer_conf()``, after librdkafka's own check on the driver): a same-named setting
passes unchanged, a mapped one arrives under librdkafka's name and unit, an ignored one not at
all, a refused one is a ConfigError naming the Java setting and what does its job. Every
entry point (Python ``kafka_conf``, data-source options, job templates, ``rks --kafka-conf``) maps.
"""

from __future__ import annotations

import json
import logging

import pytest

from spark_recoverable_sink import ConfigError, RecoverableKafkaSink, SinkConfig
from spark_recoverable_sink.config import is_secret_option, redact
from spark_recoverable_sink.driver.options import parse_options
from spark_recoverable_sink.javaconf import BY_NAME, REFUSED, SAME, TABLE, to_librdkafka
from spark_recoverable_sink.ops.common import OpsError, build_config, load_kafka_conf

from ..java_settings import PRODUCTION, PRODUCTION_LIBRDKAFKA

B = {"bootstrap.servers": "h:1"}
KINIT = '-t "%{sasl.kerberos.keytab}" -k %{sasl.kerberos.principal}'
GONE = object()  # the setting must not reach librdkafka
# java name -> (the settings given, what producer_conf() must hold); a refused row -> (given, ConfigError text)
EXAMPLES: dict[str, tuple[dict[str, str], dict[str, object] | str]] = {
    "bootstrap.servers": ({}, {"bootstrap.servers": "h:1"}),
    "acks": ({"acks": "-1"}, {"acks": "-1"}),
    "enable.idempotence": ({"enable.idempotence": "false"}, {"enable.idempotence": "false"}),
    "retries": ({"retries": "10"}, {"retries": "10"}),
    "delivery.timeout.ms": ({"delivery.timeout.ms": "120000"}, {"delivery.timeout.ms": "120000"}),
    "request.timeout.ms": ({"request.timeout.ms": "20000"}, {"request.timeout.ms": "20000"}),
    "linger.ms": ({"linger.ms": "50"}, {"linger.ms": "50"}),
    "batch.size": ({"batch.size": "16384"}, {"batch.size": "16384"}),
    "compression.type": ({"compression.type": "zstd"}, {"compression.type": "zstd"}),
    "max.in.flight.requests.per.connection": ({"max.in.flight.requests.per.connection": "5"},
                                              {"max.in.flight.requests.per.connection": "5"}),
    "retry.backoff.ms": ({"retry.backoff.ms": "250"}, {"retry.backoff.ms": "250"}),
    "retry.backoff.max.ms": ({"retry.backoff.max.ms": "2000"}, {"retry.backoff.max.ms": "2000"}),
    "reconnect.backoff.ms": ({"reconnect.backoff.ms": "50"}, {"reconnect.backoff.ms": "50"}),
    "reconnect.backoff.max.ms": ({"reconnect.backoff.max.ms": "1000"}, {"reconnect.backoff.max.ms": "1000"}),
    "connections.max.idle.ms": ({"connections.max.idle.ms": "540000"}, {"connections.max.idle.ms": "540000"}),
    "socket.connection.setup.timeout.ms": ({"socket.connection.setup.timeout.ms": "10000"},
                                           {"socket.connection.setup.timeout.ms": "10000"}),
    "metadata.max.age.ms": ({"metadata.max.age.ms": "60000"}, {"metadata.max.age.ms": "60000"}),
    "client.id": ({"client.id": "job-7"}, {"client.id": "job-7"}),
    "client.dns.lookup": ({"client.dns.lookup": "use_all_dns_ips"}, {"client.dns.lookup": "use_all_dns_ips"}),
    "transaction.timeout.ms": ({"transaction.timeout.ms": "60000"}, {"transaction.timeout.ms": "60000"}),
    "enable.metrics.push": ({"enable.metrics.push": "false"}, {"enable.metrics.push": "false"}),
    "metadata.recovery.strategy": ({"metadata.recovery.strategy": "none"}, {"metadata.recovery.strategy": "none"}),
    "metadata.recovery.rebootstrap.trigger.ms": ({"metadata.recovery.rebootstrap.trigger.ms": "300000"},
                                                 {"metadata.recovery.rebootstrap.trigger.ms": "300000"}),
    "security.protocol": ({"security.protocol": "SASL_SSL"}, {"security.protocol": "SASL_SSL"}),
    "sasl.mechanism": ({"sasl.mechanism": "SCRAM-SHA-256"}, {"sasl.mechanism": "SCRAM-SHA-256"}),
    "sasl.kerberos.service.name": ({"sasl.kerberos.service.name": "kafka"}, {"sasl.kerberos.service.name": "kafka"}),
    "sasl.kerberos.min.time.before.relogin": ({"sasl.kerberos.min.time.before.relogin": "60000"},
                                              {"sasl.kerberos.min.time.before.relogin": "60000"}),
    "sasl.oauthbearer.token.endpoint.url": ({"sasl.oauthbearer.token.endpoint.url": "https://idp/t"},
                                            {"sasl.oauthbearer.token.endpoint.url": "https://idp/t"}),
    "sasl.oauthbearer.sub.claim.name": ({"sasl.oauthbearer.sub.claim.name": "uid"},
                                        {"sasl.oauthbearer.sub.claim.name": "uid"}),
    "sasl.oauthbearer.scope": ({"sasl.oauthbearer.scope": "kafka"}, {"sasl.oauthbearer.scope": "kafka"}),
    "sasl.oauthbearer.client.credentials.client.id": ({"sasl.oauthbearer.client.credentials.client.id": "c"},
                                                      {"sasl.oauthbearer.client.credentials.client.id": "c"}),
    "sasl.oauthbearer.client.credentials.client.secret": (
        {"sasl.oauthbearer.client.credentials.client.secret": "s"},
        {"sasl.oauthbearer.client.credentials.client.secret": "s"}),
    "ssl.key.password": ({"ssl.key.password": "k"}, {"ssl.key.password": "k"}),
    "ssl.keystore.password": ({"ssl.keystore.password": "p"}, {"ssl.keystore.password": "p"}),
    "ssl.cipher.suites": ({"ssl.cipher.suites": "ECDHE-RSA-AES128-GCM-SHA256"},
                          {"ssl.cipher.suites": "ECDHE-RSA-AES128-GCM-SHA256"}),
    "ssl.keystore.location": ({"ssl.keystore.type": "PEM", "ssl.keystore.location": "/etc/k/client.pem"},
                              {"ssl.key.location": "/etc/k/client.pem", "ssl.certificate.location": "/etc/k/client.pem",
                               "ssl.keystore.location": GONE, "ssl.keystore.type": GONE}),
    "ssl.keystore.type": ({"ssl.keystore.type": "PKCS12", "ssl.keystore.location": "/etc/k/client.p12"},
                          {"ssl.keystore.location": "/etc/k/client.p12", "ssl.keystore.type": GONE}),
    "ssl.keystore.key": ({"ssl.keystore.key": "KEYPEM"}, {"ssl.key.pem": "KEYPEM", "ssl.keystore.key": GONE}),
    "ssl.keystore.certificate.chain": ({"ssl.keystore.certificate.chain": "CHAIN"},
                                       {"ssl.certificate.pem": "CHAIN", "ssl.keystore.certificate.chain": GONE}),
    "ssl.truststore.location": ({"ssl.truststore.type": "PEM", "ssl.truststore.location": "/etc/k/ca.pem"},
                                {"ssl.ca.location": "/etc/k/ca.pem", "ssl.truststore.location": GONE}),
    "ssl.truststore.certificates": ({"ssl.truststore.certificates": "CAPEM"},
                                    {"ssl.ca.pem": "CAPEM", "ssl.truststore.certificates": GONE}),
    "ssl.truststore.type": ({"ssl.truststore.type": "PEM"}, {"ssl.truststore.type": GONE}),
    "ssl.truststore.password": ({"ssl.truststore.type": "PEM", "ssl.truststore.password": "x"},
                                {"ssl.truststore.password": GONE}),
    "ssl.endpoint.identification.algorithm": ({"ssl.endpoint.identification.algorithm": ""},
                                              {"ssl.endpoint.identification.algorithm": "none"}),
    "max.request.size": ({"max.request.size": "2097152"}, {"message.max.bytes": "2097152", "max.request.size": GONE}),
    "buffer.memory": ({"buffer.memory": "33554432"}, {"queue.buffering.max.kbytes": "32768", "buffer.memory": GONE}),
    "send.buffer.bytes": ({"send.buffer.bytes": "-1"}, {"socket.send.buffer.bytes": "0", "send.buffer.bytes": GONE}),
    "receive.buffer.bytes": ({"receive.buffer.bytes": "65536"}, {"socket.receive.buffer.bytes": "65536"}),
    "compression.gzip.level": ({"compression.type": "gzip", "compression.gzip.level": "6"},
                               {"compression.level": "6", "compression.gzip.level": GONE}),
    "compression.lz4.level": ({"compression.type": "lz4", "compression.lz4.level": "9"}, {"compression.level": "9"}),
    "compression.zstd.level": ({"compression.type": "snappy", "compression.zstd.level": "3"},
                               {"compression.level": GONE, "compression.zstd.level": GONE}),
    "partitioner.ignore.keys": ({"partitioner.ignore.keys": "true"}, {"partitioner": "random"}),
    "sasl.jaas.config": ({"sasl.jaas.config": 'org.apache.kafka.common.security.plain.PlainLoginModule required '
                                              'username="u" password="p";'},
                         {"sasl.mechanism": "PLAIN", "sasl.username": "u", "sasl.password": "p",
                          "sasl.jaas.config": GONE}),
    "sasl.login.callback.handler.class": (
        {"sasl.login.callback.handler.class": "org.apache.kafka.common.security.oauthbearer.secured."
                                              "OAuthBearerLoginCallbackHandler"},
        {"sasl.login.callback.handler.class": GONE}),
    "sasl.kerberos.kinit.cmd": ({"sasl.kerberos.kinit.cmd": f"/usr/bin/kinit {KINIT}"},
                                {"sasl.kerberos.kinit.cmd": f"/usr/bin/kinit {KINIT}"}),
    "interceptor.classes": ({"interceptor.classes": "io.confluent.monitoring.clients.interceptor."
                                                    "MonitoringProducerInterceptor"}, "plugin.library.paths"),
    "metric.reporters": ({"metric.reporters": "com.example.Reporter"}, "statistics.interval.ms"),
    "config.providers": ({"config.providers": "file"}, "{\"env\": \"VAR\"}"),
    "transaction.two.phase.commit.enable": ({"transaction.two.phase.commit.enable": "true"}, "exactly_once"),
    "transactional.id": ({"transactional.id": "t"}, "sets it itself"),
    "key.serializer": ({"key.serializer": "org.apache.kafka.common.serialization.StringSerializer"}, "key_format"),
    "value.serializer": ({"value.serializer": "io.confluent.kafka.serializers.KafkaAvroSerializer"}, "value_format"),
    "partitioner.class": ({"partitioner.class": "org.apache.kafka.clients.producer.RoundRobinPartitioner"},
                          "use partitioner"),
    "sasl.client.callback.handler.class": ({"sasl.client.callback.handler.class": "software.amazon.msk.auth.iam."
                                                                                  "IAMClientCallbackHandler"},
                                           "oauth_cb"),
    "sasl.login.class": ({"sasl.login.class": "com.example.Login"}, "oauth_cb"),
    "security.providers": ({"security.providers": "com.example.Creator"}, "ssl.providers"),
    "ssl.engine.factory.class": ({"ssl.engine.factory.class": "com.example.Factory"}, "ssl.providers"),
}
IGNORED = [s.java for s in TABLE if s.status == "ignored" and s.java not in EXAMPLES]


def _pc(extra: dict[str, str], **kw: object) -> dict[str, object]:
    return SinkConfig.build("j", {**B, **extra}, "/tmp/rks-unit-javaconf", **kw).producer_conf()


def test_every_row_of_the_table_has_an_example_and_one_row_per_setting():
    assert sorted(set(EXAMPLES) | set(IGNORED)) == sorted(BY_NAME)
    assert len(BY_NAME) == len(TABLE)
    assert {s.status for s in TABLE} == {"same", "mapped", "ignored", "refused"}


def test_a_setting_that_reaches_no_client_is_called_ignored_and_says_why(caplog):
    """A Java setting the sink drops is "ignored" in the guide, not "mapped": its row says why that is harmless,
    and the sink logs the ones it was given."""
    from devtools.java_settings import render_table

    ignored = [s for s in TABLE if s.status == "ignored"]
    assert {"max.block.ms", "ssl.protocol", "ssl.enabled.protocols", "metadata.max.idle.ms",
            "ssl.truststore.password"} <= {s.java for s in ignored}
    for s in ignored:
        assert s.librdkafka == "—" and len(s.reason) > 20 and not s.reason.lower().startswith("ignored"), s
        assert _pc({s.java: "1"}) == _pc({}), s.java  # nothing reaches the client, whatever the value
    assert not [s.java for s in TABLE if s.status != "ignored" and s.reason.lower().startswith("ignored")]
    assert "| `max.block.ms` | — | ignored |" in render_table()
    with caplog.at_level(logging.INFO, logger="spark_recoverable_sink"):
        _pc({"max.block.ms": "60000", "ssl.protocol": "TLSv1.3", "max.request.size": "2000000"})
    assert "java_settings_ignored=max.block.ms,ssl.protocol" in caplog.text


@pytest.mark.parametrize("java", sorted(EXAMPLES))
def test_each_setting_reaches_the_producer_as_librdkafka_reads_it(java):
    given, want = EXAMPLES[java]
    row = BY_NAME[java]
    if isinstance(want, str):
        assert row.status == REFUSED
        with pytest.raises(ConfigError) as ei:
            _pc(given)
        assert ei.value.option == f"kafka_conf[{java!r}]"
        assert want in ei.value.reason
        if row.librdkafka != "—":  # the refusal names what does the job in librdkafka
            assert row.librdkafka.split()[0] in ei.value.reason
        return
    pc = _pc(given)
    for key, value in want.items():
        assert pc.get(key, GONE) == value, (key, pc)
    if row.status == SAME:
        assert pc[java] == given.get(java, B.get(java))


@pytest.mark.parametrize("java", IGNORED)
def test_ignored_settings_never_reach_the_client(java):
    pc = _pc({java: "1"})
    assert java not in pc and set(pc) == set(_pc({}))


def test_a_typical_production_job_s_java_settings_all_reach_the_producer():
    pc = _pc(PRODUCTION)
    assert {k: pc.get(k) for k in PRODUCTION_LIBRDKAFKA} == PRODUCTION_LIBRDKAFKA
    assert "max.request.size" not in pc and "buffer.memory" not in pc


@pytest.mark.parametrize("given,kbytes", [("0", "1"), ("1", "1"), ("1024", "1"), ("1025", "2"), ("1048576", "1024")])
def test_buffer_memory_is_bytes_rounded_up_to_kib(given, kbytes):
    # (a record as large as the smallest queue: a queue smaller than the largest record is refused, below)
    assert _pc({"buffer.memory": given, "max.request.size": "1000"})["queue.buffering.max.kbytes"] == kbytes


@pytest.mark.parametrize("given,option,text", [
    ({"buffer.memory": "32m"}, "buffer.memory", "whole number"),
    ({"send.buffer.bytes": "-2"}, "send.buffer.bytes", ">= -1"),
    ({"max.request.size": "10"}, "max.request.size", "message.max.bytes"),  # librdkafka's range, named as given
    ({"ssl.truststore.location": "/etc/k/ts.jks"}, "ssl.truststore.location", "ssl.ca.location"),
    ({"ssl.truststore.type": "PKCS12", "ssl.truststore.certificates": "x"}, "ssl.truststore.certificates",
     "ssl.ca.pem"),
    ({"ssl.keystore.type": "JKS", "ssl.keystore.location": "/k.jks"}, "ssl.keystore.location", "PKCS#12"),
    ({"ssl.keystore.type": "BCFKS"}, "ssl.keystore.type", "JKS, PKCS12 or PEM"),
    ({"ssl.keystore.type": "PEM", "ssl.keystore.password": "x"}, "ssl.keystore.password", "ssl.key.password"),
    ({"ssl.cipher.suites": "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256"}, "ssl.cipher.suites", "OpenSSL"),
    ({"sasl.mechanism": "AWS_MSK_IAM"}, "sasl.mechanism", "oauth_cb"),
    ({"sasl.oauthbearer.token.endpoint.url": "file:///tok"}, "sasl.oauthbearer.token.endpoint.url", "oauth_cb"),
    ({"sasl.login.callback.handler.class": "software.amazon.msk.auth.iam.IAMClientCallbackHandler"},
     "sasl.login.callback.handler.class", "oauth_cb"),
    ({"partitioner.ignore.keys": "yes"}, "partitioner.ignore.keys", "true or false"),
    ({"acks": "1"}, "kafka_conf", "`acks` must be set to `all` when `enable.idempotence` is true"),
    ({"max.request.size": "2000000", "message.max.bytes": "1000000"}, "max.request.size", "keep one"),
    ({"linger.ms": "5", "queue.buffering.max.ms": "50"}, "queue.buffering.max.ms", "keep one"),
    ({"buffer.memory": "33554432", "queue.buffering.max.kbytes": "1024"}, "buffer.memory", "keep one"),
])
def test_refusals_and_conflicts_name_the_setting_given(given, option, text):
    with pytest.raises(ConfigError) as ei:
        _pc(given)
    assert ei.value.option == (option if option == "kafka_conf" else f"kafka_conf[{option!r}]")
    assert text in str(ei.value), str(ei.value)


def test_a_jks_file_given_as_librdkafka_s_keystore_is_named(tmp_path):
    jks = tmp_path / "client.jks"
    jks.write_bytes(b"\xfe\xed\xfe\xed" + b"\0" * 60)
    with pytest.raises(ConfigError, match="keytool -importkeystore"):
        _pc({"ssl.keystore.location": str(jks)})
    p12 = tmp_path / "client.p12"
    p12.write_bytes(b"\x30\x82" + b"\0" * 60)
    assert _pc({"ssl.keystore.location": str(p12)})["ssl.keystore.location"] == str(p12)


def test_equal_values_under_both_names_are_one_setting():
    pc = _pc({"acks": "all", "request.required.acks": "-1", "buffer.memory": "33554432",
              "queue.buffering.max.kbytes": "32768", "max.request.size": "1000000", "message.max.bytes": "1000000"})
    assert pc["queue.buffering.max.kbytes"] == "32768" and pc["message.max.bytes"] == "1000000"


def test_librdkafka_names_map_onto_themselves():
    conf = {**B, **PRODUCTION, "ssl.endpoint.identification.algorithm": "", "send.buffer.bytes": "-1",
            "sasl.mechanism": "SCRAM-SHA-512", "sasl.kerberos.kinit.cmd": "/opt/kinit-wrapper",
            "sasl.jaas.config": 'org.apache.kafka.common.security.scram.ScramLoginModule required username="u" '
                                'password="p";'}
    once, _ = to_librdkafka(conf)
    assert to_librdkafka(once) == (once, {})
    first = SinkConfig.build("j", conf, "/tmp/rks-unit-javaconf")
    assert SinkConfig.build("j", dict(first.kafka_conf_items), "/tmp/rks-unit-javaconf") == first


@pytest.mark.parametrize("java", ["sasl.jaas.config", "ssl.keystore.key", "ssl.keystore.password",
                                  "ssl.truststore.password", "ssl.key.password",
                                  "sasl.oauthbearer.client.credentials.client.secret"])
def test_java_settings_holding_secrets_are_secret_options(java):
    assert is_secret_option(java)
    value = "Zq9-pw" if java != "sasl.jaas.config" else \
        'org.apache.kafka.common.security.plain.PlainLoginModule required username="u" password="Zq9-pw";'
    cfg = SinkConfig.build("j", {**B, "ssl.truststore.type": "PEM", java: value}, "/tmp/rks-unit-javaconf")
    assert "Zq9-pw" not in repr(cfg) and redact({java: value}) == {java: "***"}


def test_a_pem_key_given_the_java_way_is_never_shown():
    cfg = SinkConfig.build("j", {**B, "ssl.keystore.key": "-----BEGIN PRIVATE KEY-----Zq9"}, "/tmp/rks-unit-javaconf")
    assert "Zq9" not in repr(cfg) and cfg.scrub("near -----BEGIN PRIVATE KEY-----Zq9") == "near ***"


def test_the_mapping_is_logged_by_name_only(caplog):
    with caplog.at_level(logging.INFO, logger="spark_recoverable_sink.config"):
        _pc({"buffer.memory": "33554432", "sasl.jaas.config": 'org.apache.kafka.common.security.plain.'
                                                              'PlainLoginModule required username="u" password="Pw";'})
    assert "java_settings_mapped=buffer.memory,sasl.jaas.config" in caplog.text and "Pw" not in caplog.text


# -- every entry point maps ----------------------------------------------------------------------------


def test_the_data_source_options_map():
    opts = {"name": "ds", "kafka.bootstrap.servers": "h:1", **{f"kafka.{k}": v for k, v in PRODUCTION.items()}}
    pc = parse_options(opts).config.producer_conf()
    assert {k: pc.get(k) for k in PRODUCTION_LIBRDKAFKA} == PRODUCTION_LIBRDKAFKA
    with pytest.raises(ConfigError, match="partitioner"):
        parse_options({"name": "ds", "kafka.bootstrap.servers": "h:1", "kafka.partitioner.class": "x.Y"})


def test_the_python_sink_maps():
    pc = RecoverableKafkaSink("py", {**B, **PRODUCTION}, wal_dir="/tmp/rks-unit-javaconf").config.producer_conf()
    assert {k: pc.get(k) for k in PRODUCTION_LIBRDKAFKA} == PRODUCTION_LIBRDKAFKA


def test_the_job_templates_map_for_the_sink_and_the_topic_admin():
    from spark_recoverable_sink import jobs

    kafka = jobs.KafkaSettings(bootstrap_servers="h:1", topic="t", producer_conf={
        **PRODUCTION, "sasl.jaas.config": {"env": "RKS_JAAS"}, "sasl.mechanism": "SCRAM-SHA-512"})
    env = {"RKS_JAAS": 'org.apache.kafka.common.security.scram.ScramLoginModule required username="u" password="Pw";'}
    conf = jobs.producer_conf(kafka, env)  # what ensure_topic's admin client and the sink get
    assert conf["sasl.username"] == "u" and "sasl.jaas.config" not in conf and conf["message.max.bytes"] == "2097152"


def test_rks_kafka_conf_files_map_and_scrub(tmp_path, monkeypatch):
    monkeypatch.setenv("RKS_JAAS", 'org.apache.kafka.common.security.scram.ScramLoginModule required '
                                   'username="u" password="Zq9-pw";')
    path = tmp_path / "kafka.json"
    path.write_text(json.dumps({**B, "buffer.memory": 1048576, "sasl.mechanism": "SCRAM-SHA-512",
                                "sasl.jaas.config": {"env": "RKS_JAAS"}}))
    conf = load_kafka_conf(str(path))
    assert build_config("ops", conf, str(tmp_path)).producer_conf()["queue.buffering.max.kbytes"] == "1024"
    with pytest.raises(OpsError) as ei:  # librdkafka refuses a value; the error is scrubbed with the file's conf
        build_config("ops", {**conf, "linger.ms": "Zq9-pw"}, str(tmp_path))
    assert "Zq9-pw" not in str(ei.value) and "linger.ms" in str(ei.value)


@pytest.mark.parametrize("conf, named", [
    ({"buffer.memory": "1048576", "max.request.size": "5242880"}, "buffer.memory"),
    ({"queue.buffering.max.kbytes": "1024", "message.max.bytes": "5242880"}, "queue.buffering.max.kbytes"),
])
def test_a_queue_smaller_than_the_largest_record_is_refused_at_build(conf, named, tmp_path):
    """librdkafka answers QUEUE_FULL for a record larger than its whole queue, empty or not: a local error the sink
    would retry for ever (Java fails such a record at once). Refused when the sink is built, naming the setting."""
    with pytest.raises(ConfigError, match=rf"{named}.*smaller than the largest record"):
        SinkConfig.build("q", {"bootstrap.servers": "localhost:9092", **conf}, str(tmp_path), topic="t")
    SinkConfig.build("q", {"bootstrap.servers": "localhost:9092", "buffer.memory": "8388608",
                           "max.request.size": "5242880"}, str(tmp_path), topic="t")  # a queue that holds it
