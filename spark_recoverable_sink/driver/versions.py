"""What the installed PySpark offers the sink: every version check of the package, in one place.

The sink runs on PySpark 3.5 and 4.x (:data:`SUPPORTED`). Per version:

* ``format("recoverable-kafka")`` (:mod:`.datasource`) needs Python data
  sources with Arrow writers for both batch and streaming
  (``pyspark.sql.datasource.DataSourceStreamArrowWriter``, 4.1; 4.0 has
  data sources, but its streaming writer takes rows): on 3.5 and 4.0
  importing it raises :class:`.SparkVersionError` naming the version and
  ``foreachBatch(sink)``;
  (checked by importing them, not by the version number: a platform's
  PySpark, e.g. Databricks', may have them before 4.1);
* ``InheritableThread`` takes the session (``session=``, which carries Spark
  Connect's thread-local tags) from 4.0; on 3.5 it takes none and copies
  the job properties of a classic session only, which is all it needs there
  (a Connect client's tags are thread-local: the drain thread adds its own).

Everything else the package uses is in 3.5: ``mapInArrow``,
``spark_partition_id``, SparkContext job tags (``addJobTag``,
``cancelJobsWithTag``) and Spark Connect's (``addTag``, ``interruptTag``),
``TaskContext`` local properties, ``to_avro`` (``spark-avro`` built for
Scala 2.12 on 3.5, 2.13 on 4.x), Spark Connect's ``foreachBatch``.

Where it runs: the driver, when a sink is built or an entry point imported
(no version check is left for a batch to find). Nothing here pickles.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from ..errors import SparkVersionError

__all__ = ["SUPPORTED", "Features", "parse_version", "installed_version", "distribution_version", "features",
           "check_supported",
           "require_data_source", "inheritable_thread", "is_connect", "scala_binary"]

#: PySpark versions the sink supports: [3.5, 5).
SUPPORTED = ((3, 5, 0), (5, 0, 0))


@dataclass(frozen=True)
class Features:
    """What PySpark ``version`` offers the sink."""

    version: tuple[int, int, int]
    python_data_source: bool  # pyspark.sql.datasource's Arrow writers, streaming too: format("recoverable-kafka") (4.1)
    thread_session: bool  # InheritableThread(session=...) (4.0)
    real_time: bool  # trigger(realTime=...): Spark's real-time mode, foreach sinks only: sink.foreach_writer(df) (4.1)
    connect: bool  # a Spark Connect client with foreachBatch, tags and mapInArrow (3.5)

    @property
    def text(self) -> str:
        return ".".join(map(str, self.version))


def parse_version(text: str) -> tuple[int, int, int]:
    """``"3.5.7"`` -> ``(3, 5, 7)``; a suffix (``4.1.0.dev0``, ``3.5.2-databricks``) is ignored.

    Raises:
        ValueError: no ``major.minor`` at the start.
    """
    m = re.match(r"(\d+)\.(\d+)(?:\.(\d+))?", text.strip())
    if not m:
        raise ValueError(f"not a PySpark version: {text!r}")
    return int(m.group(1)), int(m.group(2)), int(m.group(3) or 0)


def installed_version() -> tuple[int, int, int] | None:
    """The importable PySpark's version, ``None`` without PySpark."""
    try:
        from pyspark.version import __version__
    except ImportError:
        return None
    return parse_version(__version__)


def distribution_version() -> tuple[int, int, int] | None:
    """The installed ``pyspark`` distribution's version, without importing PySpark; ``None`` when pip did not
    install it (a platform's own PySpark may have no distribution metadata) or it cannot be read."""
    from importlib import metadata

    try:
        return parse_version(metadata.version("pyspark"))
    except (metadata.PackageNotFoundError, ValueError):
        return None


def features(version: tuple[int, int, int] | None = None) -> Features:
    """What ``version`` (default: the installed PySpark) offers; an unknown one counts as the newest."""
    v = version or installed_version() or SUPPORTED[1]
    return Features(version=v, python_data_source=v >= (4, 1, 0), thread_session=v >= (4, 0, 0),
                    real_time=v >= (4, 1, 0), connect=v >= (3, 5, 0))


def check_supported(version: tuple[int, int, int] | None = None) -> None:
    """Refuse a PySpark the sink does not run on (no PySpark: nothing to check here).

    Raises:
        SparkVersionError: older than 3.5, or 5 and newer.
    """
    v = version or installed_version()
    if v is not None and not SUPPORTED[0] <= v < SUPPORTED[1]:
        text = ".".join(map(str, v))
        raise SparkVersionError("pyspark", f"PySpark {text} is not supported: the sink runs on PySpark 3.5 and "
                                           "4.x (pip install 'spark-recoverable-sink[spark]')", text)


def require_data_source(version: tuple[int, int, int] | None = None) -> None:
    """Refuse ``format("recoverable-kafka")`` where PySpark has no Python data sources with Arrow writers.

    The installed PySpark is asked by importing them; ``version`` (tables,
    tests) is judged by its number.

    Raises:
        SparkVersionError: they are missing (PySpark older than 4.1; the message names ``foreachBatch(sink)``).
    """
    if version is None:
        try:
            from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamArrowWriter  # noqa: F401
            return
        except ImportError:
            pass
    f = features(version)
    if version is None or not f.python_data_source:
        raise SparkVersionError(
            "format", f'format("recoverable-kafka") needs PySpark 4.1+ (Python data sources with a streaming '
                      f"Arrow writer, pyspark.sql.datasource.DataSourceStreamArrowWriter); this is PySpark {f.text}: "
                      "use foreachBatch(RecoverableKafkaSink(...)) for a streaming query or "
                      "RecoverableKafkaSink(...).write(df) for a batch, which run on 3.5 and 4.0", f.text)


def inheritable_thread(spark: Any, **kwargs: Any) -> Any:
    """A ``pyspark.InheritableThread`` carrying ``spark``'s job properties (4.0+: and its Connect tags).

    PySpark 3.5's takes no ``session``: it copies a classic session's job
    properties; under Spark Connect it is a plain thread.
    """
    from pyspark import InheritableThread

    if features().thread_session:
        return InheritableThread(session=spark, **kwargs)
    return InheritableThread(**kwargs)


def is_connect(spark: Any) -> bool:
    """Whether ``spark`` is a Spark Connect session (no SparkContext, no JVM on this side)."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


def scala_binary(version: str) -> str:
    """The Scala binary version of PyPI's PySpark ``version`` (its jars): 2.12 before 4.0, then 2.13."""
    try:
        return "2.12" if parse_version(version) < (4, 0, 0) else "2.13"
    except ValueError:
        return "2.13"
