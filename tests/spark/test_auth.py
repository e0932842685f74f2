"""Real Spark: an OAUTHBEARER token provider given by reference is called on the executors, on every entry point."""

from __future__ import annotations

import os
import uuid

import pytest

from spark_recoverable_sink import BrokerUnreachableError, RecoverableKafkaSink

from ..token_provider import TOKEN

pytestmark = pytest.mark.spark


def _conf(bootstrap: str, label: str) -> dict:
    return {"bootstrap.servers": bootstrap, "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "OAUTHBEARER",
            "sasl.oauthbearer.config": f"label={label}", "oauth_cb": "tests.token_provider:token"}


def _callers(label: str) -> set[int]:
    where = os.environ["RKS_HOOK_DIR"]
    return {int(n.split("-")[1]) for n in os.listdir(where) if n.startswith("call-") and n.endswith(f"label{label}")}


def test_executors_call_the_provider_and_a_broker_without_sasl_fails_the_first_batch(spark, broker, topic, tmp_path):
    label = uuid.uuid4().hex[:12]
    sink = RecoverableKafkaSink(f"oauth-{label}", _conf(broker.bootstrap, label), topic=topic,
                                wal_dir=str(tmp_path / "wal"), ack_timeout_s=5)
    df = spark.range(50).selectExpr("cast(id as string) as value")
    with pytest.raises(BrokerUnreachableError) as ei:
        sink.write(df)
    assert "SASL" in str(ei.value) and TOKEN not in str(ei.value)
    report = sink.last_report
    assert report.pending == 50 and TOKEN not in str(report.as_dict())
    callers = _callers(label)
    assert callers and os.getpid() not in callers, "the token was not made on the executors"


def test_the_data_source_takes_the_provider_as_a_kafka_option(spark, broker, topic, tmp_path):
    label = uuid.uuid4().hex[:12]
    writer = spark.range(20).selectExpr("cast(id as string) as value").write.format("recoverable-kafka")
    for k, v in _conf(broker.bootstrap, label).items():
        writer = writer.option(f"kafka.{k}", v)
    with pytest.raises(Exception) as ei:
        writer.option("topic", topic).option("name", f"oauth-ds-{label}").option("wal_dir", str(tmp_path / "wal")) \
            .option("ack_timeout_s", "5").mode("append").save()
    assert "SASL" in str(ei.value) and TOKEN not in str(ei.value)
    assert _callers(label)
