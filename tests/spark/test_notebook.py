"""Tier 3: templates/databricks_notebook.py, its cell structure and a run of its code cells (PySpark 4.2).

The notebook's Python cells run in order against the local ``spark`` session
and the test broker; only the platform's globals are replaced
(tests/notebook_cells.py): a fake ``dbutils`` (widgets with the test's
settings, a secret scope, a recorded ``library.restartPython``) and
``display`` (records what it is given). The ``%pip`` and ``%md`` cells are not
Python and are only checked for shape. The same notebook on PySpark 3.5, from
the installed wheel: tests/compat/test_compat.py (the ``notebook`` scenario of tests/programs/compat_app.py).
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
from ..notebook_cells import DS_SKIPPED, HEADER, NOTEBOOK, FakeDbutils, cells, is_magic, run_cells
from ..record_ids import check_ids_per_group, id_batch, id_run, reported_rows, run_of

pytestmark = pytest.mark.spark

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
#: The platform wheel ``make wheels`` builds (devtools/build_wheels.sh), per architecture.
WHEEL = "spark_recoverable_sink-{version}-cp311-abi3-manylinux2014_{arch}.manylinux_2_17_{arch}.whl"


def _version() -> str:
    """The package version: the %pip cell names the wheel of this version (%pip takes a path, not a pattern)."""
    import tomllib

    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        return tomllib.load(f)["project"]["version"]


def _run(spark: Any, dbutils: FakeDbutils, until: str | None = None) -> tuple[dict[str, Any], list[Any]]:
    """Exec the Python cells in order (up to the first containing ``until``); returns the namespace, displayed."""
    shown: list[Any] = []
    return run_cells(spark, dbutils, shown.append, until=until), shown


def test_notebook_cell_structure() -> None:
    with open(NOTEBOOK, encoding="utf-8") as fh:
        text = fh.read()
    assert text.startswith(HEADER + "\n")
    nb = cells()
    assert text.count("# COMMAND ----------") == len(nb) - 1 and all(nb)
    md = [i for i, c in enumerate(nb) if c.startswith("# MAGIC %md")]
    assert md and md[0] == 0 and len(md) >= 4, "a title cell first, and text before each part"
    assert all(is_magic(nb[i]) for i in md)
    pip = [i for i, c in enumerate(nb) if c.startswith("# MAGIC %pip")]
    assert len(pip) == 1
    # the platform wheel by its full path on a volume (%pip reads no widget: the parts to replace as in Databricks'
    # docs), the restart right after it
    x86, arm = (WHEEL.format(version=_version(), arch=a) for a in ("x86_64", "aarch64"))
    assert nb[pip[0]] == f"# MAGIC %pip install /Volumes/<catalog>/<schema>/<volume>/wheels/{x86}"
    assert nb[pip[0] + 1] == "dbutils.library.restartPython()"
    # the text before it: both places to install from, both architectures, not the DBFS root
    install = nb[pip[0] - 1]
    assert install in (nb[i] for i in md) and "Graviton" in install and arm in install
    assert f"# MAGIC %pip install /Volumes/<catalog>/<schema>/<volume>/wheels/{x86}" in install
    assert f"# MAGIC %pip install /Workspace/Users/<user>/wheels/{x86}" in install
    assert not any("%pip install /dbfs" in c for c in nb)
    code = [i for i, c in enumerate(nb) if not is_magic(c)]
    assert all("# MAGIC" not in nb[i] for i in code)
    for i in code:
        ast.parse(nb[i])  # every code cell is Python
    imports = [i for i in code if "spark_recoverable_sink" in nb[i]]
    assert imports and min(imports) > pip[0] + 1, "the package is used only after it was installed"
    body = "\n".join(nb[i] for i in code)
    assert 'dbutils.secrets.get(scope=' in body and "/local_disk0/rks" in body
    assert '"/Volumes/<catalog>/<schema>/<volume>/checkpoints/' in body
    assert "foreachBatch(sink)" in body and 'format("recoverable-kafka")' in body
    assert "spark.dataSource.register(RecoverableKafkaDataSource)" in body
    assert 'delivery_engine="native"' in body and '.option("delivery_engine", "native")' in body
    assert "except SparkVersionError" in body and DS_SKIPPED in body
    assert "sink.drain(spark" in body
    text_md = "\n".join(nb[i] for i in md)
    for said in ("autoscaling", "spot", "ack_timeout_s > 0", "sink.drain(spark)", "already gone"):
        assert said in text_md, said


def test_notebook_runs_both_forms_against_the_broker(spark, broker, topic, tmp_path, capfd) -> None:
    secret = f"nb-s3cret-{uuid.uuid4().hex}"
    name = f"nb-{uuid.uuid4().hex[:8]}"
    dbutils = FakeDbutils({"bootstrap": broker.bootstrap, "topic": topic, "sink_name": name,
                           "wal_dir": str(tmp_path / "wal"), "checkpoint": str(tmp_path / "chk"),
                           "security_protocol": "PLAINTEXT", "rows_per_batch": "300", "batches": "2"}, secret)
    ns, shown = _run(spark, dbutils)
    out, _err = capfd.readouterr()

    assert dbutils.library.restartPython and dbutils.library.restarts == 1
    assert dbutils.secrets.calls == [("kafka", "password")], "the password comes from the secret scope"
    assert set(dbutils.widgets.read) == set(dbutils.widgets.defined)
    assert ns["kafka_conf"]["security.protocol"] == "PLAINTEXT" and "sasl.password" not in ns["kafka_conf"]

    # the engine cell: the driver and every executor it reached run the native engine it asked for
    sink = ns["sink"]
    assert sink.config.delivery_engine == "native"
    engines = ns["engines"]
    assert [e["where"] for e in engines][:1] == ["driver"] and len(engines) >= 2, engines
    assert all(e["engine"] == "native" and "librdkafka" in e["why"] for e in engines), engines
    assert "driver " in out and "executor " in out and "delivery engine native" in out

    # foreachBatch: the displayed reports are the sink's, every row they count is in the topic once; drained
    reports = list(sink.reports)
    assert len(reports) >= 2 and all(r.rows == 300 and r.dead_lettered == 0 for r in reports)
    assert ns["drained"].pending == 0, ns["drained"]
    assert len(shown) == 2
    table = [r.asDict() for r in shown[0].collect()]
    assert [(t["batch_id"], t["rows"], t["acked"], t["run"]) for t in table] == [
        (r.batch_id, r.rows, r.acked, r.run) for r in reports]
    expected = reported_rows(name, reports)
    # the data source section ran (PySpark 4.2): each batch Spark completed delivered its rows
    assert DS_SKIPPED not in out and ns["ds_query"] is not None
    progress = [(p["batchId"], p["numInputRows"]) for p in ns["ds_query"].recentProgress]
    assert len(progress) >= 2 and all(rows == 300 for _, rows in progress)
    assert [(r.batch_id, r.rows) for r in shown[1].collect()] == progress
    got = read_topic(broker.bootstrap, topic, expected=sum(expected.values()) + 300 * len(progress))
    ids = got.ids
    check_ids_per_group(ids, expected, others=True)
    ds_run = str(ns["ds_query"].id).replace("-", "")[:16]  # one streaming query: one run
    ds_ids = [i for i in ids if i and id_run(i) == run_of(f"{name}-ds", ds_run)]
    per_batch = Counter(id_batch(i) for i in ds_ids)
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
                           "checkpoint": str(tmp_path / "chk"), "security_protocol": "SASL_SSL",
                           "sasl_username": "alice"}, secret)
    ns, shown = _run(spark, dbutils, until="writeStream")  # up to the sink and its engine check, no query started
    conf = ns["kafka_conf"]
    assert conf["sasl.password"] == secret and conf["sasl.username"] == "alice"
    assert conf["security.protocol"] == "SASL_SSL" and conf["sasl.mechanism"] == "PLAIN"
    assert shown == []
    out, err = capfd.readouterr()
    assert "broker-1:9093" in out, "the settings cell prints the settings"
    assert "sasl.password" in repr(ns["sink"]), "the sink's repr lists the option ..."
    for where, text in (("stdout", out), ("stderr", err), ("log", caplog.text), ("sink", repr(ns["sink"]))):
        assert secret not in text, f"... but the secret appeared in the {where}"


def test_notebook_refuses_the_placeholder_checkpoint(tmp_path) -> None:
    """Left as shipped, the checkpoint widget names no real volume: the settings cell says what to set."""
    dbutils = FakeDbutils({"wal_dir": str(tmp_path / "wal")}, "unused")
    with pytest.raises(ValueError, match="set the checkpoint widget to a directory on your volume"):
        _run(None, dbutils, until="dbutils.secrets.get")  # the settings cell: no Spark needed
