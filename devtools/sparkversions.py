"""The Spark releases the tests run on, in one list, and the supported-versions table rendered from it.

:data:`RELEASES` is the one list: the main virtual environment's PySpark
(``pyproject.toml``'s dev extra, the whole suite) and one release per other
minor version, each run by the compatibility tier (``tests/compat``) in a
virtual environment of its own (:mod:`devtools.sparkenvs`). What a release
offers (its entry points) comes from the
package's own checks, :mod:`spark_recoverable_sink.driver.versions`, so the
table says what the sink does on that version.

``python -m devtools.sparkversions`` writes the table into
``docs/compatibility.md`` and ``README.md`` (its requirements) between
:data:`BEGIN` and :data:`END`, and the per-platform table of
:mod:`devtools.platforms` into ``docs/compatibility.md`` only, between its
markers; ``--check`` exits 1 when a file differs from the rendering.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass

__all__ = ["SparkRelease", "RELEASES", "MAIN", "COMPAT", "NOTEBOOK", "release", "versions_table", "render_doc", "DOC", "DOCS",
           "BEGIN", "END"]

_HERE = os.path.dirname(os.path.abspath(__file__))
DOC = os.path.join(os.path.dirname(_HERE), "docs", "compatibility.md")
#: Every file holding the versions table; :data:`DOC` holds the platforms table too.
DOCS = (DOC, os.path.join(os.path.dirname(_HERE), "README.md"))
BEGIN = "<!-- BEGIN versions -->"
END = "<!-- END versions -->"
#: The Python the tests run on, and the oldest the package installs on (pyproject.toml's requires-python).
TESTED_PYTHON = "3.11"
PACKAGE_PYTHON = "3.11"


@dataclass(frozen=True)
class SparkRelease:
    """One Spark release the tests run on.

    ``kafka_connector`` / ``avro``: Maven Central serves Spark's Kafka
    connector (``spark-sql-kafka-0-10``) / its Avro package for exactly this
    version (they must match Spark's version). ``pins``: further pip
    requirements of its virtual environment. ``main``: the main ``.venv``'s
    release (no venv of its own; the whole suite runs on it).
    """

    version: str
    scala: str
    pyspark_python: str  # the Python versions this PySpark release itself declares (its Requires-Python)
    kafka_connector: bool
    avro: bool
    pins: tuple[str, ...] = ()
    main: bool = False
    notes: str = ""

    @property
    def minor(self) -> str:
        return ".".join(self.version.split(".")[:2])


RELEASES: tuple[SparkRelease, ...] = (
    SparkRelease("3.5.7", "2.12", ">=3.8", kafka_connector=True, avro=True, pins=("pyarrow<26",),
                 notes="pyspark[connect] 3.5 needs numpy<2, which pyarrow 26 refuses: pyarrow<26"),
    SparkRelease("4.0.0", "2.13", ">=3.9", kafka_connector=True, avro=True),
    SparkRelease("4.1.1", "2.13", ">=3.10", kafka_connector=True, avro=True,
                 notes="Spark's Kafka source of 4.1.1 can fail a query in its progress metrics after a batch "
                       "(SPARK-55271, a NullPointerException): the query restarts from its checkpoint"),
    SparkRelease("4.2.0", "2.13", ">=3.10", kafka_connector=True, avro=True, main=True,
                 notes="the main test environment: the whole suite"),
    SparkRelease("4.3.0", "2.13", ">=3.11", kafka_connector=False, avro=False,
                 notes="Maven Central serves no Kafka connector or Avro package of 4.3.0 yet: the compatibility tier "
                       "streams from files and checks the sink's error naming the missing Avro package"),
)
MAIN = next(r for r in RELEASES if r.main)
#: The releases the compatibility tier runs, each in its own virtual environment.
COMPAT = tuple(r for r in RELEASES if not r.main)
#: The compatibility releases whose application also runs templates/databricks_notebook.py's cells, as a script with
#: ``dbutils`` stood in for: a Spark 3.5 environment here; the 4.x one is the main release's
#: (tests/spark/test_notebook.py).
NOTEBOOK = tuple(r.version for r in COMPAT if r.version.startswith("3."))


def release(version: str) -> SparkRelease:
    """The release of ``version`` in :data:`RELEASES`.

    Raises:
        KeyError: not in the list.
    """
    for r in RELEASES:
        if r.version == version:
            return r
    raise KeyError(version)


def _entry_points(r: SparkRelease) -> str:
    from spark_recoverable_sink.driver.versions import features, parse_version

    f = features(parse_version(r.version))
    points = ["foreachBatch(sink)", "sink.write(df)"]
    if f.python_data_source:
        points.append('format("recoverable-kafka")')
    if f.real_time:
        points.append("real-time mode: foreach(sink.foreach_writer(df))")
    points.append("Spark Connect" if f.connect else "")
    return ", ".join(p for p in points if p)


def _notes(r: SparkRelease) -> str:
    from spark_recoverable_sink.driver.versions import features, parse_version

    f = features(parse_version(r.version))
    notes = []
    if not f.python_data_source:
        notes.append('format("recoverable-kafka") needs PySpark 4.1 (a streaming Arrow writer); importing it '
                     "raises SparkVersionError")
    if r.notes:
        notes.append(r.notes)
    return "; ".join(notes)


def versions_table() -> str:
    """The supported-versions table, Markdown, one row per release of :data:`RELEASES`."""
    from devtools.kafka_broker import kafka_version

    kafka = f"Apache Kafka {kafka_version()}"
    rows = ["| Spark | Python | Scala | Kafka (tested) | Spark's Kafka connector | Entry points | Notes |",
            "| --- | --- | --- | --- | --- | --- | --- |"]
    for r in RELEASES:
        connector = f"spark-sql-kafka-0-10_{r.scala}:{r.version}" if r.kafka_connector else "not on Maven Central"
        python = f"{PACKAGE_PYTHON}+ (tested {TESTED_PYTHON}; PySpark {r.version} itself: Python {r.pyspark_python})"
        spark = f"{r.minor}.x (tested {r.version})"
        rows.append(f"| {spark} | {python} | {r.scala} | {kafka} | {connector} | {_entry_points(r)} | {_notes(r)} |")
    return "\n".join(rows) + "\n"


def _replace(text: str, begin: str, end: str, block: str) -> str:
    start, stop = text.find(begin), text.find(end)
    if start < 0 or stop < start:
        raise ValueError(f"{begin} ... {end} not found in order")
    return text[: start + len(begin)] + "\n" + block + text[stop:]


def render_doc(text: str, platforms: bool = False) -> str:
    """``text`` with the table between :data:`BEGIN` and :data:`END` replaced by :func:`versions_table`, and
    with ``platforms`` the block between :data:`devtools.platforms.BEGIN` and ``END`` by its
    :func:`~devtools.platforms.platforms_table`.

    Raises:
        ValueError: the markers are missing or out of order.
    """
    text = _replace(text, BEGIN, END, versions_table())
    if platforms:
        from devtools import platforms as _platforms

        text = _replace(text, _platforms.BEGIN, _platforms.END, _platforms.platforms_table())
    return text


def main(argv: list[str]) -> int:
    """``python -m devtools.sparkversions [--check]``: write (or check) the tables in :data:`DOCS`."""
    sys.path.insert(0, os.path.dirname(_HERE))
    stale = []
    for doc in DOCS:
        with open(doc, encoding="utf-8") as f:
            text = f.read()
        rendered = render_doc(text, platforms=doc == DOC)
        if rendered == text:
            continue
        stale.append(doc)
        if "--check" not in argv:
            with open(doc, "w", encoding="utf-8") as f:
                f.write(rendered)
    if stale and "--check" in argv:
        print(f"{', '.join(stale)} differ from the rendered tables: run python -m devtools.sparkversions",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
