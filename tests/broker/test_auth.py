"""Tier 2: a sink with an OAUTHBEARER token provider against the test broker, which speaks no SASL.

The provider is called by the process that builds the client, the error says
what failed, and the token appears in no report, error or log line; a
provider that raises is named. Both delivery engines.
"""

from __future__ import annotations

import logging
import uuid

import pytest

from spark_recoverable_sink.config import SinkConfig
from spark_recoverable_sink.errors import ProducerError
from spark_recoverable_sink.native import library
from spark_recoverable_sink.task.writer import write_partition

from ..token_provider import TOKEN
from .rows import batches

pytestmark = pytest.mark.broker

ENGINES = ["python", pytest.param("native", marks=pytest.mark.skipif(
    not library.available(), reason=f"the native extension is not built here: {library.why_unavailable()}"))]


def _cfg(bootstrap: str, tmp_path, engine: str, provider: str) -> SinkConfig:
    conf = {"bootstrap.servers": bootstrap, "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "OAUTHBEARER",
            "oauth_cb": f"tests.token_provider:{provider}"}
    return SinkConfig.build(f"auth-{engine}-{uuid.uuid4().hex[:6]}", conf, str(tmp_path), topic="t",
                            ack_timeout_s=3, delivery_engine=engine)


@pytest.mark.parametrize("engine", ENGINES)
def test_the_provider_is_called_and_a_broker_without_sasl_is_a_clear_error(broker, tmp_path, engine, caplog,
                                                                            monkeypatch):
    monkeypatch.setenv("RKS_TOKEN_LOG", str(tmp_path))
    with caplog.at_level(logging.DEBUG):
        rep = write_partition(_cfg(broker.bootstrap, tmp_path, engine, "token"), 0, 0, 0, batches(0, 10, 10), run="r")
    assert list(tmp_path.glob("call-*")), "the token provider was never called"
    assert (rep.acked, rep.pending) == (0, 10)  # nothing lost: the records wait in the WAL
    assert "SASL" in rep.last_error and "OAUTHBEARER" in rep.last_error, rep.last_error
    assert TOKEN not in str(rep.to_row()) and TOKEN not in caplog.text


@pytest.mark.parametrize("engine", ENGINES)
def test_a_provider_that_raises_is_named(broker, tmp_path, engine):
    cfg = _cfg(broker.bootstrap, tmp_path, engine, "broken")
    try:
        rep = write_partition(cfg, 0, 0, 0, batches(0, 10, 10), run="r")
        said = rep.last_error
    except ProducerError as exc:  # confluent-kafka waits for the first token when the producer is built
        said = str(exc)
    assert "tests.token_provider:broken" in said and "PermissionError" in said, said
