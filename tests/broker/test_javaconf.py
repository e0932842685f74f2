"""Tier 2: a ``format("kafka")`` job's Java producer settings, as given, on the real broker.

The settings a production job sets (``tests/java_settings.py``: acks, linger.ms,
batch.size, compression.type, max.request.size, retries, delivery.timeout.ms,
max.in.flight.requests.per.connection, enable.idempotence, request.timeout.ms, buffer.memory)
through ``kafka_conf`` and through the data source's ``kafka.*`` options deliver every record;
``sasl.jaas.config`` authenticates on the secure broker's SCRAM and PLAIN listener (also
exactly-once, whose lane producers, marker consumer and admin client are built from the mapped
configuration), a wrong password in it is an authentication error that shows it nowhere, and
``rks replay --kafka-conf`` with a JAAS string delivers what that left in the WAL; a PEM truststore
given the Java way verifies the broker's TLS certificate. Both delivery engines.
"""

from __future__ import annotations

import json
import logging
import uuid
from typing import Any, Iterator

import pytest
from click.testing import CliRunner

from spark_recoverable_sink.config import SinkConfig
from spark_recoverable_sink.delivery.contact import first_contact_failure
from spark_recoverable_sink.delivery.exactly_once.marker_reads import lane_markers
from spark_recoverable_sink.driver.options import parse_options
from spark_recoverable_sink.native import library
from spark_recoverable_sink.ops.cli import main
from spark_recoverable_sink.report import TaskReport
from spark_recoverable_sink.task import runtime
from spark_recoverable_sink.task.writer import write_partition

from ..kafka_helpers import create_topic, read_topic
from ..secure_broker import SecureBroker
from ..java_settings import PRODUCTION, PRODUCTION_LIBRDKAFKA
from .rows import batches

pytestmark = pytest.mark.broker

ENGINES = ["python", pytest.param("native", marks=pytest.mark.skipif(
    not library.available(), reason=f"the native extension is not built here: {library.why_unavailable()}"))]
SCRAM = "org.apache.kafka.common.security.scram.ScramLoginModule"
PLAIN = "org.apache.kafka.common.security.plain.PlainLoginModule"


def _close_now() -> None:
    """Close this process's runtimes without a flush: records refused credentials left cannot be flushed."""
    with runtime._RUNTIMES_LOCK:
        held = list(runtime._RUNTIMES.values())
        runtime._RUNTIMES.clear()
    for rt in held:
        rt.close(flush_s=0.0)


@pytest.fixture(autouse=True)
def _closed_at_once() -> Iterator[None]:
    yield
    _close_now()


def _write(cfg: SinkConfig, rows: int, batch: int = 0, size: int = 10) -> TaskReport:
    return write_partition(cfg, batch, 0, 0, batches(batch, rows, size), run="r")


def _keys(batch: int, rows: int) -> set[bytes]:
    return {f"{batch}-{i}".encode() for i in range(rows)}


def _delivered(bootstrap: str, topic: str, keys: set[bytes], isolation: str = "read_uncommitted") -> None:
    got = read_topic(bootstrap, topic, expected=len(keys), timeout_s=60, isolation=isolation)
    assert {r.key for r in got.records} == keys and len(got.records) == len(keys)


# -- a production job's settings ------------------------------------------------------------------------


@pytest.mark.parametrize("entry", ["kafka_conf", "data source options"])
@pytest.mark.parametrize("engine", ENGINES)
def test_a_production_job_s_java_settings_deliver_every_record(broker, topic, tmp_path, engine, entry):
    wal = str(tmp_path / "wal")
    if entry == "kafka_conf":
        cfg = SinkConfig.build(f"java-{engine}", {"bootstrap.servers": broker.bootstrap, **PRODUCTION}, wal,
                               topic=topic, delivery_engine=engine)
    else:  # Spark lower-cases option keys and gives every value as a string
        cfg = parse_options({"name": f"java-{engine}", "kafka.bootstrap.servers": broker.bootstrap, "topic": topic,
                             "wal_dir": wal, "delivery_engine": engine,
                             **{f"kafka.{k}": v for k, v in PRODUCTION.items()}}).config
    pc = cfg.producer_conf()
    assert {k: pc[k] for k in PRODUCTION_LIBRDKAFKA} == PRODUCTION_LIBRDKAFKA
    rep = _write(cfg, 3000, size=500)  # 1.5 MB through lz4, well within max.request.size
    assert (rep.rows, rep.acked, rep.pending, rep.dead_lettered, rep.last_error) == (3000, 3000, 0, 0, "")
    _delivered(broker.bootstrap, topic, _keys(0, 3000))


# -- sasl.jaas.config on the secure broker --------------------------------------------------------------


@pytest.fixture
def stopic(secure_broker: SecureBroker) -> str:
    name = f"javaconf-{uuid.uuid4().hex[:10]}"
    create_topic(secure_broker.bootstrap, name, partitions=3)
    return name


def _jaas(sb: SecureBroker, module: str, password: str | None = None, shaded: bool = False) -> dict[str, Any]:
    """How a Spark job authenticates: the Java client's JAAS string, the mechanism for SCRAM only."""
    users = sb.scram_users if module == SCRAM else sb.plain_users
    ((user, right),) = users.items()
    jaas = f'{"kafkashaded." if shaded else ""}{module} required username="{user}" password="{password or right}";'
    conf = {"bootstrap.servers": sb.sasl_bootstrap, "security.protocol": "SASL_PLAINTEXT", "sasl.jaas.config": jaas}
    return {**conf, "sasl.mechanism": "SCRAM-SHA-512"} if module == SCRAM else conf


def _cfg(tmp_path: Any, engine: str, topic: str, conf: dict[str, Any], **kw: Any) -> SinkConfig:
    return SinkConfig.build(f"jaas-{engine}", conf, str(tmp_path / "wal"), topic=topic, delivery_engine=engine, **kw)


def _no_secret(sb: SecureBroker, *texts: str, also: tuple[str, ...] = ()) -> None:
    blob = "\n".join(texts)
    for secret in (*sb.secrets(), *also):
        assert secret not in blob


@pytest.mark.parametrize("module,shaded", [(SCRAM, True), (SCRAM, False), (PLAIN, False)])
@pytest.mark.parametrize("engine", ENGINES)
def test_a_jaas_string_authenticates_and_delivers(secure_broker, stopic, tmp_path, engine, module, shaded, caplog,
                                                  capfd):
    conf = {**_jaas(secure_broker, module, shaded=shaded), **PRODUCTION}
    with caplog.at_level(logging.DEBUG):
        cfg = _cfg(tmp_path, engine, stopic, conf)
        rep = _write(cfg, 200)
    assert (rep.acked, rep.pending, rep.broker_reached, rep.last_error) == (200, 0, 1, "")
    _delivered(secure_broker.bootstrap, stopic, _keys(0, 200))
    _no_secret(secure_broker, str(rep.to_row()), repr(cfg), caplog.text, *capfd.readouterr(),
               also=(conf["sasl.jaas.config"],))


@pytest.mark.parametrize("engine", ENGINES)
def test_a_wrong_password_in_the_jaas_string_is_an_authentication_error_shown_nowhere(secure_broker, stopic, tmp_path,
                                                                                     engine, caplog, capfd):
    wrong = f"wrong-{uuid.uuid4().hex}"
    conf = {**_jaas(secure_broker, SCRAM, wrong, shaded=True), "debug": "security,broker"}
    with caplog.at_level(logging.DEBUG):
        bad = _cfg(tmp_path, engine, stopic, conf, ack_timeout_s=4)
        rep = _write(bad, 10)
        assert (rep.acked, rep.pending, rep.broker_reached) == (0, 10, 0), rep
        assert first_contact_failure([rep]) == (10, rep.last_error)
        assert "SASL authentication error" in rep.last_error and "invalid credentials" in rep.last_error
        assert "SCRAM-SHA-512" in rep.last_error, rep.last_error
        good = _cfg(tmp_path, engine, stopic, _jaas(secure_broker, SCRAM, shaded=True))
        assert _write(good, 5, batch=1).acked == 5  # the records that waited in the WAL go with the next batch
    _delivered(secure_broker.bootstrap, stopic, _keys(0, 10) | _keys(1, 5))
    _no_secret(secure_broker, str(rep.to_row()), repr(bad), rep.last_error, caplog.text, *capfd.readouterr(),
               also=(wrong, conf["sasl.jaas.config"]))


def test_exactly_once_with_a_jaas_string_commits_its_units(secure_broker, stopic, tmp_path):
    """Lane producers, the marker consumer and the admin client all authenticate with the mapped settings."""
    conf = {**_jaas(secure_broker, SCRAM), **PRODUCTION, "transaction.timeout.ms": "120000"}  # >= delivery.timeout
    cfg = _cfg(tmp_path, "auto", stopic, conf, guarantee="exactly_once", ack_timeout_s=30)
    for p in (0, 1):
        rep = write_partition(cfg, 0, p, 0, batches(p, 300, 50), run="r")
        assert (rep.acked, rep.pending) == (300, 0), rep
    again = write_partition(cfg, 0, 0, 1, batches(0, 300, 50), run="r")  # the marker proves it committed
    assert (again.acked, again.skipped) == (0, 300)
    assert lane_markers(cfg, "r", [0, 1])[1].batch == 0
    _delivered(secure_broker.bootstrap, stopic, _keys(0, 300) | _keys(1, 300), isolation="read_committed")


def test_rks_replay_takes_a_jaas_string_in_its_kafka_conf(secure_broker, stopic, tmp_path):
    wrong = f"wrong-{uuid.uuid4().hex}"
    rep = _write(_cfg(tmp_path, "auto", stopic, _jaas(secure_broker, SCRAM, wrong), ack_timeout_s=4), 10)
    assert (rep.acked, rep.pending) == (0, 10)
    _close_now()  # the writer is gone: its slot is left for the operator
    runs = []
    for password in (wrong, None):
        path = tmp_path / f"kafka-{len(runs)}.json"
        path.write_text(json.dumps({**_jaas(secure_broker, SCRAM, password), "max.request.size": 2097152}))
        runs.append(CliRunner().invoke(main, ["replay", str(tmp_path / "wal"), "--sink", "jaas-auto",
                                              "--kafka-conf", str(path), "--timeout", "4"]))
    failed, ok = runs
    assert failed.exit_code == 1 and "SASL authentication error" in failed.stderr, failed.output
    assert ok.exit_code == 0 and "delivered=10" in ok.stdout, ok.output
    _delivered(secure_broker.bootstrap, stopic, _keys(0, 10))
    _no_secret(secure_broker, *(r.stdout + r.stderr for r in runs), also=(wrong,))


# -- TLS with the Java client's truststore settings ------------------------------------------------------


@pytest.mark.parametrize("how", ["ssl.truststore.location", "ssl.truststore.certificates"])
@pytest.mark.parametrize("engine", ENGINES)
def test_a_pem_truststore_given_the_java_way_verifies_the_broker(secure_broker, stopic, tmp_path, engine, how):
    trust = secure_broker.ca_path if how == "ssl.truststore.location" else secure_broker.ca_pem
    conf = {"bootstrap.servers": secure_broker.ssl_bootstrap, "security.protocol": "SSL",
            "ssl.truststore.type": "PEM", how: trust, "ssl.endpoint.identification.algorithm": "https"}
    rep = _write(_cfg(tmp_path, engine, stopic, conf), 10)
    assert (rep.acked, rep.pending, rep.last_error) == (10, 0, "")
    _delivered(secure_broker.bootstrap, stopic, _keys(0, 10))
