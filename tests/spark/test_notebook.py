"""Tier 3: jobs/databricks_notebook.py, its cell structure and a run of its code cells.

The notebook's Python cells run in order against the local ``spark`` session
and the test broker; only the platform's globals are replaced: a fake
``dbutils`` (widgets with the test's settings, a secret scope, a recorded
``library.restartPython``) and ``display`` (records what it is given). The
``%pip`` and ``%md`` cells are not Python and are only checked for shape.
"""

from __future__ import annotations

import ast
import json
import logging
import os
import uuid
from collections import Counter
from typing import Any

import pytest

from ..kafka_helpers import read_topic
from ..record_ids import check_ids_per_prefix, reported_rows

pytestmark = pytest.mark.spark

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NOTEBOOK = os.path.join(ROOT, "jobs", "databricks_notebook.py")
HEADER = "# Databricks notebook source"
SEP = "\n# COMMAND ----------\n"


def _version() -> str:
    """The package version: the %pip cell names the wheel of this version (%pip takes a path, not a pattern)."""
    import tomllib

    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        return tomllib.load(f)["project"]["version"]


def _cells() -> list[str]:
    with open(NOTEBOOK, encoding="utf-8") as fh:
        text = fh.read()
    first, _, body = text.partition("\n")
    assert first == HEADER
    return [c.strip("\n") for c in body.split(SEP)]


def _is_magic(cell: str) -> bool:
    return all(line.startswith("# MAGIC") for line in cell.splitlines())


class _Widgets:
    def __init__(self, values: dict[str, str]) -> None:
        self.values, self.defined, self.read = values, {}, []

    def text(self, name: str, default: str, label: str | None = None) -> None:
        self.defined[name] = default

    def get(self, name: str) -> str:
        if name not in self.defined:
            raise KeyError(f"InputWidgetNotDefined: {name}")  # as Databricks: defined before read
        self.read.append(name)
        return self.values.get(name, self.defined[name])


class _Secrets:
    def __init__(self, scopes: dict[tuple[str, str], str]) -> None:
        self.scopes, self.calls = scopes, []

    def get(self, scope: str, key: str) -> str:
        self.calls.append((scope, key))
        return self.scopes[(scope, key)]


class _Library:
    def __init__(self) -> None:
        self.restarts = 0

    def restartPython(self) -> None:  # noqa: N802 - dbutils' name
        self.restarts += 1


class FakeDbutils:
    """``dbutils`` with only what the notebook uses."""

    def __init__(self, widgets: dict[str, str], secret: str) -> None:
        self.widgets = _Widgets(widgets)
        self.secrets = _Secrets({("kafka", "password"): secret})
        self.library = _Library()


def _run(spark: Any, dbutils: FakeDbutils, until: str | None = None) -> tuple[dict[str, Any], list[Any]]:
    """Exec the Python cells in order (up to the first containing ``until``); returns the namespace, displayed."""
    shown: list[Any] = []
    ns: dict[str, Any] = {"__name__": "__main__", "spark": spark, "dbutils": dbutils, "display": shown.append}
    for i, cell in enumerate(_cells()):
        if _is_magic(cell):
            continue
        if until is not None and until in cell:
            break
        exec(compile(cell, f"{NOTEBOOK}#cell{i}", "exec"), ns)  # noqa: S102 - the notebook under test
    return ns, shown


def _shown_text(shown: list[Any]) -> str:
    return "\n".join(str(x.collect()) if hasattr(x, "collect") else repr(x) for x in shown)


def test_notebook_cell_structure() -> None:
    with open(NOTEBOOK, encoding="utf-8") as fh:
        text = fh.read()
    assert text.startswith(HEADER + "\n")
    cells = _cells()
    assert text.count("# COMMAND ----------") == len(cells) - 1 and all(cells)
    md = [i for i, c in enumerate(cells) if c.startswith("# MAGIC %md")]
    assert md and md[0] == 0 and len(md) >= 4, "a title cell first, and text before each part"
    assert all(_is_magic(cells[i]) for i in md)
    pip = [i for i, c in enumerate(cells) if c.startswith("# MAGIC %pip")]
    assert len(pip) == 1
    assert cells[pip[0]].startswith("# MAGIC %pip install /dbfs/") and cells[pip[0]].endswith(
        f"spark_recoverable_sink-{_version()}-py3-none-any.whl") and len(cells[pip[0]].splitlines()) == 1
    assert cells[pip[0] + 1] == "dbutils.library.restartPython()"
    code = [i for i, c in enumerate(cells) if not _is_magic(c)]
    assert all("# MAGIC" not in cells[i] for i in code)
    for i in code:
        ast.parse(cells[i])  # every code cell is Python
    imports = [i for i in code if "spark_recoverable_sink" in cells[i]]
    assert imports and min(imports) > pip[0] + 1, "the package is used only after it was installed"
    body = "\n".join(cells[i] for i in code)
    assert 'dbutils.secrets.get(scope=' in body and "/local_disk0/rks" in body
    assert "foreachBatch(sink)" in body and 'format("recoverable-kafka")' in body
    assert "spark.dataSource.register(RecoverableKafkaDataSource)" in body


def test_notebook_runs_both_forms_against_the_broker(spark, broker, topic, tmp_path) -> None:
    secret = f"nb-s3cret-{uuid.uuid4().hex}"
    name = f"nb-{uuid.uuid4().hex[:8]}"
    dbutils = FakeDbutils({"bootstrap": broker.bootstrap, "topic": topic, "sink_name": name,
                           "wal_dir": str(tmp_path / "wal"), "checkpoint": str(tmp_path / "chk"),
                           "security_protocol": "PLAINTEXT", "rows_per_batch": "300", "batches": "2"}, secret)
    ns, shown = _run(spark, dbutils)

    assert dbutils.library.restartPython and dbutils.library.restarts == 1
    assert dbutils.secrets.calls == [("kafka", "password")], "the password comes from the secret scope"
    assert set(dbutils.widgets.read) == set(dbutils.widgets.defined)
    assert ns["kafka_conf"]["security.protocol"] == "PLAINTEXT" and "sasl.password" not in ns["kafka_conf"]

    # foreachBatch: the displayed reports are the sink's, every row they count is in the topic once
    sink = ns["sink"]
    reports = list(sink.reports)
    assert len(reports) >= 2 and all(r.rows == 300 and r.dead_lettered == 0 for r in reports)
    assert len(shown) == 2
    table = [r.asDict() for r in shown[0].collect()]
    assert [(t["batch_id"], t["rows"], t["acked"], t["run"]) for t in table] == [
        (r.batch_id, r.rows, r.acked, r.run) for r in reports]
    expected = reported_rows(name, reports)
    # the data source: each batch Spark completed delivered its rows
    progress = [(p["batchId"], p["numInputRows"]) for p in ns["ds_query"].recentProgress]
    assert len(progress) >= 2 and all(rows == 300 for _, rows in progress)
    assert [(r.batch_id, r.rows) for r in shown[1].collect()] == progress
    got = read_topic(broker.bootstrap, topic, expected=sum(expected.values()) + 300 * len(progress))
    ids = got.ids
    check_ids_per_prefix(ids, expected, others=True)
    ds_ids = [i for i in ids if i and i.startswith(f"{name}-ds:")]
    assert len({i.split(":")[1] for i in ds_ids}) == 1, "one streaming query: one run"
    per_batch = Counter(int(i.split(":")[2]) for i in ds_ids)
    for batch_id, rows in progress:
        assert per_batch[batch_id] == rows, f"data source batch {batch_id}"
    assert all(ids[i] == 1 for i in ds_ids)
    for r in got.records:
        assert json.loads(r.value)["n"] == int(r.key)

    # (PLAINTEXT: the password is read but not used; that it never shows once it is in the
    # producer conf is the next test's.)


def test_notebook_sasl_conf_uses_the_secret_and_never_shows_it(spark, tmp_path, caplog, capfd) -> None:
    """With SASL the password from the scope goes into the producer conf, and nowhere visible."""
    caplog.set_level(logging.DEBUG)
    secret = f"nb-s3cret-{uuid.uuid4().hex}"
    dbutils = FakeDbutils({"bootstrap": "broker-1:9093", "wal_dir": str(tmp_path / "wal"),
                           "security_protocol": "SASL_SSL", "sasl_username": "alice"}, secret)
    ns, shown = _run(spark, dbutils, until="writeStream")  # up to the sink, no query started
    conf = ns["kafka_conf"]
    assert conf["sasl.password"] == secret and conf["sasl.username"] == "alice"
    assert conf["security.protocol"] == "SASL_SSL" and conf["sasl.mechanism"] == "PLAIN"
    assert shown == []
    out, err = capfd.readouterr()
    assert "broker-1:9093" in out, "the settings cell prints the settings"
    assert "sasl.password" in repr(ns["sink"]), "the sink's repr lists the option ..."
    for where, text in (("stdout", out), ("stderr", err), ("log", caplog.text), ("sink", repr(ns["sink"]))):
        assert secret not in text, f"... but the secret appeared in the {where}"
