"""Fixtures of the fault suite: a scenario row recorded whatever the outcome, brokers and a cluster that can be hurt.

The shared fixtures (``spark``, ``broker``, ``own_broker``, ``hooks``)
come from ``tests/conftest.py``.
"""

from __future__ import annotations

import os
import subprocess
import time
import uuid
from typing import Any, Iterator

import pytest

from tests.kafka_helpers import create_topic

from .brokers import HurtableBroker
from .cluster import KafkaCluster
from .scenario_results import ScenarioRow, record_result


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: Any, call: Any) -> Iterator[None]:
    outcome = yield
    rep = outcome.get_result()
    setattr(item, f"rep_{rep.when}", rep)


@pytest.fixture
def scenario(request: Any) -> Iterator[ScenarioRow]:
    """The test's result row: filled by the test, written to the results JSON at teardown."""
    row = ScenarioRow(scenario=request.node.name, title="")
    t0 = time.monotonic()
    yield row
    row.seconds = round(time.monotonic() - t0, 1)
    row.finished_at = time.strftime("%Y-%m-%dT%H:%M:%S")
    call = getattr(request.node, "rep_call", None)
    setup = getattr(request.node, "rep_setup", None)
    if call is None:
        row.status = "skipped" if setup is not None and setup.skipped else "error"
        if setup is not None and setup.skipped:
            row.failure = str(setup.longrepr[2]) if isinstance(setup.longrepr, tuple) else str(setup.longrepr)
    elif call.skipped:
        row.status = "skipped"
        row.failure = str(call.longrepr[2]) if isinstance(call.longrepr, tuple) else str(call.longrepr)
    elif call.failed:
        row.status = "failed"
        crash = getattr(call.longrepr, "reprcrash", None)
        row.failure = (crash.message if crash is not None else str(call.longrepr))[:2000]
    else:
        row.status = "passed"
    record_result(row)


def new_topic(bootstrap: str, partitions: int = 3, prefix: str = "f") -> str:
    name = f"{prefix}-{uuid.uuid4().hex[:10]}"
    create_topic(bootstrap, name, partitions=partitions)
    return name


def sink_name(tag: str) -> str:
    return f"{tag}-{uuid.uuid4().hex[:6]}"


@pytest.fixture
def proxied_broker(tmp_path: Any) -> Iterator[HurtableBroker]:
    """A broker of this test's own behind a TcpProxy (faults target the sink's client.id)."""
    b = HurtableBroker(str(tmp_path / "kafka")).start()
    yield b
    b.stop()


@pytest.fixture(scope="module")
def kafka_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
    """A three-node KRaft cluster (tests/faults/cluster.py) shared by the scenarios of one module."""
    c = KafkaCluster(str(tmp_path_factory.mktemp("cluster"))).start()
    yield c
    c.stop()


@pytest.fixture
def cluster(kafka_cluster: KafkaCluster) -> KafkaCluster:
    """The module's cluster as a scenario starts from it: every node running, none paused, every replica in sync."""
    kafka_cluster.heal()
    return kafka_cluster


@pytest.fixture
def local_runtimes() -> Iterator[None]:
    """For tests that call write_partition in this process: close its runtimes afterwards."""
    from spark_recoverable_sink.task.runtime import reset_runtimes

    yield
    reset_runtimes()


def pytest_collection_modifyitems(config: Any, items: list[Any]) -> None:
    here = os.path.dirname(__file__)
    for item in items:
        if str(item.fspath).startswith(here):
            item.add_marker(pytest.mark.faults)


def pytest_configure(config: Any) -> None:
    config.addinivalue_line("markers", "faults: fault-injection scenario (tests/faults)")


def _engines() -> list[Any]:
    from spark_recoverable_sink.native import library

    return [pytest.param("native", marks=pytest.mark.skipif(
        not library.available(), reason=f"the native extension is not built here: {library.why_unavailable()}")),
            "python"]


#: The delivery engines a scenario runs under (``@pytest.mark.parametrize("engine", ENGINES)``).
ENGINES = _engines()


def engine_suffix(engine: str) -> str:
    """The scenario name's suffix: none for the default (native) engine, ``_python`` for the Python one."""
    return "" if engine == "native" else f"_{engine}"


def mount_tmpfs(path: str, size: str) -> None:
    """Mount a size-limited tmpfs at ``path`` (a real ENOSPC); skips the test, saying why, where mount is refused."""
    os.makedirs(path)
    p = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", path], capture_output=True)
    if p.returncode != 0:
        pytest.skip(f"cannot mount a {size} tmpfs for ENOSPC: {p.stderr.decode().strip()}")


def unmount(path: str) -> None:
    for _ in range(20):
        if subprocess.run(["umount", path], capture_output=True).returncode == 0:
            return
        time.sleep(0.2)


@pytest.fixture
def tmpfs_dir(tmp_path: Any) -> Iterator[str]:
    """A 2 MiB tmpfs: a disk that fills up for real."""
    d = str(tmp_path / "tmpfs")
    mount_tmpfs(d, "2m")
    yield d
    unmount(d)
