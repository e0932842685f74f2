"""Shared fixtures: the test broker (Apache Kafka), a SparkSession, topic helpers, test hooks.

Three tiers: ``tests/unit`` (pure), ``tests/broker`` (real broker, no Spark),
``tests/spark`` (real Spark and the real broker). No broker mock anywhere.
``tests/faults`` mixes the last two (see its modules); ``tests/programs`` holds
the programs the tests start as separate processes.

Every test that needs Spark carries the ``spark`` marker, so that
``-m "not spark"`` (``make test-fast``) runs every test that does not: a test
using the ``spark`` fixture (directly or through another fixture) gets it from
:func:`pytest_collection_modifyitems`; a test that starts Spark itself
(spark-submit, ``local-cluster``, Spark Connect, a subprocess running Spark)
is marked in its module (``pytestmark = pytest.mark.spark``).

``make test`` runs the suite on two pytest-xdist workers (``-n 2 --dist
loadgroup``), then the tests marked ``alone`` by themselves. Every test that
uses the session's SparkSession goes to one worker (one ``xdist_group``, see
:func:`pytest_collection_modifyitems`: one SparkSession, not one per worker);
every other test is handed to whichever worker is free (``make test-compat``
groups each Spark release's tests the same way: tests/compat/conftest.py). Each worker has its
own session broker, hook directory (``RKS_HOOK_DIR``) and ``tmp_path`` root,
and takes its ports from a range of its own below the kernel's ephemeral
range (``RKS_PORT_RANGE``, see devtools/processes.py): a broker restarted on
its ports cannot lose one to the other worker while it is down.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
import uuid
from typing import Any, Iterator

import pytest

# Test hooks (tests/hooks.py) on the sink's named points, in every process of the
# session: set before Spark (and its Python workers) exist, so every worker
# inherits them. Workers import ``tests.hooks`` themselves: the repository root
# goes on their PYTHONPATH (Spark appends the inherited PYTHONPATH to its own).
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
#: Under pytest-xdist, worker ``gwN`` of ``W`` takes ports from the N-th of W equal ranges of [16384, 32768),
#: below Linux's ephemeral range (32768-60999: where every ``bind(0)`` of any process lands).
_WORKER, _WORKERS = os.environ.get("PYTEST_XDIST_WORKER", ""), os.environ.get("PYTEST_XDIST_WORKER_COUNT", "")
if _WORKER.startswith("gw") and _WORKER[2:].isdigit() and _WORKERS.isdigit():
    _size = 16384 // max(1, int(_WORKERS))
    _low = 16384 + int(_WORKER[2:]) * _size
    os.environ["RKS_PORT_RANGE"] = f"{_low}-{_low + _size - 1}"
HOOK_DIR = tempfile.mkdtemp(prefix="rks-hooks-")
os.environ["RKS_TEST_HOOKS"] = "tests.hooks"
os.environ["RKS_HOOK_DIR"] = HOOK_DIR
_pp = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
if REPO not in [os.path.abspath(p) for p in _pp]:
    os.environ["PYTHONPATH"] = os.pathsep.join(_pp + [REPO])
# Every JVM the tests start (Spark drivers and executors, spark-submit, Spark Connect, brokers) compiles with C1
# alone, as the test brokers always did: a test JVM lives seconds to minutes, and C2's compiler threads took 59%
# of the session SparkSession JVM's CPU over a make test (137 of 232 s, measured) on a 2-core machine. The
# benchmarks (bench/) run outside pytest, with the JVM's defaults. RKS_TEST_JIT=full keeps the defaults here too.
if os.environ.get("RKS_TEST_JIT") != "full" and "TieredStopAtLevel" not in os.environ.get("JDK_JAVA_OPTIONS", ""):
    os.environ["JDK_JAVA_OPTIONS"] = f"{os.environ.get('JDK_JAVA_OPTIONS', '')} -XX:TieredStopAtLevel=1".strip()
# ... and maps the classes an earlier Spark driver of this venv loaded, archived by `make jars` (devtools/cds.py: a
# driver's start and first jobs take about 40% less CPU); RKS_TEST_CDS=off leaves them out.
if os.environ.get("RKS_TEST_CDS") != "off" and "SharedArchiveFile" not in os.environ.get("JDK_JAVA_OPTIONS", ""):
    from devtools.cds import spark_archive, use_options
    from devtools.jvm import MavenError, java

    try:
        _cds = use_options(spark_archive(java()))
    except (MavenError, OSError, ImportError):  # no Java (the tests that need one say so), no cache: no archive
        _cds = ()
    if _cds and not any(" " in o for o in _cds):
        os.environ["JDK_JAVA_OPTIONS"] = f"{os.environ.get('JDK_JAVA_OPTIONS', '')} {' '.join(_cds)}".strip()
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)

from devtools.kafka_broker import KafkaBroker, external_bootstrap  # noqa: E402

from .hooks import Hooks  # noqa: E402
from .kafka_helpers import create_topic, read_topic  # noqa: E402,F401


class ExternalCluster:
    """An existing cluster named by ``KAFKA_BOOTSTRAP``: its address only (it cannot be paused or killed)."""

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap


@pytest.fixture(scope="session")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaBroker | ExternalCluster]:
    """The session's Apache Kafka broker (single-node KRaft, on free loopback ports), or ``KAFKA_BOOTSTRAP``'s cluster."""
    external = external_bootstrap()
    if external:
        yield ExternalCluster(external)
        return
    b = KafkaBroker(str(tmp_path_factory.mktemp("kafka"))).start()
    yield b
    b.stop()


@pytest.fixture
def own_broker(tmp_path: Any) -> Iterator[KafkaBroker]:
    """A broker of this test's own, for tests that pause, kill or restart it (always local, whatever ``KAFKA_BOOTSTRAP``)."""
    b = KafkaBroker(str(tmp_path / "kafka")).start()
    yield b
    b.stop()


@pytest.fixture
def topic(broker: KafkaBroker) -> str:
    name = f"t-{uuid.uuid4().hex[:10]}"
    create_topic(broker.bootstrap, name, partitions=3)
    return name


@pytest.fixture
def hooks() -> Iterator[Hooks]:
    """Park or crash processes at the sink's named points (see tests/hooks.py); reset after the test."""
    h = Hooks(HOOK_DIR)
    h.reset()
    yield h
    h.reset()  # releases whatever is still parked, disarms the rest


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """One SparkSession per test session: local[2,3] (two cores, task retries allowed), with Spark's Avro package
    and Kafka connector (Spark's own sink and source beside ours)."""
    from pyspark.sql import SparkSession

    from devtools.jvm import spark_avro_jars, spark_kafka_connector_jars

    t = time.monotonic()
    session = (
        SparkSession.builder.master("local[2,3]")
        .appName("spark-recoverable-sink-tests")
        .config("spark.jars", ",".join(spark_avro_jars() + spark_kafka_connector_jars()))
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.sql.execution.arrow.maxRecordsPerBatch", "2000")
        .config("spark.python.worker.reuse", "true")
        .config("spark.sql.streaming.stopTimeout", "30s")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    print(f"SparkSession up in {time.monotonic() - t:.1f}s", file=sys.stderr)
    yield session
    session.stop()


@pytest.fixture(scope="session")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """One Schema Registry server (Apicurio Registry's Confluent API) per test session, HTTP basic auth, a random password."""
    import secrets

    from devtools.schema_registry import SchemaRegistry

    r = SchemaRegistry(str(tmp_path_factory.mktemp("registry")), user="sink", password=secrets.token_hex(8)).start()
    yield r
    r.stop()


#: The pytest-xdist group of every test that uses the session's SparkSession (one worker runs them all).
SPARK_SESSION_GROUP = "spark-session"


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's own, which reads the groups to name the work units
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark ``spark`` every test that uses the ``spark`` fixture, directly or through another fixture, and put it
    in the xdist group :data:`SPARK_SESSION_GROUP` (with ``--dist loadgroup``: one worker, one SparkSession)."""
    for item in items:
        if "spark" in getattr(item, "fixturenames", ()):
            if item.get_closest_marker("spark") is None:
                item.add_marker(pytest.mark.spark)
            item.add_marker(pytest.mark.xdist_group(SPARK_SESSION_GROUP))


@pytest.hookimpl(tryfirst=True)  # before any fixture is set up (a SparkSession, a broker)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """Fail a grouped test that pytest-xdist did not put in its group (pytest 9.2, see pyproject.toml's dev extra).

    pytest-xdist names the group in the node id (``...@group``) to schedule it; pytest 9.2's node ids drop
    that name, and the tests of the group would then be silently spread over every worker.
    """
    if not item.config.getoption("loadgroup", default=False):  # True in xdist's workers under --dist loadgroup
        return
    if item.get_closest_marker("xdist_group") is not None and item.nodeid.rfind("@") <= item.nodeid.rfind("]"):
        pytest.fail(f"pytest-xdist did not put this test in its xdist_group (pytest {pytest.__version__}): "
                    "--dist loadgroup does not work with this pytest; install the dev extra's versions "
                    "(pyproject.toml)", pytrace=False)


@pytest.fixture(scope="session")
def secure_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A local broker that authenticates (tests/secure_broker.py): SASL PLAIN and SCRAM-SHA-512, OAUTHBEARER JWTs
    checked against the session's JWKS, TLS with the session's CA; its keys where every process finds them."""
    from .secure_broker import start_secure_broker

    b = start_secure_broker(str(tmp_path_factory.mktemp("secure-kafka")))
    yield b
    b.stop()
