"""Tier 1: token providers by reference, certificates as values, files checked where they are used."""

from __future__ import annotations

import socket
import subprocess

import pytest

from spark_recoverable_sink.auth import check_files, load_callable, with_callbacks
from spark_recoverable_sink.config import SinkConfig
from spark_recoverable_sink.driver.options import parse_options
from spark_recoverable_sink.errors import ConfigError

BOOT = {"bootstrap.servers": "127.0.0.1:1"}


def _build(conf, **kw):
    return SinkConfig.build("auth", {**BOOT, **conf}, "/tmp/unused-auth", topic="t", **kw)


def test_a_token_provider_is_named_by_reference_and_imported_where_clients_are_built():
    cfg = _build({"security.protocol": "SASL_SSL", "sasl.mechanism": "OAUTHBEARER",
                  "oauth_cb": "tests.token_provider:token"})
    cb = cfg.producer_conf()["oauth_cb"]
    assert callable(cb) and cb("")[0] == "tok-7f3c9e1b2a-never-printed"
    assert "tests.token_provider:token" in dict(cfg.kafka_conf_items).values()  # shipped as a value
    # the data source takes the same option under kafka.
    opts = parse_options({"name": "auth", "kafka.bootstrap.servers": "127.0.0.1:1", "topic": "t",
                          "kafka.sasl.mechanism": "OAUTHBEARER", "kafka.oauth_cb": "tests.token_provider:token"})
    assert callable(opts.config.producer_conf()["oauth_cb"])


@pytest.mark.parametrize("ref,says", [
    ("tests.no_such_module:token", "cannot be imported"),
    ("tests.token_provider:nothing", "has no nothing"),
    ("tests.token_provider:NOT_CALLABLE", "is not callable"),
    ("not a reference", "package.module:function"),
])
def test_a_provider_that_cannot_be_loaded_is_named_before_any_task_runs(ref, says):
    with pytest.raises(ConfigError) as ei:
        _build({"oauth_cb": ref})
    assert ei.value.option == "kafka_conf['oauth_cb']" and says in str(ei.value)


def test_a_callable_is_refused_with_what_to_give_instead():
    with pytest.raises(ConfigError, match="package.module:function"):
        _build({"oauth_cb": lambda cfg: ("t", 0)})


def test_a_provider_that_raises_is_named_without_what_it_would_return():
    cb = with_callbacks({"oauth_cb": "tests.token_provider:broken"})["oauth_cb"]
    with pytest.raises(RuntimeError) as ei:
        cb("")
    assert "tests.token_provider:broken" in str(ei.value) and "PermissionError" in str(ei.value)
    assert load_callable("oauth_cb", "tests.token_provider:token") is load_callable("oauth_cb",
                                                                                    "tests.token_provider:token")


def test_builtin_oidc_passes_the_first_run_checks_and_its_secret_is_scrubbed():
    secret = "oidc-client-secret-5d1e"
    cfg = _build({"security.protocol": "SASL_SSL", "sasl.mechanism": "OAUTHBEARER",
                  "sasl.oauthbearer.method": "oidc", "sasl.oauthbearer.client.id": "sink",
                  "sasl.oauthbearer.client.secret": secret,
                  "sasl.oauthbearer.token.endpoint.url": "https://login.example.invalid/oauth2/token"})
    assert secret not in repr(cfg) and secret not in cfg.scrub(f"error with {secret}")


def _pem(tmp_path) -> tuple[str, str]:
    key, cert = tmp_path / "k.pem", tmp_path / "c.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out",
                    str(cert), "-days", "2", "-subj", "/CN=rks-test"], check=True, capture_output=True)
    return key.read_text(), cert.read_text()


def test_certificates_as_values_pass_the_driver_check_and_are_scrubbed(tmp_path):
    key, cert = _pem(tmp_path)
    cfg = _build({"security.protocol": "SSL", "ssl.ca.pem": cert, "ssl.certificate.pem": cert, "ssl.key.pem": key})
    body = key.splitlines()[1]
    assert body not in repr(cfg) and cert.splitlines()[1] not in repr(cfg)
    assert body not in cfg.scrub(f"librdkafka said: {key}")
    check_files(cfg.producer_conf())  # nothing to find on disk


def test_a_certificate_file_missing_on_this_host_is_named_with_the_host_and_the_pem_option():
    with pytest.raises(ConfigError) as ei:
        check_files({"ssl.ca.location": "/nonexistent/ca.pem"})
    text = str(ei.value)
    assert "/nonexistent/ca.pem" in text and socket.gethostname() in text and "ssl.ca.pem" in text
    check_files({"ssl.ca.location": "probe"})  # librdkafka's own lookup of the system's CAs
