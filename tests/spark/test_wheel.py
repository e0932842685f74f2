"""Tier 3: the built wheel, installed in a clean virtual environment, writes through the sink.

``python -m build`` makes the wheel and the sdist; a fresh venv installs the
wheel with its ``spark`` extra (from the package index or pip's cache) and
runs a small application from outside the repository, so that nothing is
imported from the checkout: ``sink.write(df)`` and ``format("recoverable-kafka")``
(found by name: the wheel ships the ``pyspark_recoverable_kafka`` module).
"""

from __future__ import annotations

import glob
import json
import os
import subprocess
import sys
import tarfile
import textwrap
import zipfile

import pytest

from ..kafka_helpers import read_topic

pytestmark = pytest.mark.spark

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

APP = textwrap.dedent("""
    import json, sys
    import spark_recoverable_sink
    from pyspark.sql import SparkSession
    from spark_recoverable_sink import RecoverableKafkaSink

    bootstrap, topic, wal = sys.argv[1:4]
    spark = SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false").getOrCreate()
    df = spark.range(100).selectExpr("cast(id as string) as key", "cast(id as string) as value")
    report = RecoverableKafkaSink("wheel-write", {"bootstrap.servers": bootstrap}, topic=topic, wal_dir=wal).write(df)
    (df.write.format("recoverable-kafka").option("kafka.bootstrap.servers", bootstrap).option("topic", topic)
       .option("name", "wheel-ds").option("wal_dir", wal).mode("append").save())
    print(json.dumps({"module": spark_recoverable_sink.__file__, "rows": report.rows, "acked": report.acked}))
    spark.stop()
""")


def _clean_env() -> dict[str, str]:
    """This environment without the test session's additions (repository path, test hooks, venv)."""
    drop = ("PYTHONPATH", "RKS_TEST_HOOKS", "RKS_HOOK_DIR", "VIRTUAL_ENV", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON")
    return {k: v for k, v in os.environ.items() if k not in drop}


def test_wheel_in_a_clean_venv_writes_through_the_sink(broker, topic, tmp_path):
    dist = tmp_path / "dist"
    subprocess.run([sys.executable, "-m", "build", "--outdir", str(dist), ROOT], check=True, capture_output=True,
                   timeout=600, env=_clean_env())
    (wheel,) = glob.glob(str(dist / "*.whl"))
    (sdist,) = glob.glob(str(dist / "*.tar.gz"))
    names = zipfile.ZipFile(wheel).namelist()
    assert "spark_recoverable_sink/py.typed" in names and "pyspark_recoverable_kafka.py" in names
    assert not any(n.startswith(("tests/", "devtools/", "bench/", "jobs/")) for n in names)
    meta = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    pyspark_reqs = [line for line in meta.splitlines() if line.startswith("Requires-Dist: pyspark")]
    assert pyspark_reqs and all("extra ==" in line for line in pyspark_reqs), pyspark_reqs  # never required
    assert any(n.endswith("spark_recoverable_sink/py.typed") for n in tarfile.open(sdist).getnames())

    venv = tmp_path / "venv"
    env = _clean_env()
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    py = str(venv / "bin" / "python")
    subprocess.run([py, "-m", "pip", "install", "--quiet", f"{wheel}[spark]"], check=True, capture_output=True,
                   timeout=900, env=env)
    app = tmp_path / "app.py"
    app.write_text(APP)
    env.update(PYSPARK_PYTHON=py, PYSPARK_DRIVER_PYTHON=py)
    p = subprocess.run([py, str(app), broker.bootstrap, topic, str(tmp_path / "wal")], cwd=str(tmp_path),
                       capture_output=True, text=True, timeout=600, env=env)
    assert p.returncode == 0, p.stderr[-4000:]
    out = json.loads(p.stdout.strip().splitlines()[-1])
    assert out["module"].startswith(str(venv)), out  # imported from the wheel, not from the checkout
    assert out["rows"] == out["acked"] == 100
    got = read_topic(broker.bootstrap, topic, expected=200)
    sinks = sorted(rid.split(":")[0] for rid in got.ids.elements())
    assert sinks == ["wheel-ds"] * 100 + ["wheel-write"] * 100
    assert got.duplicates() == 0
