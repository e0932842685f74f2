"""Tier 2: authentication as users configure it, on the real broker's secure listeners (``secure_broker``).

SASL PLAIN and SCRAM-SHA-512 with a password, OAUTHBEARER with RS256 JWTs
made by a token provider named by reference (checked by Kafka's own
validator against the session's JWKS), TLS with the session's CA as a value
or a file. Right credentials deliver every record. Wrong ones are a clear
error on first contact and lose nothing: the records wait in the WAL and are
delivered once the credentials are right. No secret (password, token,
private key) shows in a report, an error, a log record or the client's own
stderr, even with librdkafka's ``debug=security``. Both delivery engines.
"""

from __future__ import annotations

import json
import logging
import os
import uuid
from typing import Any, Iterator

import pytest
from click.testing import CliRunner

from spark_recoverable_sink.config import SinkConfig
from spark_recoverable_sink.delivery.contact import first_contact_failure
from spark_recoverable_sink.errors import ProducerError
from spark_recoverable_sink.native import library
from spark_recoverable_sink.ops.cli import main
from spark_recoverable_sink.report import TaskReport
from spark_recoverable_sink.task import runtime
from spark_recoverable_sink.task.writer import write_partition

from ..kafka_helpers import create_topic, read_topic
from ..secure_broker import SecureBroker
from ..token_provider import TOKEN
from .rows import batches

pytestmark = pytest.mark.broker

ENGINES = ["python", pytest.param("native", marks=pytest.mark.skipif(
    not library.available(), reason=f"the native extension is not built here: {library.why_unavailable()}"))]
JWT = "eyJ"  # how every JWT starts (base64url of '{"'): none may show anywhere


def _close_now() -> None:
    """Close this process's runtimes without a flush (as a configuration change closes one): refused credentials
    leave records no flush can deliver, and the tier's own cleanup would wait 5 s for each."""
    with runtime._RUNTIMES_LOCK:
        held = list(runtime._RUNTIMES.values())
        runtime._RUNTIMES.clear()
    for rt in held:
        rt.close(flush_s=0.0)


@pytest.fixture(autouse=True)
def _closed_at_once() -> Iterator[None]:
    yield
    _close_now()


@pytest.fixture
def stopic(secure_broker: SecureBroker) -> str:
    name = f"auth-{uuid.uuid4().hex[:10]}"
    create_topic(secure_broker.bootstrap, name, partitions=3)
    return name


def _cfg(tmp_path: Any, engine: str, topic: str, conf: dict[str, Any], ack_timeout_s: float = 30) -> SinkConfig:
    return SinkConfig.build(f"auth-{engine}", conf, str(tmp_path / "wal"), topic=topic, ack_timeout_s=ack_timeout_s,
                            delivery_engine=engine)


def _sasl(sb: SecureBroker, mechanism: str, password: str | None = None, **extra: str) -> dict[str, Any]:
    users = sb.scram_users if mechanism.startswith("SCRAM") else sb.plain_users
    ((user, right),) = users.items()
    return {"bootstrap.servers": sb.sasl_bootstrap, "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": mechanism, "sasl.username": user, "sasl.password": password or right, **extra}


def _oauth(sb: SecureBroker, provider: str, **extra: str) -> dict[str, Any]:
    return {"bootstrap.servers": sb.oauth_bootstrap, "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "OAUTHBEARER", "oauth_cb": f"tests.token_provider:{provider}", **extra}


def _write(cfg: SinkConfig, rows: int, batch: int = 0) -> TaskReport:
    return write_partition(cfg, batch, 0, 0, batches(batch, rows, 10), run="r")


def _keys(batch: int, rows: int) -> set[bytes]:
    return {f"{batch}-{i}".encode() for i in range(rows)}


def _delivered(sb: SecureBroker, topic: str, keys: set[bytes]) -> None:
    got = read_topic(sb.bootstrap, topic, expected=len(keys), timeout_s=60)
    assert {r.key for r in got.records} == keys and len(got.records) == len(keys)


def _no_secret(sb: SecureBroker, *texts: str, also: tuple[str, ...] = ()) -> None:
    blob = "\n".join(texts)
    assert JWT not in blob and TOKEN not in blob
    for secret in (*sb.secrets(), *also):
        assert secret not in blob


def _refused(rep: TaskReport, rows: int) -> None:
    """Nothing acked, every record pending in the WAL, and the driver's first-contact check fails the batch."""
    assert (rep.acked, rep.pending, rep.broker_reached) == (0, rows, 0), rep
    assert first_contact_failure([rep]) == (rows, rep.last_error)


# -- SASL PLAIN and SCRAM ----------------------------------------------------------------------------


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-512"])
@pytest.mark.parametrize("engine", ENGINES)
def test_the_right_password_delivers_every_record(secure_broker, stopic, tmp_path, engine, mechanism, caplog,
                                                  capfd):
    with caplog.at_level(logging.DEBUG):
        rep = _write(_cfg(tmp_path, engine, stopic, _sasl(secure_broker, mechanism)), 20)
    assert (rep.acked, rep.pending, rep.broker_reached, rep.last_error) == (20, 0, 1, "")
    _delivered(secure_broker, stopic, _keys(0, 20))
    _no_secret(secure_broker, str(rep.to_row()), caplog.text, *capfd.readouterr())


@pytest.mark.parametrize("engine", ENGINES)
def test_a_wrong_scram_password_is_named_an_authentication_failure_and_loses_nothing(secure_broker, stopic, tmp_path,
                                                                                    engine, caplog, capfd):
    wrong = f"wrong-{uuid.uuid4().hex}"
    bad = _cfg(tmp_path, engine, stopic, _sasl(secure_broker, "SCRAM-SHA-512", wrong, debug="security,broker"), 4)
    with caplog.at_level(logging.DEBUG):
        rep = _write(bad, 10)
        _refused(rep, 10)
        assert "SASL authentication error" in rep.last_error and "invalid credentials" in rep.last_error
        assert "SCRAM-SHA-512" in rep.last_error, rep.last_error
        # the password fixed: the records that waited in the WAL are delivered with the next batch
        good = _cfg(tmp_path, engine, stopic, _sasl(secure_broker, "SCRAM-SHA-512"))
        assert _write(good, 5, batch=1).acked == 5
    _delivered(secure_broker, stopic, _keys(0, 10) | _keys(1, 5))
    _no_secret(secure_broker, str(rep.to_row()), repr(bad), caplog.text, *capfd.readouterr(), also=(wrong,))


# -- OAUTHBEARER ---------------------------------------------------------------------------------


@pytest.mark.parametrize("engine", ENGINES)
def test_a_signed_token_made_by_the_provider_delivers(secure_broker, stopic, tmp_path, engine, caplog, capfd,
                                                      monkeypatch):
    monkeypatch.setenv("RKS_TOKEN_LOG", str(tmp_path))
    label = uuid.uuid4().hex[:12]
    conf = _oauth(secure_broker, "signed", **{"sasl.oauthbearer.config": f"label={label}"})
    with caplog.at_level(logging.DEBUG):
        rep = _write(_cfg(tmp_path, engine, stopic, conf), 10)
    assert (rep.acked, rep.pending, rep.last_error) == (10, 0, "")
    assert (tmp_path / f"call-{os.getpid()}-label{label}").exists(), "the provider was not called with its config"
    _delivered(secure_broker, stopic, _keys(0, 10))
    _no_secret(secure_broker, str(rep.to_row()), caplog.text, *capfd.readouterr())


@pytest.mark.parametrize("provider,broker_says", [("expired", "The JWT is no longer valid"),
                                                  ("forged", "invalid signature")])
@pytest.mark.parametrize("engine", ENGINES)
def test_a_token_the_broker_refuses_is_a_clear_error_and_not_shown(secure_broker, stopic, tmp_path, engine, provider,
                                                                   broker_says, caplog, capfd):
    since = secure_broker.log_offset()
    with caplog.at_level(logging.DEBUG):
        rep = _write(_cfg(tmp_path, engine, stopic, _oauth(secure_broker, provider, debug="security"), 4), 10)
    _refused(rep, 10)
    assert "SASL authentication error" in rep.last_error and "invalid_token" in rep.last_error, rep.last_error
    assert broker_says in secure_broker.log_since(since)  # refused by Kafka's validator, for that reason
    _no_secret(secure_broker, str(rep.to_row()), caplog.text, *capfd.readouterr())


def _first_error(cfg: SinkConfig, rows: int) -> str:
    """The task's last client error, or the error building the producer (confluent-kafka waits for a first token)."""
    try:
        rep = _write(cfg, rows)
    except ProducerError as exc:
        return str(exc)
    assert (rep.acked, rep.pending) == (0, rows)
    return rep.last_error


@pytest.mark.parametrize("engine", ENGINES)
def test_a_token_the_provider_says_is_expired_is_named(secure_broker, stopic, tmp_path, engine, caplog):
    with caplog.at_level(logging.DEBUG):
        said = _first_error(_cfg(tmp_path, engine, stopic, _oauth(secure_broker, "stale"), 4), 10)
    assert "tests.token_provider:stale" in said and "in the past" in said, said
    _no_secret(secure_broker, said, caplog.text)


@pytest.mark.parametrize("engine", ENGINES)
def test_a_provider_that_raises_is_named(secure_broker, stopic, tmp_path, engine):
    said = _first_error(_cfg(tmp_path, engine, stopic, _oauth(secure_broker, "broken"), 3), 10)
    assert "tests.token_provider:broken" in said and "PermissionError" in said, said


def test_the_rks_cli_replays_with_a_token_provider(secure_broker, stopic, tmp_path):
    """Records an expired token left in the WAL: ``rks replay`` with the same token fails and keeps them, with a
    signed one delivers them."""
    rep = _write(_cfg(tmp_path, "auto", stopic, _oauth(secure_broker, "expired"), 4), 10)
    _refused(rep, 10)
    _close_now()  # the writer is gone: its slot is left for the operator
    runs = []
    for provider in ("expired", "signed"):
        conf = tmp_path / f"{provider}.json"
        conf.write_text(json.dumps(_oauth(secure_broker, provider)))
        runs.append(CliRunner().invoke(main, ["replay", str(tmp_path / "wal"), "--sink", "auth-auto",
                                              "--kafka-conf", str(conf), "--timeout", "4"]))
    failed, ok = runs
    assert failed.exit_code == 1 and "10 records not delivered" in failed.stderr, failed.output
    assert "SASL authentication error" in failed.stderr, failed.stderr
    assert ok.exit_code == 0 and "delivered=10" in ok.stdout, ok.output
    _delivered(secure_broker, stopic, _keys(0, 10))
    _no_secret(secure_broker, *(r.stdout + r.stderr for r in runs))


# -- TLS ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("ca", ["ssl.ca.pem", "ssl.ca.location"])
@pytest.mark.parametrize("engine", ENGINES)
def test_tls_with_the_ca_as_a_value_or_a_file_delivers(secure_broker, stopic, tmp_path, engine, ca):
    trust = secure_broker.ca_pem if ca == "ssl.ca.pem" else secure_broker.ca_path
    conf = {"bootstrap.servers": secure_broker.ssl_bootstrap, "security.protocol": "SSL", ca: trust}
    rep = _write(_cfg(tmp_path, engine, stopic, conf), 10)
    assert (rep.acked, rep.pending, rep.last_error) == (10, 0, "")
    _delivered(secure_broker, stopic, _keys(0, 10))


@pytest.mark.parametrize("engine", ENGINES)
def test_tls_without_the_ca_is_a_certificate_verification_error(secure_broker, stopic, tmp_path, engine):
    conf = {"bootstrap.servers": secure_broker.ssl_bootstrap, "security.protocol": "SSL"}
    rep = _write(_cfg(tmp_path, engine, stopic, conf, 4), 10)
    _refused(rep, 10)
    # librdkafka adds "verify that ssl.ca.location is correctly configured" to some of its reports, not all
    assert "certificate verify failed" in rep.last_error and rep.last_error.startswith("ssl://"), rep.last_error
