"""Tier 3: the spark-submit job templates (templates/*.py) against the test broker.

The runnable templates are started the way a user starts them, with the real
``spark-submit --master local[2]`` of the venv, a conf file derived from the
shipped one and ``KAFKA_BOOTSTRAP`` in the environment; each writes its batch
totals to ``query.summary_path`` (and logs them as one ``key=value`` line),
and the test reads the topic back: every row a report counts must be there,
once. templates/kafka_to_kafka.py reads with Spark's own Kafka source: the
connector's jars (devtools/spark-kafka/pom.xml, matching the PySpark version
of the dev extra) are fetched once from Maven Central into a cache and given
to spark-submit with ``--jars``; every input record must reach the output.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import uuid
from typing import Any

import pytest

from spark_recoverable_sink import jobs

from ..job_files import load_job
from ..kafka_helpers import create_topic, produce_all, read_topic
from ..record_ids import check_ids_per_group, group_of, reported_rows

pytestmark = pytest.mark.spark

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SPARK_SUBMIT = os.path.join(os.path.dirname(sys.executable), "spark-submit")


def _conf(shipped: str, tmp_path: Any, **sections: dict[str, Any]) -> dict[str, Any]:
    """The shipped conf with the test's WAL, checkpoint and summary file, and ``sections`` merged in."""
    with open(os.path.join(ROOT, shipped), encoding="utf-8") as fh:
        raw = json.load(fh)
    raw["spark"]["conf"]["spark.driver.memory"] = "1g"
    raw["sink"]["wal_dir"] = str(tmp_path / "wal")
    raw["query"].update(checkpoint_location=str(tmp_path / "chk"), summary_path=str(tmp_path / "summary.json"),
                        stop_grace_s=30.0)
    for name, body in sections.items():
        raw[name].update(body)
    return raw


def _submit(script: str, raw: dict[str, Any], tmp_path: Any, bootstrap: str,
            submit_args: tuple[str, ...] = ()) -> tuple[dict[str, Any], dict[str, str]]:
    """``spark-submit --master local[2] [submit_args] templates/<script> --conf <file>``; returns the summary and the stop line."""
    path = tmp_path / "job.json"
    path.write_text(json.dumps(raw))
    env = {k: v for k, v in os.environ.items() if not k.startswith("RKS_")}  # no test hooks: a user's run
    env.update(PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable, KAFKA_BOOTSTRAP=bootstrap,
               SPARK_LOCAL_IP="127.0.0.1")
    t = time.monotonic()
    proc = subprocess.run([SPARK_SUBMIT, "--master", "local[2]", *submit_args, os.path.join(ROOT, "templates", script),
                           "--conf", str(path)], env=env, cwd=str(tmp_path), stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=240)
    # spark-submit's JVM runs the Python driver and copies its stdout and stderr (the job's log) to stdout
    out = proc.stdout
    print(f"{script}: exit={proc.returncode} seconds={time.monotonic() - t:.1f}", file=sys.stderr)
    (tmp_path / "job.log").write_text(out)  # kept for a failure's post-mortem
    assert proc.returncode == 0, out[-4000:]
    job = script.removesuffix(".py")
    stopped = [ln for ln in out.splitlines() if f"job={job} status=stopped" in ln]
    assert len(stopped) == 1, "\n".join(ln for ln in out.splitlines() if "job=" in ln)
    line = dict(re.findall(r"(\w+)=(\S+)", stopped[0]))
    with open(raw["query"]["summary_path"], encoding="utf-8") as fh:
        return json.load(fh), line


def _expected_rows(summary: dict[str, Any]) -> dict[str, int]:
    """Rows per batch the summary counts (the templates' ids: ``record_ids="content"``, named by their place)."""
    out: dict[str, int] = {}
    for r in summary["reports"]:
        for _p, rows in r["task_rows"].items():
            key = group_of(summary["sink"], r["run"], r["batch_id"])
            out[key] = out.get(key, 0) + rows
    return out


def _check_delivery(summary: dict[str, Any], line: dict[str, str], bootstrap: str, topic: str) -> Any:
    """Every row the summary counts is in the topic exactly once; returns what the topic holds."""
    for k in ("batches", "rows", "acked", "pending", "dead_lettered"):
        assert int(line[k]) == summary[k], k  # the log line and the summary file agree
    assert summary["dead_lettered"] == 0 and summary["rows"] > 0
    assert summary["rows"] == sum(r["rows"] for r in summary["reports"])
    expected = _expected_rows(summary)
    assert sum(expected.values()) == summary["rows"]
    got = read_topic(bootstrap, topic, expected=summary["rows"])
    # per (run, batch, partition): as many distinct ids as rows the summary counts, none twice
    check_ids_per_group(got.ids, expected, others=True)
    return got


def test_stream_to_kafka_with_spark_submit(broker, topic, tmp_path):
    raw = _conf("conf/stream_to_kafka.json", tmp_path, kafka={"topic": topic, "create_topic_partitions": 0},
                sink={"name": "tpl-stream"}, source={"rows_per_second": 2000},
                query={"run_seconds": 45.0, "trigger_interval_s": 1.0})
    # run_seconds counts from the query's start, whose first batch (planning, then Python workers starting on
    # a loaded machine) took 24 s under `make test`: 45 s leaves room for more than one trigger after it
    summary, line = _submit("stream_to_kafka.py", raw, tmp_path, broker.bootstrap)
    assert summary["reason"] == "run_seconds-elapsed" and summary["batches"] >= 2
    got = _check_delivery(summary, line, broker.bootstrap, topic)
    for r in got.records:  # every record is one of the source's rows, key and value agreeing
        assert json.loads(r.value)["n"] == int(r.key)


def _landing(tmp_path: Any, files: int, rows: int) -> tuple[str, list[dict[str, Any]]]:
    landing = tmp_path / "landing"
    landing.mkdir()
    written = []
    for f in range(files):
        batch = [{"id": f * rows + i, "name": f"n{f}-{i}", "amount": i + 0.5} for i in range(rows)]
        (landing / f"part-{f}.json").write_text("".join(json.dumps(r) + "\n" for r in batch))
        written += batch
    return str(landing), written


def test_file_to_kafka_with_spark_submit(broker, tmp_path):
    landing, written = _landing(tmp_path, files=3, rows=400)
    (tmp_path / "schema.ddl").write_text("id bigint, name string, amount double\n")
    topic = f"t-files-{uuid.uuid4().hex[:8]}"  # the job creates it (kafka.create_topic_partitions)
    raw = _conf("conf/file_to_kafka.json", tmp_path, kafka={"topic": topic, "create_topic_partitions": 2},
                sink={"name": "tpl-files"},
                source={"path": landing, "schema_file": "schema.ddl", "key_column": "id", "format": "json",
                        "max_files_per_trigger": 1},
                query={"available_now": True, "run_seconds": 0})
    summary, line = _submit("file_to_kafka.py", raw, tmp_path, broker.bootstrap)
    assert summary["reason"] == "terminated", "available_now: the query ends once the files are done"
    assert summary["batches"] == 3 and summary["rows"] == len(written)  # one file per trigger
    got = _check_delivery(summary, line, broker.bootstrap, topic)
    assert len(got.records) == len(written)
    by_key = {int(r.key): json.loads(r.value) for r in got.records}
    assert by_key == {row["id"]: row for row in written}


def test_file_to_kafka_reads_parquet_with_a_json_schema_file(spark, tmp_path):
    mod = load_job("file_to_kafka")
    rows = [(1, "a", 1.5), (2, "b", None)]
    df = spark.createDataFrame(rows, "id bigint, name string, amount double")
    df.write.parquet(str(tmp_path / "landing"))
    (tmp_path / "schema.json").write_text(df.schema.json())
    source = mod.Source(path=str(tmp_path / "landing"), schema_file=str(tmp_path / "schema.json"),
                        key_column="name", format="parquet")
    built = mod.build_source(spark, source)
    assert built.isStreaming and built.schema["value"].dataType.simpleString().startswith("struct<id:bigint")
    out = jobs.for_sink(built, jobs.SinkSettings(name="tpl", wal_dir=str(tmp_path / "wal")))  # no value_format: JSON
    assert out.columns == ["key", "value"] and out.schema["value"].dataType.simpleString() == "string"
    upper = jobs.for_sink(built.withColumnRenamed("value", "Value"), jobs.SinkSettings(name="tpl", wal_dir="w"))
    # the sink finds columns by their exact names, as Spark's sink does: a 'Value' column is not the value
    assert upper.schema["Value"].dataType.simpleString().startswith("struct<id:bigint")
    with pytest.raises(jobs.SettingsError, match="sink.key_format: json_schema needs the template's key column"):
        jobs.for_sink(built, jobs.SinkSettings(name="tpl", wal_dir="w", key_format={"type": "json_schema"}))
    q = out.writeStream.format("memory").queryName("tpl_parquet").trigger(availableNow=True).start()
    try:
        assert q.awaitTermination(120)
    finally:
        q.stop()
    got = {r.key: json.loads(r.value) for r in spark.table("tpl_parquet").collect()}
    assert got == {"a": {"id": 1, "name": "a", "amount": 1.5}, "b": {"id": 2, "name": "b"}}
    with pytest.raises(jobs.SettingsError, match="source.key_column: 'nope' is not in the schema"):
        mod.build_source(spark, mod.Source(path=source.path, schema_file=source.schema_file, key_column="nope",
                                           format="parquet"))


KAFKA_SOURCE_SCHEMA = ("key binary, value binary, topic string, partition int, offset long, timestamp timestamp, "
                       "timestampType int")


def test_kafka_to_kafka_transform_writes_through_the_sink_and_source_secrets_resolve_first(
        spark, broker, topic, tmp_path):
    from datetime import datetime

    mod = load_job("kafka_to_kafka")
    raw = _conf("conf/kafka_to_kafka.json", tmp_path, kafka={"topic": topic, "create_topic_partitions": 0},
                sink={"name": "tpl-k2k"})
    raw["source"]["consumer_conf"]["sasl.jaas.config"] = {"env": "RKS_TPL_JAAS"}
    settings = jobs.settings_from_dict(raw, mod.Source, environ={"KAFKA_BOOTSTRAP": broker.bootstrap})
    assert settings.source.subscribe == "rks-events" and settings.source.max_offsets_per_trigger == 100000

    ts = datetime(2024, 1, 2, 3, 4, 5)
    stand_in = spark.createDataFrame(
        [(b"k1", b'{"a":1}', "in", 0, 10, ts, 0), (None, b"x", "in", 1, 11, ts, 0), (b"k3", None, "in", 1, 12, ts, 0)],
        KAFKA_SOURCE_SCHEMA)
    out = jobs.for_sink(mod.transform(stand_in), settings.sink)
    assert out.columns == ["key", "value"]
    sink = jobs.build_sink(settings, environ={})
    report = sink.write(out)
    assert report.rows == 2 and report.acked == 2 and report.dead_lettered == 0
    got = read_topic(broker.bootstrap, topic, expected=2)
    assert {json.loads(r.value)["offset"]: r.key for r in got.records} == {10: b"k1", 11: None}
    assert {json.loads(r.value)["payload"] for r in got.records} == {'{"a":1}', "x"}
    check_ids_per_group(got.ids, reported_rows("tpl-k2k", [report]))

    # The streaming plan: options are set and secrets resolved before the source is looked up.
    with pytest.raises(jobs.SettingsError, match="RKS_TPL_JAAS is not set"):
        mod.read_source(spark, settings.source)


def test_kafka_to_kafka_with_spark_submit_reads_spark_kafka_source(broker, tmp_path):
    """The template as users run it: Spark's Kafka source on the real broker, every input record in the output."""
    from devtools.jvm import spark_kafka_connector_jars

    jars = spark_kafka_connector_jars()
    source, out = f"k2k-in-{uuid.uuid4().hex[:8]}", f"k2k-out-{uuid.uuid4().hex[:8]}"
    create_topic(broker.bootstrap, source, partitions=3)
    n = 6000
    produce_all(broker.bootstrap, source, ({"key": b"k%d" % i, "value": b"v%d" % i, "partition": i % 3}
                                           for i in range(n)), linger_ms=5)
    raw = _conf("conf/kafka_to_kafka.json", tmp_path, kafka={"topic": out, "create_topic_partitions": 2},
                sink={"name": "tpl-k2k-real"},
                source={"bootstrap_servers": broker.bootstrap, "subscribe": source, "max_offsets_per_trigger": 2500},
                query={"available_now": True, "run_seconds": 0})
    summary, line = _submit("kafka_to_kafka.py", raw, tmp_path, broker.bootstrap, ("--jars", ",".join(jars)))
    assert summary["reason"] == "terminated" and summary["batches"] >= 3  # 2,500 offsets per trigger
    got = _check_delivery(summary, line, broker.bootstrap, out)
    seen = {(json.loads(r.value)["partition"], json.loads(r.value)["offset"]): (r.key, json.loads(r.value)["payload"])
            for r in got.records}
    want = {(i % 3, i // 3): (b"k%d" % i, "v%d" % i) for i in range(n)}
    assert len(got.records) == n and seen == want
