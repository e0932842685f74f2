"""Tier 3: real Spark against the ``secure_broker``'s OAUTHBEARER listener (Kafka's own JWT validator).

A token provider named by reference is called on the executors (never on
the driver) on both entry points, the RS256 JWTs it signs there are what the
broker accepts, and the batch is delivered; an expired token fails the first
batch with the broker's refusal named, every record kept in the WALs, and no
token in the error or the report.
"""

from __future__ import annotations

import os
import uuid
from typing import Any

import pytest

from spark_recoverable_sink import BrokerUnreachableError, RecoverableKafkaSink

from ..kafka_helpers import create_topic, read_topic
from ..secure_broker import SecureBroker

pytestmark = pytest.mark.spark

JWT = "eyJ"  # how every JWT starts (base64url of '{"')


def _conf(sb: SecureBroker, provider: str, label: str) -> dict[str, Any]:
    return {"bootstrap.servers": sb.oauth_bootstrap, "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "OAUTHBEARER", "sasl.oauthbearer.config": f"label={label}",
            "oauth_cb": f"tests.token_provider:{provider}"}


def _topic(sb: SecureBroker) -> str:
    name = f"auth-{uuid.uuid4().hex[:10]}"
    create_topic(sb.bootstrap, name, partitions=3)
    return name


def _callers(label: str) -> set[int]:
    """Pids of the processes that called the provider for this label (tests/token_provider.py records them)."""
    where = os.environ["RKS_HOOK_DIR"]
    return {int(n.split("-")[1]) for n in os.listdir(where) if n.startswith("call-") and n.endswith(f"label{label}")}


def _values(sb: SecureBroker, topic: str, n: int) -> list[bytes]:
    return sorted(r.value for r in read_topic(sb.bootstrap, topic, expected=n, timeout_s=60).records)


def test_executors_sign_the_tokens_and_the_batch_is_delivered(spark, secure_broker, tmp_path):
    label, topic = uuid.uuid4().hex[:12], _topic(secure_broker)
    sink = RecoverableKafkaSink(f"oauth-{label}", _conf(secure_broker, "signed", label), topic=topic,
                                wal_dir=str(tmp_path / "wal"), ack_timeout_s=30)
    sink.write(spark.range(50).selectExpr("cast(id as string) as value"))
    report = sink.last_report
    assert (report.acked, report.pending) == (50, 0), report
    assert _values(secure_broker, topic, 50) == sorted(str(i).encode() for i in range(50))
    callers = _callers(label)
    assert callers and os.getpid() not in callers, "the token was not made on the executors"


def test_the_data_source_takes_the_provider_as_a_kafka_option(spark, secure_broker, tmp_path):
    label, topic = uuid.uuid4().hex[:12], _topic(secure_broker)
    writer = spark.range(20).selectExpr("cast(id as string) as value").write.format("recoverable-kafka")
    for k, v in _conf(secure_broker, "signed", label).items():
        writer = writer.option(f"kafka.{k}", v)
    writer.option("topic", topic).option("name", f"oauth-ds-{label}").option("wal_dir", str(tmp_path / "wal")) \
        .option("ack_timeout_s", "30").mode("append").save()
    assert _values(secure_broker, topic, 20) == sorted(str(i).encode() for i in range(20))
    callers = _callers(label)
    assert callers and os.getpid() not in callers


def test_an_expired_token_fails_the_first_batch_clearly(spark, secure_broker, tmp_path):
    label, topic = uuid.uuid4().hex[:12], _topic(secure_broker)
    sink = RecoverableKafkaSink(f"oauth-{label}", _conf(secure_broker, "expired", label), topic=topic,
                                wal_dir=str(tmp_path / "wal"), ack_timeout_s=4)
    with pytest.raises(BrokerUnreachableError) as ei:
        sink.write(spark.range(50).selectExpr("cast(id as string) as value"))
    said = str(ei.value)
    assert "SASL authentication error" in said and "invalid_token" in said, said
    assert ei.value.pending == 50 and sink.last_report.pending == 50  # nothing dropped: in the executors' WALs
    blob = said + str(sink.last_report.as_dict()) + repr(sink.config)
    assert JWT not in blob and not any(s in blob for s in secure_broker.secrets())
    assert _callers(label) - {os.getpid()}, "the token was not made on the executors"
