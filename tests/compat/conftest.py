"""Fixtures of the compatibility tier: the wheel of the tree under test, and one application run per release.

Every test here carries the ``spark`` marker (``make test-fast`` skips the
tier) and the ``compat`` marker (``make test-compat`` runs it alone). The
releases are devtools/sparkversions.py's ``COMPAT``; each one's virtual
environment and jars are built once on a machine (devtools/sparkenvs.py),
the wheel once per test session, installed into the run's own directory.
"""

from __future__ import annotations

import fcntl
import glob
import os
import secrets
import subprocess
import time
import warnings
from dataclasses import dataclass
from typing import Any, Iterator

import pytest

from devtools.cds import use_options
from devtools.cds_make import make_spark_archive
from devtools.processes import free_port
from devtools.sparkenvs import build_wheel, install_wheel, release_jars, spark_env
from devtools.sparkversions import COMPAT, NOTEBOOK, SparkRelease, release

from .harness import file_input, kafka_input, output_topics, run_app, tests_only_path

#: The output topics of one run (compat_app's and compat_client's scenarios).
OUTPUTS = ["write", "write_eo", "fb_alo", "fb_eo", "ds", "avro", "notebook", "cx_write", "cx_eo"]
APP_BOUND_S = 1200.0


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's own, which reads the groups (as tests/conftest.py's)
def pytest_collection_modifyitems(config: Any, items: list[Any]) -> None:
    """Mark the tier's tests ``spark`` and ``compat``; under ``--dist loadgroup`` the tests of one release go to one
    worker (xdist group ``compat-<version>``): its application runs once, on the worker that reads it back."""
    here = os.path.dirname(__file__)
    for item in items:
        if str(item.fspath).startswith(here):
            item.add_marker(pytest.mark.spark)
            item.add_marker(pytest.mark.compat)
            version = getattr(item, "callspec", None) and item.callspec.params.get("release_run")
            if version:
                item.add_marker(pytest.mark.xdist_group(f"compat-{version}"))


@dataclass
class ReleaseRun:
    """One release's application run: its spec (topics, input), its results, where the wheel went."""

    release: SparkRelease
    spec: dict[str, Any]
    results: dict[str, Any]
    site: str
    registry: Any
    seconds: float

    def result(self, name: str) -> dict[str, Any]:
        """Scenario ``name``'s result; fails the test (with the app's log) if it raised."""
        got = self.results.get(name)
        assert got is not None, f"PySpark {self.release.version}: no result for {name} (rc={self.results.get('app_rc')}," \
                                f" log {self.results.get('app_log')})"
        assert "error" not in got, f"PySpark {self.release.version} {name}: {got['error']}\n{got.get('trace', '')}"
        return got


@pytest.fixture(scope="session")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The package's wheel, built once per test run from this checkout (pytest-xdist's workers share it: the
    first to need it builds it under a lock in their common temporary directory, the others take it)."""
    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent  # every worker's basetemp is a folder of the run's own
    out = os.path.join(root, "rks-wheel")
    with open(os.path.join(root, "rks-wheel.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes (the build has a bound of its own)
        built = glob.glob(os.path.join(out, "spark_recoverable_sink-*.whl"))
        return built[0] if built else build_wheel(out)


def _jvm_options(python: str) -> str:
    """The release's JVMs as the main release's (tests/conftest.py): C1 alone, and the class-data archive of its
    own PySpark's driver (written once beside the release's cached venv, devtools/cds_make.py), when it can be."""
    opts = ["-XX:TieredStopAtLevel=1"] if os.environ.get("RKS_TEST_JIT") != "full" else []
    if os.environ.get("RKS_TEST_CDS") != "off":
        try:
            opts += use_options(make_spark_archive(python))
        except (RuntimeError, OSError, ValueError, subprocess.TimeoutExpired) as exc:  # only makes them faster
            warnings.warn(f"no class-data archive for {python}'s Spark (its JVMs start slower): {exc}", stacklevel=1)
    return " ".join(o for o in opts if " " not in o)


@pytest.fixture(scope="module", params=[r.version for r in COMPAT], ids=[f"pyspark-{r.version}" for r in COMPAT])
def release_run(request: Any, broker: Any, registry: Any, wheel: str,
                tmp_path_factory: pytest.TempPathFactory) -> Iterator[ReleaseRun]:
    """compat_app.py (and its Connect client) once for the release, in its environment, on the session's broker."""
    r = release(request.param)
    python = spark_env(r, wheel)
    base = str(tmp_path_factory.mktemp(f"pyspark-{r.version}"))
    site = install_wheel(python, wheel, os.path.join(base, "site"))
    jars = release_jars(r)
    source = kafka_input(broker.bootstrap) if r.kafka_connector else file_input(os.path.join(base, "src"))
    hook_dir = os.path.join(base, "hooks")
    os.makedirs(hook_dir)
    notebook = ["notebook"] if r.version in NOTEBOOK else []
    scenarios = ["installed", "write", "write_eo", "fb_alo", "fb_eo", "ds", "avro", *notebook, "connect"]
    spec = {"version": r.version, "bootstrap": broker.bootstrap, "work": os.path.join(base, "work"),
            "tag": secrets.token_hex(3), "rows": 2000, "jars": jars["kafka"] + jars["avro"] + jars["connect"],
            "connect_port": free_port(), "source": source, "outputs": output_topics(broker.bootstrap, OUTPUTS),
            "scenarios": scenarios, "avro_jar": bool(jars["avro"]),
            "registry": {"url": registry.url, "auth_env": "RKS_TEST_REGISTRY_AUTH"}}
    t = time.monotonic()
    results = run_app(python, [site, tests_only_path(base)], spec, hook_dir, APP_BOUND_S,
                      {"RKS_TEST_REGISTRY_AUTH": f"{registry.user}:{registry.password}",
                       "JDK_JAVA_OPTIONS": _jvm_options(python)})
    yield ReleaseRun(r, spec, results, site, registry, time.monotonic() - t)
