"""Tier 1: what each PySpark version offers the sink (driver/versions.py), the cores a Connect session tells,
the settle's drain jobs tagged on classic Spark and on Spark Connect, the supported-versions table and the
per-platform table (devtools/platforms.py) as docs/compatibility.md holds them."""

from __future__ import annotations

import os
import threading

import pytest

from devtools import platforms, sparkversions
from spark_recoverable_sink.driver import cores as cores_module
from spark_recoverable_sink.driver import settle, versions
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
    assert cores_module.session_cores(session) == cores
    assert cores_module.drain_tasks(session) == (cores or cores_module.DRAIN_TASKS_UNKNOWN)


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


def test_the_python_column_says_python_versions_as_python_versions():
    """A row's Python cell is the package's Python; PySpark's own floor is named as a Python version, never as
    "PySpark >=3.8" (which reads as a PySpark release)."""
    table = sparkversions.versions_table()
    for row, r in zip(table.splitlines()[2:], sparkversions.RELEASES):
        python = row.split(" | ")[1]
        assert python.startswith(f"{sparkversions.PACKAGE_PYTHON}+ ") and "PySpark >" not in python, python
        assert f"PySpark {r.version} itself: Python {r.pyspark_python}" in python, python


def test_the_compatibility_doc_and_the_readme_hold_the_rendered_table():
    with open(sparkversions.DOC, encoding="utf-8") as f:
        text = f.read()
    for doc in sparkversions.DOCS:
        with open(doc, encoding="utf-8") as f:
            held = f.read()
        rendered = sparkversions.render_doc(held, platforms=doc == sparkversions.DOC)
        assert rendered == held, f"{doc}: run python -m devtools.sparkversions"
    table = sparkversions.versions_table()
    for r in sparkversions.RELEASES:
        assert f"tested {r.version})" in table
    entry_points = [row.split(" | ")[5] for row in table.splitlines()[2:]]
    assert ['format("recoverable-kafka")' in e for e in entry_points] == [False, False, True, True, True]
    # the check can fail: a table that differs is rewritten
    stale = text.replace("3.5.x", "3.4.x")
    assert sparkversions.render_doc(stale, platforms=True) == text and stale != text
    # the tiers' paragraph names the main release the whole suite runs on
    assert f"main release (PySpark {sparkversions.MAIN.version}" in text


def test_the_platforms_block_is_in_the_compatibility_doc_only_and_its_check_fails_on_a_stale_doc(tmp_path,
                                                                                                monkeypatch):
    readme, doc = (open(d, encoding="utf-8").read() for d in (sparkversions.DOCS[1], sparkversions.DOC))
    assert platforms.BEGIN in doc and platforms.END in doc and platforms.BEGIN not in readme
    assert doc.index(sparkversions.END) < doc.index(platforms.BEGIN)  # under the versions table
    assert sparkversions.main(["--check"]) == 0
    # a copy whose platforms block differs: --check refuses it and leaves it alone, a plain run rewrites it
    stale = doc.replace("| AWS Glue 5.0 | 3.5.4 |", "| AWS Glue 5.0 | 3.5.9 |")
    assert stale != doc
    copies = {name: tmp_path / name for name in ("compatibility.md", "README.md")}
    copies["compatibility.md"].write_text(stale, encoding="utf-8")
    copies["README.md"].write_text(readme, encoding="utf-8")
    monkeypatch.setattr(sparkversions, "DOC", str(copies["compatibility.md"]))
    monkeypatch.setattr(sparkversions, "DOCS", (str(copies["compatibility.md"]), str(copies["README.md"])))
    assert sparkversions.main(["--check"]) == 1
    assert copies["compatibility.md"].read_text(encoding="utf-8") == stale
    assert sparkversions.main([]) == 0
    assert copies["compatibility.md"].read_text(encoding="utf-8") == doc
    assert copies["README.md"].read_text(encoding="utf-8") == readme
    assert sparkversions.main(["--check"]) == 0
    # a doc without the platforms markers is refused, not silently left unchecked
    copies["compatibility.md"].write_text(doc.replace(platforms.BEGIN, ""), encoding="utf-8")
    with pytest.raises(ValueError, match="BEGIN platforms"):
        sparkversions.main(["--check"])


def test_every_platform_row_cites_a_source_and_its_entry_points_come_from_the_version_checks(monkeypatch):
    table = platforms.platforms_table()
    rows = [line for line in table.splitlines() if line.startswith("| ") and not line.startswith(("| Platform",
                                                                                                    "| ---"))]
    assert len(rows) == len(platforms.PLATFORMS) >= 8
    cited = platforms.cited()
    for p in platforms.PLATFORMS:
        assert p.sources and len(set(p.sources)) == len(p.sources), p.name
        assert all(s in {c.key for c in cited} for s in p.sources)
    for i, s in enumerate(cited, 1):
        assert f"{i}. {s.title}: <{s.url}>" in table and s.url.startswith("https://")
    assert {s.key for s in platforms.SOURCES} == {s.key for s in cited}  # no source listed that no row cites
    by_name = {p.name: p for p in platforms.PLATFORMS}
    names = " ".join(by_name)
    for wanted in ("EMR 7", "Glue 5.0", "Dataproc 2.2", "Dataproc 2.3", "15.4 LTS", "16.4 LTS", "17.3 LTS",
                   "serverless", "standard (shared) access mode"):
        assert wanted in names
    ds = '`format("recoverable-kafka")`'
    assert ds in platforms.entry_points(by_name["Databricks Runtime 18 LTS"])  # Spark 4.1.0
    assert f"not {ds}" in platforms.entry_points(by_name["Databricks Runtime 17.3 LTS"])  # 4.0.0
    assert f"not {ds}" in platforms.entry_points(by_name["AWS Glue 5.0"])  # 3.5.4
    for p in platforms.PLATFORMS:
        assert ("through Spark Connect (pass `run_id=`)" in platforms.entry_points(p)) is p.connect
    # a row citing a key missing from SOURCES is refused, not rendered without its source
    bad = platforms.Platform("x", "3.5.0", "3.5.0", "3.11", "yes", "pip", ("no-such-source",))
    monkeypatch.setattr(platforms, "PLATFORMS", platforms.PLATFORMS + (bad,))
    with pytest.raises(KeyError, match="no-such-source"):
        platforms.platforms_table()
