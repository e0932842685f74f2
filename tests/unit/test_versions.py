"""Tier 1: what each PySpark version offers the sink (driver/versions.py), the cores a Connect session tells,
the settle's drain jobs tagged on classic Spark and on Spark Connect, and the supported-versions table."""

from __future__ import annotations

import os
import threading

import pytest

from devtools import sparkversions
from spark_recoverable_sink.driver import coalesce, settle, versions
from spark_recoverable_sink.errors import ConfigError, SparkVersionError


def test_features_per_version():
    f35, f40, f41 = (versions.features(versions.parse_version(v)) for v in ("3.5.7", "4.0.0", "4.1.1"))
    assert (f35.python_data_source, f35.thread_session, f35.connect) == (False, False, True)
    assert (f40.python_data_source, f40.thread_session) == (False, True)
    assert f41.python_data_source
    assert versions.parse_version("3.5.2-databricks") == (3, 5, 2) and versions.parse_version("4.1") == (4, 1, 0)
    assert versions.scala_binary("3.5.7") == "2.12" and versions.scala_binary("4.0.0") == "2.13"


def test_unsupported_versions_and_the_data_source_on_3_5_are_refused_naming_the_version_and_the_way():
    for bad in ((3, 4, 1), (5, 0, 0)):
        with pytest.raises(SparkVersionError, match=".".join(map(str, bad))) as ei:
            versions.check_supported(bad)
        assert isinstance(ei.value, ConfigError) and ei.value.option == "pyspark"
    versions.check_supported((3, 5, 0))
    versions.check_supported((4, 3, 0))
    with pytest.raises(SparkVersionError, match=r"PySpark 3\.5\.7.*foreachBatch") as ei:
        versions.require_data_source((3, 5, 7))
    assert isinstance(ei.value, ImportError) and ei.value.version == "3.5.7"
    with pytest.raises(SparkVersionError, match=r"4\.1\+.*PySpark 4\.0\.0"):  # no streaming Arrow writer
        versions.require_data_source((4, 0, 0))
    versions.require_data_source((4, 1, 0))


def test_the_drain_thread_takes_the_session_from_4_0_only(monkeypatch):
    import pyspark

    made = []

    class Recorder:
        def __init__(self, *args, **kwargs):
            made.append(kwargs)

    monkeypatch.setattr(pyspark, "InheritableThread", Recorder)
    for text, session in (("3.5.7", False), ("4.0.0", True)):
        monkeypatch.setattr(versions, "installed_version", lambda t=text: versions.parse_version(t))
        versions.inheritable_thread("S", target=print, name="n")
        assert ("session" in made[-1]) is session and made[-1]["name"] == "n"


class _Conf:
    def __init__(self, values):
        self.values = values

    def get(self, key, default=None):
        return self.values.get(key, default)


class ConnectSession:
    """What the sink sees of a Spark Connect session: a configuration, tags, no SparkContext."""

    __module__ = "pyspark.sql.connect.session"

    def __init__(self, **conf):
        self.conf = _Conf(conf)
        self.calls = []

    @property
    def sparkContext(self):  # noqa: N802 - PySpark's name
        raise AttributeError("sparkContext() is not implemented")

    def addTag(self, tag):  # noqa: N802
        self.calls.append(("add", tag, threading.current_thread().name))

    def removeTag(self, tag):  # noqa: N802
        self.calls.append(("remove", tag, threading.current_thread().name))

    def interruptTag(self, tag):  # noqa: N802
        self.calls.append(("interrupt", tag, threading.current_thread().name))


@pytest.mark.parametrize("conf,cores", [
    ({"spark.master": "local[2,3]"}, 2),
    ({"spark.master": "local[3]"}, 3),
    ({"spark.master": "local"}, 1),
    ({"spark.master": "local[*]"}, os.cpu_count()),
    ({"spark.master": "local-cluster[2, 3, 1024]"}, 6),
    ({"spark.master": "yarn", "spark.default.parallelism": "12"}, 12),
    ({"spark.master": "spark://h:7077", "spark.executor.instances": "4", "spark.executor.cores": "2"}, 8),
    ({"spark.master": "spark://h:7077", "spark.executor.instances": "4", "spark.executor.cores": "2",
      "spark.dynamicAllocation.enabled": "true"}, None),
    ({"spark.master": "k8s://h"}, None),
    ({"spark.default.parallelism": "x"}, None),
])
def test_cores_of_a_connect_session_from_its_configuration(conf, cores):
    session = ConnectSession(**conf)
    assert versions.is_connect(session)
    assert coalesce.session_cores(session) == cores
    assert coalesce.drain_tasks(session) == (cores or coalesce.DRAIN_TASKS_UNKNOWN)


def test_connect_drain_jobs_carry_a_session_tag_added_in_the_drain_thread_and_are_interrupted_by_it():
    session = ConnectSession(**{"spark.master": "local[2]"})
    ran = []
    wiring = settle.tagged_drains(session, lambda spark, timeout_s: ran.append((spark, timeout_s)) or "report", "t1")
    assert set(wiring) == {"drain", "cancel", "thread"}
    out = {}
    worker = threading.Thread(target=lambda: out.update(r=wiring["drain"](2.0)), name="drain-thread")
    worker.start()
    worker.join(10)
    wiring["cancel"]()
    assert out == {"r": "report"} and ran == [(session, 2.0)]
    assert session.calls == [("add", "t1", "drain-thread"), ("remove", "t1", "drain-thread"),
                             ("interrupt", "t1", "MainThread")]


def test_the_compatibility_doc_and_the_readme_hold_the_rendered_table():
    with open(sparkversions.DOC, encoding="utf-8") as f:
        text = f.read()
    for doc in sparkversions.DOCS:
        with open(doc, encoding="utf-8") as f:
            held = f.read()
        assert sparkversions.render_doc(held) == held, f"{doc}: run python -m devtools.sparkversions"
    table = sparkversions.versions_table()
    for r in sparkversions.RELEASES:
        assert f"tested {r.version})" in table
    entry_points = [row.split(" | ")[5] for row in table.splitlines()[2:]]
    assert ['format("recoverable-kafka")' in e for e in entry_points] == [False, False, True, True, True]
    # the check can fail: a table that differs is rewritten
    stale = text.replace("3.5.x", "3.4.x")
    assert sparkversions.render_doc(stale) == text and stale != text
