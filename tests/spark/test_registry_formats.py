"""Tier 3: Schema Registry formats on real Spark, the real broker and a real registry server (Apicurio Registry).

Records the sink wrote are read back with confluent-kafka's own ``AvroDeserializer`` /
``JSONDeserializer`` (which look the schema up by the id each record carries) and must equal the
input. A registry that does not answer, refused credentials, an incompatible schema and a struct
that does not fit the schema: each a clear error before any record is written, no secret shown.
"""

from __future__ import annotations

import json
import logging
import os
import uuid

import pytest
from pyspark.sql import functions as F

from spark_recoverable_sink import jobs
from spark_recoverable_sink import (
    Avro,
    JsonSchema,
    RecoverableKafkaSink,
    RegistryAuthError,
    RegistryUnavailableError,
    SchemaError,
    SchemaIncompatibleError,
)

from ..job_files import load_job
from ..kafka_helpers import create_topic, read_topic
from ..registry_reads import decode_values

pytestmark = pytest.mark.spark

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

ORDER_V1 = {"type": "record", "name": "Order", "namespace": "shop", "fields": [
    {"name": "id", "type": "long"}, {"name": "item", "type": "string"},
    {"name": "price", "type": ["null", "double"], "default": None}]}
ORDER_V2 = {**ORDER_V1, "fields": ORDER_V1["fields"] + [{"name": "note", "type": "string", "default": ""}]}
ORDER_BAD = {**ORDER_V1, "fields": [{"name": "id", "type": "string"}] + ORDER_V1["fields"][1:]}
KEY_SCHEMA = {"type": "record", "name": "OrderKey", "namespace": "shop", "fields": [{"name": "id", "type": "long"}]}
ORDER_JSON = {"title": "OrderJson", "type": "object", "required": ["id", "item"],
              "properties": {"id": {"type": "integer"}, "item": {"type": "string"},
                             "price": {"type": ["number", "null"]}}}


def _orders(spark, n: int, with_note: bool = False):
    df = spark.range(n).select(
        F.col("id"), F.concat(F.lit("item-"), F.col("id").cast("string")).alias("item"),
        F.when(F.col("id") % 5 == 0, F.lit(None)).otherwise(F.col("id") * 1.5).alias("price"))
    if with_note:
        df = df.withColumn("note", F.lit("v2"))
    return df.select(F.struct(*[c for c in df.columns]).alias("value"), F.struct("id").alias("key"))


def _values(spark, n: int, with_note: bool = False):
    return _orders(spark, n, with_note).select("value")


def _sink(broker, tmp_path, topic, **kw):
    return RecoverableKafkaSink(name=f"sr-{uuid.uuid4().hex[:6]}", kafka_conf={"bootstrap.servers": broker.bootstrap},
                                topic=topic, wal_dir=str(tmp_path / "wal"), **kw)


def _topic(broker) -> str:
    name = f"orders-{uuid.uuid4().hex[:6]}"
    create_topic(broker.bootstrap, name, 2)
    return name


def _decode(registry, records, kind: str = "avro", field: str = "value"):
    return decode_values(registry, records, kind, field)


def _expected(n: int, with_note: bool = False):
    return [{"id": i, "item": f"item-{i}", "price": None if i % 5 == 0 else i * 1.5,
             **({"note": "v2"} if with_note else {})} for i in range(n)]


def test_avro_values_and_keys_in_confluents_wire_format_read_back_by_its_deserializer(
        spark, broker, tmp_path, registry):
    topic, n = _topic(broker), 300
    sink = _sink(broker, tmp_path, topic, value_format=Avro(json.dumps(ORDER_V1), registry.client_conf()),
                 key_format=Avro(json.dumps(KEY_SCHEMA), registry.client_conf(), strategy="record"))
    df = _orders(spark, n).withColumn("value", F.when(F.col("key.id") == 7, F.lit(None)).otherwise(F.col("value")))
    report = sink.write(df)
    assert (report.rows, report.acked) == (n, n)
    got = sorted(read_topic(broker.bootstrap, topic, expected=n).records, key=lambda r: r.offset)
    tomb = [r for r in got if r.value is None]  # a null struct stays null: a tombstone, no header
    assert len(tomb) == 1 and _decode(registry, tomb, field="key") == [{"id": 7}]
    got = [r for r in got if r.value is not None]
    latest = registry.request("GET", f"/subjects/{topic}-value/versions/latest")
    assert {r.value[:5] for r in got} == {b"\x00" + int(latest["id"]).to_bytes(4, "big")}
    assert sorted(_decode(registry, got), key=lambda v: v["id"]) == [e for e in _expected(n) if e["id"] != 7]
    keys = _decode(registry, got, field="key")
    assert sorted(k["id"] for k in keys) == [i for i in range(n) if i != 7]
    assert registry.request("GET", "/subjects/shop.OrderKey/versions") == [1]  # the record strategy's subject


def test_json_schema_values_and_a_null_struct_stays_a_tombstone(spark, broker, tmp_path, registry):
    topic, n = _topic(broker), 200
    sink = _sink(broker, tmp_path, topic, value_format=JsonSchema(json.dumps(ORDER_JSON), registry.client_conf()))
    df = _orders(spark, n).withColumn("value", F.when(F.col("key.id") == 7, F.lit(None)).otherwise(F.col("value")))
    sink.write(df.withColumn("key", F.col("key.id").cast("string")))
    got = read_topic(broker.bootstrap, topic, expected=n).records
    tomb = [r for r in got if r.key == b"7"]
    assert len(got) == n and len(tomb) == 1 and tomb[0].value is None
    decoded = sorted(_decode(registry, [r for r in got if r.value is not None], "json"), key=lambda v: v["id"])
    # Spark's to_json leaves a null field out (valid whenever the property is not required)
    assert decoded == [{k: v for k, v in e.items() if v is not None} for e in _expected(n) if e["id"] != 7]


def test_an_evolved_schema_gets_its_new_id_and_an_incompatible_one_is_refused_before_any_record(
        spark, broker, tmp_path, registry):
    topic = _topic(broker)
    conf = registry.client_conf()
    _sink(broker, tmp_path, topic, value_format=Avro(json.dumps(ORDER_V1), conf)).write(_values(spark, 50))
    # the sink restarted with an evolved schema (a field with a default: BACKWARD compatible)
    _sink(broker, tmp_path, topic, value_format=Avro(json.dumps(ORDER_V2), conf)).write(_values(spark, 50, True))
    bad = _sink(broker, tmp_path, topic, value_format=Avro(json.dumps(ORDER_BAD), conf))
    with pytest.raises(SchemaIncompatibleError) as ei:
        bad.write(_values(spark, 50).withColumn("value", F.struct(
            F.col("value.id").cast("string").alias("id"), F.col("value.item"), F.col("value.price"))))
    assert ei.value.status == 409 and ei.value.subject == f"{topic}-value"
    got = sorted(read_topic(broker.bootstrap, topic, expected=100).records, key=lambda r: r.offset)
    assert len(got) == 100 and registry.request("GET", f"/subjects/{topic}-value/versions") == [1, 2]
    assert len({r.value[1:5] for r in got}) == 2
    values = _decode(registry, got)
    # each record decoded with the schema its id names: version 1's have no note
    assert sorted((v["id"], v.get("note", "-")) for v in values) == sorted(
        [(i, "-") for i in range(50)] + [(i, "v2") for i in range(50)])


def test_a_registry_down_or_refusing_the_password_fails_the_batch_before_any_record_naming_no_secret(
        spark, broker, tmp_path, registry, caplog):
    topic = _topic(broker)
    # the wrong password in the URL: the registry answers 401, and the HTTP library logs the request's URL
    wrong = {"url": registry.url.replace("http://", "http://sink:not-the-password@")}
    caplog.set_level(logging.DEBUG)
    sink = _sink(broker, tmp_path, topic, value_format=Avro(json.dumps(ORDER_V1), wrong))
    with pytest.raises(RegistryAuthError) as auth:
        sink.write(_values(spark, 20))
    down_url = f"http://sink:{registry.password}@127.0.0.1:9/apis/ccompat/v7"  # nothing listens on port 9
    down = _sink(broker, tmp_path, topic, value_format=Avro(json.dumps(ORDER_V1), {"url": down_url}))
    with pytest.raises(RegistryUnavailableError) as unavailable:
        down.write(_values(spark, 20))
    assert auth.value.status == 401 and unavailable.value.status is None
    shown = " ".join([str(auth.value), repr(auth.value), str(unavailable.value), repr(unavailable.value),
                      repr(sink), repr(down), repr(down.formats), caplog.text])
    assert "not-the-password" not in shown and registry.password not in shown
    assert read_topic(broker.bootstrap, topic, idle_s=1.0).records == []
    assert not (tmp_path / "wal").exists()  # refused on the driver: no task ran, no WAL was made


def test_a_struct_that_does_not_fit_the_avro_schema_is_refused_on_the_driver(spark, broker, tmp_path, registry):
    topic = _topic(broker)
    sink = _sink(broker, tmp_path, topic, value_format=Avro(json.dumps(ORDER_V1), registry.client_conf()))
    df = spark.range(5).select(F.struct(F.col("id").cast("string").alias("id")).alias("value"))
    tracker = spark.sparkContext.statusTracker()
    spark.sparkContext.setJobGroup("avro-fit", "avro fit")
    try:
        with pytest.raises(SchemaError, match="does not fit the Avro schema"):
            sink.write(df)
        assert list(tracker.getJobIdsForGroup("avro-fit")) == []  # refused before any Spark job
        # every column is checked before a schema is registered: a key that cannot be JSON leaves no value version
        both = _sink(broker, tmp_path, topic, value_format=Avro(json.dumps(ORDER_V1), registry.client_conf()),
                     key_format=JsonSchema(json.dumps(ORDER_JSON), registry.client_conf()))
        with pytest.raises(SchemaError, match="JsonSchema needs a struct"):
            both.write(_values(spark, 5).withColumn("key", F.lit("a string")))
        assert f"{topic}-value" not in registry.request("GET", "/subjects")
    finally:
        spark.sparkContext.setJobGroup(None, None)  # type: ignore[arg-type]


def test_a_job_template_writes_its_rows_as_avro_with_sink_value_format_the_password_from_the_environment(
        spark, broker, tmp_path, registry, monkeypatch):
    """templates/file_to_kafka.py with ``sink.value_format``: the same template, each row Avro instead of JSON."""
    mod = load_job("file_to_kafka")
    landing, n = tmp_path / "landing", 60
    landing.mkdir()
    for f in range(2):
        (landing / f"part-{f}.json").write_text("".join(json.dumps(
            {"id": i, "item": f"item-{i}", **({} if i % 5 == 0 else {"price": i * 1.5})}) + "\n"
            for i in range(f * n // 2, (f + 1) * n // 2)))
    (tmp_path / "schema.ddl").write_text("id bigint, item string, price double\n")
    (tmp_path / "order.avsc").write_text(json.dumps(ORDER_V1))
    topic = _topic(broker)
    monkeypatch.setenv("RKS_TEST_REGISTRY_AUTH", f"sink:{registry.password}")
    with open(os.path.join(ROOT, "conf", "file_to_kafka.json"), encoding="utf-8") as fh:
        raw = json.load(fh)
    raw["kafka"].update(topic=topic, create_topic_partitions=0)
    raw["sink"].update(name=f"tpl-avro-{uuid.uuid4().hex[:6]}", wal_dir=str(tmp_path / "wal"), value_format={
        "type": "avro", "schema_file": str(tmp_path / "order.avsc"),
        "registry": {"url": registry.url, "basic.auth.user.info": {"env": "RKS_TEST_REGISTRY_AUTH"}}})
    raw["source"].update(path=str(landing), schema_file=str(tmp_path / "schema.ddl"), key_column="id",
                         max_files_per_trigger=1)
    raw["query"].update(checkpoint_location=str(tmp_path / "chk"), available_now=True, run_seconds=0)
    settings = jobs.settings_from_dict(raw, mod.Source, environ={"KAFKA_BOOTSTRAP": broker.bootstrap})
    sink = jobs.run_job(settings, mod.build_source, spark, environ={"KAFKA_BOOTSTRAP": broker.bootstrap},
                        job="file_to_kafka")
    assert sum(r.acked for r in sink.reports) == n and len(sink.reports) == 2  # one file per trigger
    got = read_topic(broker.bootstrap, topic, expected=n).records
    assert sorted(_decode(registry, got), key=lambda v: v["id"]) == _expected(n)
    assert sorted(int(r.key) for r in got) == list(range(n))
