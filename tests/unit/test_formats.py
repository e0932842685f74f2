"""Tier 1: Schema Registry formats without Spark or a registry: arguments, subjects, errors, secrets."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from spark_recoverable_sink import (
    Avro,
    ConfigError,
    JsonSchema,
    RegistryAuthError,
    RegistryError,
    RegistryUnavailableError,
    SchemaIncompatibleError,
)
from spark_recoverable_sink.driver import encode
from spark_recoverable_sink.driver.registry import RegistryClient

AVRO = json.dumps({"type": "record", "name": "Order", "namespace": "shop", "fields": [{"name": "id", "type": "long"}]})
REG = {"url": "http://127.0.0.1:1/apis/ccompat/v7"}


def test_arguments_are_checked_when_the_format_is_made():
    with pytest.raises(ConfigError, match="'schema'.*not JSON"):
        Avro("{nope", REG)
    with pytest.raises(ConfigError, match="'registry'"):
        Avro(AVRO, {"basic.auth.user.info": "a:b"})
    with pytest.raises(ConfigError, match="'strategy'"):
        Avro(AVRO, REG, strategy="topicname")
    with pytest.raises(ConfigError, match="named Avro schema"):
        Avro('"string"', REG, strategy="record")
    with pytest.raises(ConfigError, match="'title'"):
        JsonSchema('{"type": "object"}', REG, strategy="topic_record")
    with pytest.raises(ConfigError, match="auto_register"):
        Avro(AVRO, REG, auto_register="yes")


def test_subjects_by_strategy_and_a_topic_strategy_without_one_topic_is_refused():
    assert Avro(AVRO, REG).subject_for("orders", "value") == "orders-value"
    assert Avro(AVRO, REG).subject_for("orders", "key") == "orders-key"
    assert Avro(AVRO, REG, strategy="record").subject_for(None, "value") == "shop.Order"
    assert Avro(AVRO, REG, strategy="topic_record").subject_for("orders", "value") == "orders-shop.Order"
    assert JsonSchema('{"title": "T"}', REG, strategy="record").subject_for(None, "value") == "T"
    assert Avro(AVRO, REG, subject="fixed").subject_for(None, "value") == "fixed"
    with pytest.raises(ConfigError, match="no single topic"):
        Avro(AVRO, REG).subject_for(None, "value")


def test_env_values_are_read_on_the_driver_and_a_missing_one_is_named():
    fmt = Avro(AVRO, {**REG, "basic.auth.user.info": {"env": "SR_AUTH"}})
    client = fmt.client({"SR_AUTH": "u:s3cr3t-pw"})
    assert client.scrub("auth u:s3cr3t-pw failed") == "auth *** failed"
    with pytest.raises(ConfigError, match="SR_AUTH is not set"):
        fmt.client({})


def test_reprs_show_no_credentials():
    fmt = Avro(AVRO, {"url": "http://user:pw-in-url@h:1/x", "basic.auth.user.info": "user:pw-in-info"})
    shown = repr(fmt) + str(fmt)
    assert "pw-in-url" not in shown and "pw-in-info" not in shown and "***@h:1" in shown


class _Refused(Exception):
    def __init__(self, status, code, message):
        super().__init__(message)
        self.http_status_code, self.error_code, self.error_message = status, code, message


@pytest.mark.parametrize("status, kind", [(401, RegistryAuthError), (403, RegistryAuthError),
                                          (409, SchemaIncompatibleError), (503, RegistryUnavailableError),
                                          (None, RegistryUnavailableError), (422, RegistryError)])
def test_registry_failures_are_typed_and_scrubbed(status, kind):
    client = RegistryClient({"url": "http://u:url-secret@h:1/x", "basic.auth.user.info": "u:info-secret"})

    def fail(*_a, **_k):
        raise _Refused(status, 40301, "refused for u:info-secret at http://u:url-secret@h:1/x")

    client._client = SimpleNamespace(register_schema=fail, lookup_schema=fail)
    with pytest.raises(kind) as ei:
        client.schema_id(f"s-{status}", AVRO, "AVRO", auto_register=True)
    e = ei.value
    assert type(e) is kind and e.subject == f"s-{status}" and e.status == status
    assert "info-secret" not in str(e) and "url-secret" not in str(e)
    assert e.__cause__ is None and e.__context__ is None  # the original holds the credentials: not kept


def test_a_missing_spark_avro_package_is_named_with_its_coordinate(monkeypatch):
    class JavaPackage:  # what py4j gives for a class that is not on the classpath
        pass

    jvm = SimpleNamespace(**{"org.apache.spark.sql.avro.CatalystDataToAvro": JavaPackage()})
    df = SimpleNamespace(sparkSession=SimpleNamespace(sparkContext=SimpleNamespace(_jvm=jvm), version="4.2.0"))
    monkeypatch.setattr(encode, "_classic", lambda spark: True)
    with pytest.raises(ConfigError, match="--packages org.apache.spark:spark-avro_2.13:4.2.0") as ei:
        encode._check_avro(df, Avro(AVRO, REG), "k", None, "key")
    assert ei.value.option == "key_format"


def test_a_url_with_credentials_is_cut_before_the_client_sees_it_and_the_id_cache_is_per_registry():
    a = RegistryClient({"url": "http://us%40r:p%40ss@h:1/x"})
    assert a._conf == {"url": "http://h:1/x", "basic.auth.user.info": "us@r:p@ss", "timeout": 30}
    assert a.scrub("http://us%40r:p%40ss@h:1/x and p@ss") == "http://***@h:1/x and ***"
    b = RegistryClient({"url": "http://h:1/x", "basic.auth.user.info": "other:key"})
    calls = []

    def register(subject, schema):
        calls.append(subject)
        return 7

    for client in (a, b):
        client._client = SimpleNamespace(register_schema=register)
        assert client.schema_id("same-subject", AVRO, "AVRO", True) == 7
    assert calls == ["same-subject", "same-subject"]  # same URL, other credentials: asked again
    assert a.schema_id("same-subject", AVRO, "AVRO", True) == 7 and len(calls) == 2  # cached for a


def test_numbers_in_the_registry_settings_stay_numbers():
    client = Avro(AVRO, {**REG, "timeout": 5, "max.retries": 2}).client({})
    assert client._conf["timeout"] == 5 and client._conf["max.retries"] == 2


def test_job_templates_take_a_format_with_its_secrets_from_the_environment_only(tmp_path, monkeypatch):
    from spark_recoverable_sink.jobs.resolve import registry_format
    from spark_recoverable_sink.jobs.settings import SettingsError, check_format

    schema = tmp_path / "order.avsc"
    schema.write_text(AVRO)
    good = {"type": "avro", "schema_file": str(schema), "strategy": "record",
            "registry": {**REG, "basic.auth.user.info": {"env": "SR_AUTH"}}}
    check_format("sink.value_format", good)
    monkeypatch.delenv("SR_AUTH", raising=False)
    with pytest.raises(SettingsError, match=r"sink.value_format.registry\['basic.auth.user.info'\]: environment "
                                            "variable SR_AUTH is not set"):
        registry_format("sink.value_format", good)  # when the job starts, not at its first batch
    monkeypatch.setenv("SR_AUTH", "u:p")
    fmt = registry_format("sink.value_format", good)
    assert isinstance(fmt, Avro) and fmt.subject_for(None, "value") == "shop.Order"
    assert fmt.client({"SR_AUTH": "u:p"}).scrub("u:p") == "***"
    with pytest.raises(SettingsError, match=r"registry\['basic.auth.user.info'\]: holds a secret") as ei:
        check_format("sink.value_format", {**good, "registry": {**REG, "basic.auth.user.info": "u:literal-pw"}})
    assert "literal-pw" not in str(ei.value)
    with pytest.raises(SettingsError, match="exactly one of schema"):
        check_format("sink.key_format", {**good, "schema": AVRO})
    with pytest.raises(SettingsError, match="sink.key_format.type"):
        check_format("sink.key_format", {**good, "type": "protobuf"})
    with pytest.raises(SettingsError, match="sink.value_format.strategy"):
        registry_format("sink.value_format", {**good, "strategy": "nope"})


@pytest.mark.parametrize("url", ["http://a:1/x,http://u:list-pw@b:1/x", "u:list-pw@b:1", "a:1,u:list-pw@b:1"])
def test_credentials_in_any_url_of_a_list_or_without_a_scheme_never_reach_the_client_or_a_repr(url):
    from spark_recoverable_sink.jobs.settings import SettingsError, check_format

    client = RegistryClient({"url": url})
    assert "list-pw" not in client._conf["url"] and client._conf["basic.auth.user.info"] == "u:list-pw"
    assert "list-pw" not in repr(Avro(AVRO, {"url": url})) and "list-pw" not in client.url
    assert "list-pw" not in client.scrub(f"Invalid url {url}")
    with pytest.raises(SettingsError, match="holds credentials") as ei:
        check_format("sink.value_format", {"type": "avro", "schema": AVRO, "registry": {"url": url}})
    assert "list-pw" not in str(ei.value)


def test_urls_with_different_credentials_are_refused_naming_none():
    with pytest.raises(ConfigError, match="different user:password") as ei:
        RegistryClient({"url": "http://u:pw-one@a:1,http://v:pw-two@b:1"})
    assert "pw-one" not in str(ei.value) and "pw-two" not in str(ei.value)


def test_a_bearer_credentials_source_is_a_setting_not_a_secret():
    from spark_recoverable_sink.jobs.settings import check_format

    check_format("sink.value_format", {"type": "avro", "schema": AVRO, "registry": {
        **REG, "bearer.auth.credentials.source": "STATIC_TOKEN", "bearer.auth.token": {"env": "SR_TOKEN"}}})


def test_an_answer_that_is_not_json_is_named_and_the_registrys_clean_answer_is_kept_as_the_cause():
    from confluent_kafka.schema_registry.error import SchemaRegistryError

    client = RegistryClient({"url": "http://h:1/x", "basic.auth.user.info": "u:info-secret"})

    def html(*_a, **_k):
        json.loads("<html>login</html>")

    client._client = SimpleNamespace(register_schema=html)
    with pytest.raises(RegistryError, match="the answer is not JSON") as ei:
        client.schema_id("s-html", AVRO, "AVRO", auto_register=True)
    assert type(ei.value) is RegistryError
    for said, kept in (("incompatible field id", True), ("rejected u:info-secret", False)):
        def refuse(*_a, said=said, **_k):
            raise SchemaRegistryError(409, 409, said)

        client._client = SimpleNamespace(register_schema=refuse)
        with pytest.raises(SchemaIncompatibleError) as ei:
            client.schema_id(f"s-{kept}", AVRO, "AVRO", auto_register=True)
        assert (ei.value.__cause__ is not None) is kept and "info-secret" not in str(ei.value)
        assert ei.value.__context__ is None or ei.value.__context__ is ei.value.__cause__


def test_a_registry_that_never_answers_cannot_hold_the_driver_forever():
    # confluent-kafka's client waits forever by default; the sink bounds every request (and the client retries a
    # timed-out one, then the sink raises RegistryUnavailableError), unless the settings give their own timeout.
    from spark_recoverable_sink.driver.registry import DEFAULT_TIMEOUT_S

    assert RegistryClient({"url": "http://127.0.0.1:1"})._get()._rest_client.timeout == DEFAULT_TIMEOUT_S
    assert RegistryClient({"url": "http://127.0.0.1:1", "timeout": 5})._get()._rest_client.timeout == 5


def test_a_registry_request_that_times_out_is_unavailable_not_a_refusal():
    import socket
    import threading

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)  # takes connections, never answers: a hung registry
    held: list = []
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(listener.accept()[0])
            except OSError:
                continue

    t = threading.Thread(target=accept, daemon=True)
    t.start()
    try:
        client = RegistryClient({"url": f"http://127.0.0.1:{listener.getsockname()[1]}", "timeout": 0.3,
                                 "max.retries": 1})
        with pytest.raises(RegistryUnavailableError, match="no answer"):
            client.schema_id("s-value", '{"type": "string"}', "AVRO", auto_register=True)
    finally:
        stop.set()
        t.join(5)
        listener.close()
        for c in held:
            c.close()
