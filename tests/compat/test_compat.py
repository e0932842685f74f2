"""Compatibility tier: the sink's headline scenarios on each Spark release, from its installed wheel.

One application per release (tests/programs/compat_app.py, the release's own
virtual environment, ``conftest.release_run``) runs every scenario; each test
here reads its output back from the session's broker. The releases and what
each offers: devtools/sparkversions.py. A release without Spark's Kafka
connector on Maven Central (4.3.0) streams from parquet files instead.
"""

from __future__ import annotations

import json

import pytest

from devtools.sparkversions import NOTEBOOK

from ..faults.readback import read_back
from ..kafka_helpers import read_topic
from ..registry_reads import decode_values
from .harness import ROWS, check_forced_drain

# The first test of a release also builds its environment on a fresh machine (minutes) and runs its application.
pytestmark = pytest.mark.timeout(3600)


def _exactly_once(run, topic: str, rows: int) -> None:
    t = read_back(run.spec["bootstrap"], topic, range(rows), isolation="read_committed")
    assert (t.lost, t.duplicates, t.foreign) == (0, 0, 0), \
        f"PySpark {run.release.version} {topic}: lost {t.lost} (e.g. {t.lost_sample}), duplicates {t.duplicates}"


def _at_least_once(run, topic: str, rows: int) -> None:
    t = read_back(run.spec["bootstrap"], topic, range(rows))
    assert (t.lost, t.foreign) == (0, 0), f"PySpark {run.release.version} {topic}: lost {t.lost} (e.g. {t.lost_sample})"


def _streamed(run, name: str) -> dict:
    got = run.result(name)
    assert got["run1_error"] is None and got["run2_error"] is None, got
    assert got["faults"]["errors"] == [], got["faults"]
    return got


def test_the_installed_wheel_runs_in_the_driver_and_the_workers(release_run):
    got = release_run.result("installed")
    assert got["pyspark"] == release_run.release.version
    assert got["driver"].startswith(release_run.site) and got["workers"] == [got["driver"]], got
    assert release_run.results["app_rc"] == 0, release_run.results["app_log"]


def test_sink_write_both_guarantees(release_run):
    rows = release_run.spec["rows"]
    for name in ("write", "write_eo"):
        got = release_run.result(name)
        assert got["rows"] == got["acked"] == rows and got["pending"] == 0, (name, got)
    _at_least_once(release_run, release_run.spec["outputs"]["write"], rows)
    _exactly_once(release_run, release_run.spec["outputs"]["write_eo"], rows)


def test_foreach_batch_at_least_once_through_a_worker_kill_and_a_restart(release_run):
    got = _streamed(release_run, "fb_alo")
    (kill,) = got["faults"]["faults"]
    assert kill["pid"] and kill["coords"]["batch"] >= 1, kill
    _at_least_once(release_run, release_run.spec["outputs"]["fb_alo"], ROWS)


def test_foreach_batch_exactly_once_through_a_worker_kill_a_forced_drain_and_a_restart(release_run):
    got = _streamed(release_run, "fb_eo")
    kill = got["faults"]["faults"][0]
    assert kill["pid"] and kill["coords"]["batch"] >= 1, kill
    forced = check_forced_drain(got, release_run.results["app_log"], f"fb_eo-{release_run.spec['tag']}")
    # batch 2 returned with the parked unit pending, and a drain job ran once its owner was dead
    assert any(b["batch"] == 2 and b["pending"] == forced["rows"] for b in got["batches"]), got["batches"]
    assert any(d["at"] > forced["killed_at"] for d in got["drains"]), got["drains"]
    _exactly_once(release_run, release_run.spec["outputs"]["fb_eo"], ROWS)


def test_the_data_source_or_its_refusal(release_run):
    got = release_run.result("ds")
    version = release_run.release.version
    if version.startswith(("3.", "4.0.")):  # before 4.1: refused on import, naming the version and the way
        assert got["refused"] and "SparkVersionError" in got["refused"] and version in got["refused"], got
        assert "foreachBatch" in got["refused"], got
        assert "RecoverableKafkaSink" in got["star"] and "RecoverableKafkaDataSource" not in got["star"], got
        return
    assert got["refused"] is None and got["stream_error"] is None, got
    rows = release_run.spec["rows"]
    contents = read_topic(release_run.spec["bootstrap"], release_run.spec["outputs"]["ds"], expected=rows + ROWS)
    keys = sorted(int(r.key) for r in contents.records)
    assert keys == sorted(list(range(rows)) + list(range(ROWS))), f"{len(keys)} records"


def test_registry_avro_or_the_missing_package_named(release_run):
    rows = release_run.spec["rows"]
    got = release_run.results.get("avro", {})
    version, scala = release_run.release.version, release_run.release.scala
    if not release_run.spec["avro_jar"]:  # Maven Central serves no spark-avro of this release
        assert "ConfigError" in got.get("error", "") and f"spark-avro_{scala}:{version}" in got["error"], got
        return
    got = release_run.result("avro")
    assert got["rows"] == got["acked"] == rows, got
    contents = read_topic(release_run.spec["bootstrap"], release_run.spec["outputs"]["avro"], expected=rows)
    values = decode_values(release_run.registry, contents.records)
    assert sorted(v["id"] for v in values) == list(range(rows))


def test_spark_connect_write_exactly_once_forced_drain_and_drain(release_run):
    client = release_run.result("connect")
    assert client["client_rc"] == 0, client.get("client_stderr")
    for name in ("cx_write", "cx_eo", "cx_drain"):
        assert name in client and "error" not in client[name], json.dumps(client.get(name))[:4000]
    assert client["cx_write"]["rows"] == client["cx_write"]["acked"] == release_run.spec["rows"]
    _at_least_once(release_run, release_run.spec["outputs"]["cx_write"], release_run.spec["rows"])
    check_forced_drain(client["cx_eo"], release_run.results["app_log"], f"cx-eo-{release_run.spec['tag']}")
    _exactly_once(release_run, release_run.spec["outputs"]["cx_eo"], ROWS)
    assert client["cx_drain"]["workers"] >= 1


# Only the releases of NOTEBOOK (the fixture's own params narrowed: the same module-scoped run, not another one)
@pytest.mark.parametrize("release_run", NOTEBOOK, ids=[f"pyspark-{v}" for v in NOTEBOOK], indirect=True)
def test_the_databricks_notebook_runs_its_cells(release_run):
    """templates/databricks_notebook.py on the release (dbutils stood in for): foreachBatch, the engine check, the drain;
    the data source section where the release has it, else skipped with its sentence."""
    got = release_run.result("notebook")
    assert got["engines"] and all(e["engine"] == "native" for e in got["engines"]), got["engines"]
    assert len(got["reports"]) >= 2 and all(rows == acked == 300 for _b, rows, acked, _r in got["reports"]), got
    assert got["drained_pending"] == 0, got
    # Spark 3.5 has no Python data source: the section says it is skipped (its run on 4.1+: test_notebook.py)
    assert got["ds_skipped"] is True, got
    streamed = 300 * len(got["reports"])
    contents = read_topic(release_run.spec["bootstrap"], release_run.spec["outputs"]["notebook"], expected=streamed)
    assert len(contents.records) >= streamed, f"{len(contents.records)} of {streamed}"
    assert all(json.loads(r.value)["n"] == int(r.key) for r in contents.records)
