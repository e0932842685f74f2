"""What the tests' JVM programs need: Java 17+, and jars from Maven Central fetched once with ``mvn``.

The cache is ``$RKS_KAFKA_CACHE`` (default ``~/.cache/spark-recoverable-sink``):
one folder per pom and version, complete once it holds a ``.complete`` stamp.
Two processes fetching the same jars at once take turns (``flock``). The
manylinux wheel test keeps its tool venv there as well (``wheelenv``, set up by
``devtools/build_wheels.sh``).
"""

from __future__ import annotations

import fcntl
import functools
import os
import re
import shutil
import subprocess
import tempfile
from typing import Callable

__all__ = ["MavenError", "cache_root", "java", "maven_jars", "pom_property", "spark_kafka_connector_jars",
           "spark_avro_jars", "spark_connect_jars", "maven_artifact"]

_HERE = os.path.dirname(os.path.abspath(__file__))
SPARK_KAFKA_POM = os.path.join(_HERE, "spark-kafka", "pom.xml")
#: Of the connector's closure, what PySpark does not ship.
SPARK_AVRO_POM = os.path.join(_HERE, "spark-avro", "pom.xml")
#: Spark Connect's server, which PySpark ships from 4.0 on (the compatibility tier's Spark 3.5 needs it).
SPARK_CONNECT_POM = os.path.join(_HERE, "spark-connect", "pom.xml")
SPARK_KAFKA_ARTIFACTS = ("spark-sql-kafka-0-10_{scala}", "spark-token-provider-kafka-0-10_{scala}", "kafka-clients",
                         "commons-pool2")


class MavenError(RuntimeError):
    """Java 17+ is missing, or the jars are not cached and Maven is missing or could not fetch them."""


def java() -> str:
    """Path of a Java 17+ ``java``.

    Raises:
        MavenError: none on PATH (nor in ``$JAVA_HOME``), or an older one.
    """
    home = os.environ.get("JAVA_HOME")
    java = os.path.join(home, "bin", "java") if home and os.path.exists(os.path.join(home, "bin", "java")) \
        else shutil.which("java")
    if not java:
        raise MavenError("Java 17 or newer is needed to run the test Kafka broker and Spark, and no `java` "
                               "is on PATH: install a JDK 17 (Debian/Ubuntu: apt-get install openjdk-17-jdk-headless)")
    major = _major(os.path.realpath(java))
    if major < 17:
        raise MavenError(f"Java 17 or newer is needed; {java} is version {major}: install a JDK 17")
    return java


@functools.lru_cache(maxsize=8)
def _major(java: str) -> int:
    """The major version of ``java`` (a JVM started once per binary and process: every broker start asks)."""
    out = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=60,
                         env={k: v for k, v in os.environ.items() if k != "JDK_JAVA_OPTIONS"}).stderr
    m = re.search(r'version "(\d+)(?:\.(\d+))?', out)
    major = int(m.group(1)) if m else 0
    if major == 1 and m and m.group(2):
        major = int(m.group(2))
    return major


def cache_root() -> str:
    return os.environ.get("RKS_KAFKA_CACHE") or os.path.join(os.path.expanduser("~"), ".cache",
                                                               "spark-recoverable-sink")


def pom_property(pom: str, name: str) -> str:
    """A ``<properties>`` value of ``pom``."""
    with open(pom) as f:
        m = re.search(rf"<{re.escape(name)}>([^<]+)</{re.escape(name)}>", f.read())
    assert m, f"no {name} in {pom}"
    return m.group(1)


def _fetch_once(name: str, what: str, args: list[str], ok: Callable[[str], bool]) -> str:
    """The folder ``<cache>/<name>``, filled once by ``mvn <args> -DoutputDirectory=<tmp>`` (``ok`` judges it).

    Raises:
        MavenError: it is not cached and ``mvn`` is not on PATH, or it fails.
    """
    root = cache_root()
    dest = os.path.join(root, name)
    stamp = os.path.join(dest, ".complete")
    if os.path.exists(stamp):
        return dest
    os.makedirs(root, exist_ok=True)
    with open(os.path.join(root, f".{name}.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another process may be fetching them right now
        if os.path.exists(stamp):
            return dest
        mvn = shutil.which("mvn")
        if not mvn:
            raise MavenError(f"Maven is needed once to fetch {what} from Maven Central and no `mvn` is on "
                             "PATH: install Maven 3.6+ (Debian/Ubuntu: apt-get install maven), or put the files "
                             f"in {dest} and create {stamp}")
        tmp = tempfile.mkdtemp(prefix=f"{name}-", dir=root)
        try:
            proc = subprocess.run([mvn, "-q", "-B", *args, f"-DoutputDirectory={tmp}"], capture_output=True,
                                  text=True, timeout=900)
        except subprocess.TimeoutExpired:
            shutil.rmtree(tmp, ignore_errors=True)
            raise MavenError(f"mvn did not fetch {what} within 900 s") from None
        if proc.returncode != 0 or not ok(tmp):
            shutil.rmtree(tmp, ignore_errors=True)
            raise MavenError(f"mvn could not fetch {what} (rc={proc.returncode}): "
                             f"{(proc.stdout + proc.stderr)[-2000:]}")
        shutil.rmtree(dest, ignore_errors=True)
        os.rename(tmp, dest)
        open(stamp, "w").close()
    return dest


def maven_jars(pom: str, name: str, artifacts: tuple[str, ...] = (), properties: dict[str, str] | None = None) -> str:
    """The folder ``<cache>/<name>`` holding the jars of ``pom``'s dependencies (only ``artifacts`` if given).

    ``properties`` override the pom's ``<properties>`` (``-Dname=value``).

    Raises:
        MavenError: they are not cached and ``mvn`` is not on PATH, or it fails.
    """
    args = ["-f", pom, "dependency:copy-dependencies", *(f"-D{k}={v}" for k, v in (properties or {}).items())]
    if artifacts:
        args.append("-DincludeArtifactIds=" + ",".join(artifacts))
    return _fetch_once(name, f"the jars of {pom}", args, lambda d: any(n.endswith(".jar") for n in os.listdir(d)))


def _spark_jars(pom: str, name: str, artifacts: tuple[str, ...], version: str | None, scala: str | None) -> list[str]:
    """The jars of one of the Spark poms, for ``version`` / ``scala`` (the pom's own when ``None``)."""
    version = version or pom_property(pom, "spark.version")
    scala = scala or pom_property(pom, "scala.binary.version")
    d = maven_jars(pom, f"{name}-{version}", tuple(a.format(scala=scala) for a in artifacts),
                   {"spark.version": version, "scala.binary.version": scala})
    return sorted(os.path.join(d, n) for n in os.listdir(d) if n.endswith(".jar"))


def spark_kafka_connector_jars(version: str | None = None, scala: str | None = None) -> list[str]:
    """Paths of Spark's Kafka connector jars that PySpark lacks (for ``--jars`` / ``spark.jars``).

    Of Spark ``version`` built for Scala ``scala`` (default: the pom's, the main test environment's).

    Raises:
        MavenError: as :func:`maven_jars`.
    """
    return _spark_jars(SPARK_KAFKA_POM, "spark-sql-kafka", SPARK_KAFKA_ARTIFACTS, version, scala)


def spark_avro_jars(version: str | None = None, scala: str | None = None) -> list[str]:
    """Path of Spark's Avro package jar (``to_avro``), which PySpark lacks (``version`` / ``scala`` as above).

    Raises:
        MavenError: as :func:`maven_jars`.
    """
    return _spark_jars(SPARK_AVRO_POM, "spark-avro", ("spark-avro_{scala}",), version, scala)


def spark_connect_jars(version: str | None = None, scala: str | None = None) -> list[str]:
    """Path of Spark Connect's server jar, for a PySpark that does not ship it (3.5; ``version`` / ``scala`` as above).

    Raises:
        MavenError: as :func:`maven_jars`.
    """
    return _spark_jars(SPARK_CONNECT_POM, "spark-connect", ("spark-connect_{scala}",), version, scala)


def maven_artifact(coordinate: str, name: str) -> str:
    """The folder ``<cache>/<name>`` holding one artifact (``group:artifact:version:type:classifier``), fetched once.

    Raises:
        MavenError: it is not cached and ``mvn`` is missing or fails.
    """
    return _fetch_once(name, coordinate, ["org.apache.maven.plugins:maven-dependency-plugin:3.8.1:copy",
                                          f"-Dartifact={coordinate}"], lambda d: bool(os.listdir(d)))
