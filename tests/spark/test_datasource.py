"""Tier 3: the data source ``recoverable-kafka`` and Spark Connect, against the real broker.

The entry-point runs go through tests/programs/entry_points_app.py in a process
of their own: a fresh session shows that Spark finds the data source without
a registration call, and Spark Connect starts its own local server there.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections import Counter, defaultdict

import pytest

from spark_recoverable_sink import RecoverableKafkaDataSource

from ..java_settings import PRODUCTION
from ..kafka_helpers import create_topic, read_topic
from ..record_ids import id_batch, id_run, run_of
from ..registry_reads import decode_values

pytestmark = pytest.mark.spark

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ROWS = 1000
_REPORT = re.compile(r"sink=(\S+) entry=recoverable-kafka batch_id=(\d+) run=(\S+) rows=(\d+) \S+ acked=(\d+)")


def _run_app(broker, topic: str, work: str, mode: str, registry=None,
             ) -> tuple[dict, list[tuple[str, int, str, int, int]]]:
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
    if registry is not None:
        from devtools.jvm import spark_avro_jars

        env.update(RKS_TEST_REGISTRY_URL=registry.url, RKS_TEST_REGISTRY_AUTH=f"{registry.user}:{registry.password}",
                   RKS_TEST_SPARK_JARS=",".join(spark_avro_jars()))
    p = subprocess.run([sys.executable, "-m", "tests.programs.entry_points_app", broker.bootstrap, topic, work,
                        str(ROWS), mode], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-4000:]
    out = json.loads(p.stdout.strip().splitlines()[-1])
    reports = [(m[1], int(m[2]), m[3], int(m[4]), int(m[5])) for m in _REPORT.finditer(p.stderr)]
    return out, reports


def _by_sink_batch(ids: Counter, runs: set[tuple[str, str]]) -> dict[tuple[str, str, int], int]:
    """Records per (sink, run, batch) of ``runs`` (the (sink, run) pairs the reports name), from the ids' run keys
    and batches; an id of no such run fails."""
    by_key = {run_of(s, r): (s, r) for s, r in runs}
    out: dict[tuple[str, str, int], int] = defaultdict(int)
    for rid, count in ids.items():
        assert id_run(rid) in by_key, f"an id of no reported run: {rid}"
        out[(*by_key[id_run(rid)], id_batch(rid))] += count
    return dict(out)


@pytest.mark.parametrize("mode", ["classic", "connect"])
def test_every_entry_point_delivers_each_row_once(broker, topic, tmp_path, mode, request):
    registry = request.getfixturevalue("registry") if mode == "connect" else None
    if registry is not None:
        create_topic(broker.bootstrap, f"{topic}-avro", 2)
    out, reports = _run_app(broker, topic, str(tmp_path), mode, registry)
    # at least: the batch save, three stream batches (a fourth may be cut by the stop), and under Connect
    # the write and three foreachBatch batches; every one of them was acked before its commit
    least = ROWS + 3 * (ROWS // 2) + (ROWS + 3 * (ROWS // 2) if mode == "connect" else 0)
    got = read_topic(broker.bootstrap, topic, expected=least, idle_s=3.0)
    assert got.duplicates() == 0
    run = out["ds_query_id"].replace("-", "")[:16]
    named = {(s, r) for s, _b, r, _rows, _acked in reports} | {("ds-stream", run)}
    if mode == "connect":
        named |= {("cx-write", out["write_run"]), ("cx-stream", "cxrun1")}
    per = _by_sink_batch(got.ids, named)
    assert out["ds_exception"] is None

    # batch save, found by name (no register call): one run, batch 0, every row; its commit logged the report
    batch_runs = {r for (s, r, _) in per if s == "ds-batch"}
    assert len(batch_runs) == 1 and per[("ds-batch", batch_runs.pop(), 0)] == ROWS
    assert [(r[0], r[1], r[3], r[4]) for r in reports if r[0] == "ds-batch"] == [("ds-batch", 0, ROWS, ROWS)]

    # streaming: run = the query's id, one batch id per micro-batch, each committed batch complete
    committed = {b: rows for s, b, r, rows, acked in reports if s == "ds-stream" and r == run and acked == rows}
    assert {0, 1, 2} <= set(committed) and all(rows == ROWS // 2 for rows in committed.values())
    for b in committed:
        assert per[("ds-stream", run, b)] == ROWS // 2
    assert {r for (s, r, _) in per if s == "ds-stream"} == {run}
    for rec in got.records:  # keys and values agree: no row was mixed with another
        assert rec.value.decode().split("-", 1)[1] == rec.key.decode()

    if mode == "connect":
        assert out["write_rows"] == out["write_acked"] == ROWS
        assert per[("cx-write", out["write_run"], 0)] == ROWS
        assert out["fb_exception"] is None
        assert all(per[("cx-stream", "cxrun1", b)] == ROWS // 2 for b in (0, 1, 2))
        # Spark Connect hides the query id from foreachBatch: the sink says to pass run_id
        assert "pass run_id= to the sink" in out["norun_error"]
        # a Schema Registry format through Connect: the plan built by the client, to_avro run by the server
        assert out["avro_rows"] == out["avro_acked"] == ROWS
        avro = read_topic(broker.bootstrap, f"{topic}-avro", expected=ROWS).records
        assert sorted((v["id"], v["text"]) for v in decode_values(registry, avro)) == [
            (i, f"t-{i}") for i in range(ROWS)]


def _save(spark, **options):
    df = spark.range(10).selectExpr("cast(id as string) as key", "cast(id as string) as value")
    writer = df.write.format("recoverable-kafka").mode(options.pop("mode", "append"))
    for k, v in options.items():
        writer = writer.option(k, v)
    writer.save()


@pytest.mark.parametrize("options, message", [
    ({"ack_timout_s": "1"}, "did you mean 'ack_timeout_s'"),
    ({"ack_timeout_s": "soon"}, "invalid option 'ack_timeout_s': must be a number"),
    ({"kafka.linger.mss": "5"}, "kafka_conf"),
    ({"guarantee": "exactly_once"}, "exactly_once needs foreachBatch(sink)"),
    ({"mode": "overwrite"}, "use mode('append')"),
    ({"history": "3"}, "is an option of foreachBatch(sink) only"),
    ({"metrics_port": "0"}, "metrics_port"),
    ({"kafka.partitioner.class": "org.apache.kafka.clients.producer.RoundRobinPartitioner"}, "use partitioner"),
    ({"kafka.sasl.jaas.config": 'org.apache.kafka.common.security.plain.PlainLoginModule required username="u" '
                                'password="hunter2-secret"'}, "does not end with ';'"),
])
def test_option_errors_name_the_option(spark, broker, topic, tmp_path, options, message):
    spark.dataSource.register(RecoverableKafkaDataSource)
    base = {"kafka.bootstrap.servers": broker.bootstrap, "topic": topic, "name": "ds-errors",
            "wal_dir": str(tmp_path / "wal"), "kafka.sasl.password": "hunter2-secret"}
    with pytest.raises(Exception) as info:
        _save(spark, **{**base, **options})
    text = str(info.value)
    assert message in text
    assert "hunter2-secret" not in text


def test_explicit_registration_writes_with_the_sinks_options(spark, broker, topic, tmp_path):
    spark.dataSource.register(RecoverableKafkaDataSource)
    _save(spark, **{"kafka.bootstrap.servers": broker.bootstrap, "topic": topic, "name": "ds-explicit",
                    "wal_dir": str(tmp_path / "wal"), "run_id": "fixedrun", "id_header": "my-id",
                    "kafka.linger.ms": "1"})
    got = read_topic(broker.bootstrap, topic, expected=10)
    ids = sorted(dict(r.headers)["my-id"].hex() for r in got.records)
    assert len(set(ids)) == 10 and all(id_run(i) == run_of("ds-explicit", "fixedrun") and id_batch(i) == 0
                                       for i in ids)


def test_a_format_kafka_job_s_java_producer_settings_write_as_they_are(spark, broker, topic, tmp_path):
    """``df.write.format("kafka")``'s ``kafka.*`` options moved over unchanged (Spark lower-cases their keys)."""
    spark.dataSource.register(RecoverableKafkaDataSource)
    _save(spark, **{"kafka.bootstrap.servers": broker.bootstrap, "topic": topic, "name": "ds-java",
                    "wal_dir": str(tmp_path / "wal"), **{f"kafka.{k}": v for k, v in PRODUCTION.items()}})
    got = read_topic(broker.bootstrap, topic, expected=10)
    assert sorted(int(r.key) for r in got.records) == list(range(10)) and got.duplicates() == 0
