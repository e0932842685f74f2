"""Tier 3: the built wheels, installed in a clean virtual environment, write through the sink.

``python -m build`` makes the wheel and the sdist; a fresh venv installs the
wheel with its ``spark`` extra (from the package index or pip's cache) and
runs a small application from outside the repository, so that nothing is
imported from the checkout: ``sink.write(df)`` and ``format("recoverable-kafka")``
(found by name: the wheel ships the ``pyspark_recoverable_kafka`` module).

The manylinux wheel of ``make wheels`` (``devtools/build_wheels.sh`` for this
machine's architecture; its tool venv, with zig's cache, is kept beside Kafka's
jars in ``devtools.jvm.cache_root()``, the first run on a machine downloads the
tools from PyPI) is installed and run with no C compiler on ``PATH``, and writes
through the native delivery engine it ships. Wheels install with ``--no-compile``
(no ``.pyc`` written for PySpark's thousands of files: half the install time).
"""

from __future__ import annotations

from collections import Counter

import glob
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tarfile
import textwrap
import zipfile

import pytest

from devtools.jvm import cache_root

from ..kafka_helpers import read_topic
from ..record_ids import id_run

# The packaging checks run by `make test-wheels`, not in `make test`: about 6 minutes of building and installing
# (the suite's 30-minute budget); the compatibility tier (`make test-compat`) runs every release from the wheel
pytestmark = [pytest.mark.spark, pytest.mark.wheels]

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

APP = textwrap.dedent("""
    import json, shutil, sys
    import spark_recoverable_sink
    from pyspark.sql import SparkSession
    from spark_recoverable_sink import RecoverableKafkaSink
    from spark_recoverable_sink.native import library

    bootstrap, topic, wal, engine = sys.argv[1:5]
    spark = SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false").getOrCreate()
    df = spark.range(100).selectExpr("cast(id as string) as key", "cast(id as string) as value")
    report = RecoverableKafkaSink("wheel-write", {"bootstrap.servers": bootstrap}, topic=topic, wal_dir=wal,
                                  delivery_engine=engine).write(df)
    (df.write.format("recoverable-kafka").option("kafka.bootstrap.servers", bootstrap).option("topic", topic)
       .option("name", "wheel-ds").option("wal_dir", wal).option("delivery_engine", engine).mode("append").save())
    print(json.dumps({"module": spark_recoverable_sink.__file__, "rows": report.rows, "acked": report.acked,
                      "native": library.available(), "why": library.why_unavailable(),
                      "extension": getattr(library.module(), "__file__", None),
                      "compilers": {c: shutil.which(c) for c in ("cc", "gcc", "zig")}}))
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
    assert not any(n.startswith(("tests/", "devtools/", "bench/", "templates/")) for n in names)
    meta = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    pyspark_reqs = [line for line in meta.splitlines() if line.startswith("Requires-Dist: pyspark")]
    assert pyspark_reqs and all("extra ==" in line for line in pyspark_reqs), pyspark_reqs  # never required
    assert any(n.endswith("spark_recoverable_sink/py.typed") for n in tarfile.open(sdist).getnames())

    out = _install_and_write(wheel, _clean_env(), broker, topic, tmp_path, engine="auto")
    assert out["rows"] == out["acked"] == 100


def _install_and_write(wheel: str, env: dict[str, str], broker, topic: str, tmp_path, engine: str) -> dict:
    """Install ``wheel[spark]`` in a fresh venv, run :data:`APP` there with ``env``, check what reached the topic."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    py = str(venv / "bin" / "python")
    subprocess.run([py, "-m", "pip", "install", "--quiet", "--no-compile", f"{wheel}[spark]"], check=True,
                   capture_output=True, timeout=900, env=env)
    app = tmp_path / "app.py"
    app.write_text(APP)
    env = dict(env, PYSPARK_PYTHON=py, PYSPARK_DRIVER_PYTHON=py)
    p = subprocess.run([py, str(app), broker.bootstrap, topic, str(tmp_path / "wal"), engine], cwd=str(tmp_path),
                       capture_output=True, text=True, timeout=600, env=env)
    assert p.returncode == 0, p.stderr[-4000:]
    out = json.loads(p.stdout.strip().splitlines()[-1])
    assert out["module"].startswith(str(venv)), out  # imported from the wheel, not from the checkout
    got = read_topic(broker.bootstrap, topic, expected=200)
    per_run = sorted(Counter(id_run(rid) for rid in got.ids.elements()).values())
    assert per_run == [100, 100], per_run  # the data source's run and write()'s
    assert got.duplicates() == 0
    return out


# Names of C compilers (and their cross/versioned variants) kept off PATH by _no_compiler_env.
_COMPILER = re.compile(r"^(cc|c\+\+|c89|c99|cpp|tcc|icc|zig)(-[\d.]+)?$|gcc|g\+\+|clang")


def _no_compiler_env(tmp_path) -> dict[str, str]:
    """:func:`_clean_env` with a PATH of one directory: links to every program of PATH but C compilers."""
    env = _clean_env()
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    seen: set[str] = set()
    for d in env.get("PATH", "").split(os.pathsep):
        if not d or not os.path.isdir(d) or os.path.abspath(d).startswith(ROOT + os.sep):
            continue  # the checkout's venvs (test venv, build/wheelenv with zig) stay off PATH too
        for name in sorted(os.listdir(d)):
            path = os.path.join(d, name)
            if name not in seen and not _COMPILER.search(name) and os.path.isfile(path) and os.access(path, os.X_OK):
                seen.add(name)
                os.symlink(path, bin_dir / name)
    env["PATH"] = str(bin_dir)
    return env


ARCH = platform.machine()


@pytest.mark.skipif(ARCH not in ("x86_64", "aarch64") or sys.platform != "linux",
                    reason=f"make wheels builds manylinux wheels for x86_64 and aarch64, not {sys.platform}/{ARCH}")
def test_manylinux_wheel_writes_through_the_native_engine_with_no_compiler(broker, topic, tmp_path):
    dist = tmp_path / "dist"
    env = dict(_clean_env(), ARCHS=ARCH, OUT=str(dist), TOOLPY=sys.executable,
               WHEELENV=os.path.join(cache_root(), "wheelenv"))  # kept across clones, like Kafka's jars
    b = subprocess.run(["bash", os.path.join(ROOT, "devtools", "build_wheels.sh")], capture_output=True, text=True,
                       timeout=900, env=env, check=False)
    assert b.returncode == 0, (b.stdout + b.stderr)[-4000:]
    (wheel,) = glob.glob(str(dist / "*.whl"))
    assert os.path.basename(wheel).endswith(f"-cp311-abi3-manylinux2014_{ARCH}.manylinux_2_17_{ARCH}.whl"), wheel
    assert "spark_recoverable_sink/native/_rks_native.abi3.so" in zipfile.ZipFile(wheel).namelist()

    env = _no_compiler_env(tmp_path)
    assert not any(shutil.which(c, path=env["PATH"]) for c in ("cc", "gcc", "zig")), env["PATH"]
    out = _install_and_write(wheel, env, broker, topic, tmp_path, engine="native")  # pip compiles nothing
    assert out["compilers"] == {"cc": None, "gcc": None, "zig": None}, out
    assert out["native"] is True, out["why"]
    assert out["extension"].startswith(str(tmp_path / "venv")), out  # the wheel's extension
    assert out["rows"] == out["acked"] == 100
