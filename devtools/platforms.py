"""The managed platforms users run PySpark on, in one list, and the per-platform table rendered from it.

:data:`PLATFORMS` says, per platform, what the package's requirements
(Python 3.11+ on the driver and every executor, PySpark 3.5 to 4.3) mean
there: its Spark, its default Python, whether and how Python 3.11+ runs the
driver and the executors, which entry points of the package work, how the
package reaches the nodes. Every fact comes from the platform's own
documentation, listed in :data:`SOURCES` and cited per row; what could not be
confirmed there says ``not confirmed``. The entry points are not written by
hand: they come from the package's own version checks
(:mod:`spark_recoverable_sink.driver.versions`) for the platform's PySpark.

:func:`platforms_table` is rendered into ``docs/compatibility.md`` between
:data:`BEGIN` and :data:`END` by ``python -m devtools.sparkversions``
(``--check`` exits 1 when the file differs). Dev-only: nothing here runs on a
cluster or pickles.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Source", "Platform", "SOURCES", "PLATFORMS", "NOT_CONFIRMED", "BEGIN", "END", "entry_points",
           "cited", "platforms_table"]

BEGIN = "<!-- BEGIN platforms -->"
END = "<!-- END platforms -->"
#: What a cell says when the platform's documentation did not confirm the fact.
NOT_CONFIRMED = "not confirmed"


@dataclass(frozen=True)
class Source:
    """A page of a platform's documentation that a row of :data:`PLATFORMS` cites."""

    key: str
    title: str
    url: str


@dataclass(frozen=True)
class Platform:
    """One managed platform, as its documentation describes it.

    ``pyspark``: the PySpark version the entry points are read for (the
    platform's Spark), ``None`` where it is not confirmed or not pinned.
    ``connect``: the user's session is a Spark Connect client (serverless,
    standard access mode): ``foreachBatch`` runs through Connect and needs
    ``run_id=``. ``databricks``: the package goes in as the platform wheel
    with the native engine, as ``templates/databricks_notebook.py`` installs it.
    ``sources``: keys of :data:`SOURCES`, at least one.
    """

    name: str
    spark: str
    pyspark: str | None
    python: str
    python_311: str
    install: str
    sources: tuple[str, ...]
    connect: bool = False
    databricks: bool = False


SOURCES: tuple[Source, ...] = (
    Source("emr-apps", "Amazon EMR: application versions in Amazon EMR 7.x releases (Python row)",
           "https://docs.aws.amazon.com/emr/latest/ReleaseGuide/emr-release-app-versions-7.x.html"),
    Source("emr-spark", "Amazon EMR: Spark release history (emr-7.13.0: Spark 3.5.6-amzn-2)",
           "https://docs.amazonaws.cn/en_us/emr/latest/ReleaseGuide/Spark-release-history.md"),
    Source("emr-ami", "Amazon EMR: using the default Amazon Linux AMI (AL2023 for Amazon EMR 7.x)",
           "https://docs.aws.amazon.com/en_us/emr/latest/ManagementGuide/emr-default-ami.html"),
    Source("al2023-python", "Amazon Linux 2023: Python in AL2023 (/usr/bin/python3 is 3.9; python3.11 alongside)",
           "https://docs.amazonaws.cn/en_us/linux/al2023/ug/python.md"),
    Source("emr-spark-env", "Amazon EMR: configure Spark (the spark-env classification sets spark-env.sh)",
           "https://docs.aws.amazon.com/emr/latest/ReleaseGuide/emr-spark-configure.html"),
    Source("emr-pyspark-python", "AWS re:Post Knowledge Center: PYSPARK_PYTHON through the spark-env "
                                 "classification's export (Japanese edition)",
           "https://repost.aws/ja/knowledge-center/emr-pyspark-python-3x"),
    Source("emr-bootstrap", "Amazon EMR: create bootstrap actions to install additional software",
           "https://docs.aws.amazon.com/ElasticMapReduce/latest/ManagementGuide/emr-plan-bootstrap.html"),
    Source("glue", "AWS Glue versions (5.1: Spark 3.5.6, Python 3.11; 5.0: Spark 3.5.4, Python 3.11, "
                   "requirements.txt)",
           "https://docs.aws.amazon.com/glue/latest/dg/release-notes.html"),
    Source("dataproc-versions", "Dataproc image versions (2.2-debian12, 2.3-debian12 GA 2025/06/09, "
                                "3.0-debian12 Preview)",
           "https://cloud.google.com/dataproc/dataproc-versions"),
    Source("dataproc-2.3", "Dataproc 2.3.x release versions (Apache Spark 3.5.3)",
           "https://cloud.google.com/dataproc/docs/concepts/versioning/dataproc-release-2.3"),
    Source("dataproc-notes", "Dataproc release notes (2025-09-08: image 3.0 Preview, Spark 4.0.0, Python 3.11)",
           "https://cloud.google.com/dataproc/docs/release-notes/service"),
    Source("dataproc-python", "Dataproc: configure the cluster's Python environment",
           "https://cloud.google.com/dataproc/docs/tutorials/python-configuration"),
    Source("dbr-versions", "Databricks Runtime release notes versions and compatibility (15.4 LTS: 3.5.0, "
                           "16.4 LTS: 3.5.2, 17.3 LTS: 4.0.0)",
           "https://learn.microsoft.com/en-us/azure/databricks/runtime/"),
    Source("dbr-18", "Databricks Runtime releases (18 LTS: Apache Spark 4.1.0, released 2026-06-10)",
           "https://docs.azure.cn/zh-tw/databricks/release-notes/runtime/"),
    Source("dbr-15.0", "Databricks Runtime 15.0: libraries in the DBFS root disabled by default; workspace "
                       "files or Unity Catalog volumes instead",
           "https://docs.databricks.com/gcp/en/archive/runtime-release-notes/15.0"),
    Source("dbx-envs", "Databricks environment versions (serverless; a client API based on Spark Connect)",
           "https://learn.microsoft.com/en-ca/azure/databricks/release-notes/serverless/environment-version/"),
    Source("dbx-connect-limits", "Limitations with Databricks Connect for Python (no SparkContext; serverless "
                                 "UDFs and custom libraries)",
           "https://docs.databricks.com/en/dev-tools/databricks-connect/python/limitations.html"),
)
_BY_KEY = {s.key: s for s in SOURCES}

_EMR_INSTALL = ("a bootstrap action (it runs on every node, nodes added later too) installing the wheel into "
                "that Python: `python3.11 -m pip install ...`")
_DBR_INSTALL = ("the platform wheel with the native engine, `%pip install` by its full path from a Unity Catalog "
                "volume or workspace files (templates/databricks_notebook.py); libraries in the DBFS root are disabled "
                "by default from Databricks Runtime 15.0")
_DBR_PYTHON = f"{NOT_CONFIRMED} (the runtime's release notes, System environment)"

PLATFORMS: tuple[Platform, ...] = (
    Platform("Amazon EMR 7.x on EC2", "3.5 (3.5.6-amzn-2 in 7.13.0)", "3.5.6",
             "3.9: `/usr/bin/python3`, the system Python of Amazon Linux 2023 (EMR 7.x's OS)",
             "yes from 7.1.0 (3.9 and 3.11 installed; 7.0.0: 3.9 only): `PYSPARK_PYTHON=/usr/bin/python3.11` "
             "in the `spark-env` configuration classification (`export`), for the driver and the executors",
             _EMR_INSTALL,
             ("emr-apps", "emr-spark", "emr-ami", "al2023-python", "emr-spark-env", "emr-pyspark-python",
              "emr-bootstrap")),
    Platform("AWS Glue 5.0", "3.5.4", "3.5.4", "3.11", "yes: 3.11 is the Python of Spark jobs",
             "`requirements.txt` for additional Python libraries (new in 5.0); that it takes this package's "
             f"native manylinux wheel: {NOT_CONFIRMED}", ("glue",)),
    Platform("AWS Glue 5.1", "3.5.6", "3.5.6", "3.11 (5.1 is the default for jobs created without a version)",
             "yes: 3.11 is the Python of Spark jobs", f"{NOT_CONFIRMED} (`requirements.txt` is documented for 5.0)",
             ("glue",)),
    Platform("Google Dataproc 2.2 on Compute Engine", NOT_CONFIRMED, None, NOT_CONFIRMED, NOT_CONFIRMED,
             f"{NOT_CONFIRMED} (Dataproc documents each image's interpreter on its Python configuration page)",
             ("dataproc-versions", "dataproc-python")),
    Platform("Google Dataproc 2.3 on Compute Engine", "3.5.3", "3.5.3", NOT_CONFIRMED, NOT_CONFIRMED,
             NOT_CONFIRMED, ("dataproc-versions", "dataproc-2.3", "dataproc-python")),
    Platform("Google Dataproc 3.0 on Compute Engine (Preview)", "4.0.0", "4.0.0", "3.11", "yes: 3.11",
             NOT_CONFIRMED, ("dataproc-versions", "dataproc-notes")),
    Platform("Databricks Runtime 15.4 LTS", "3.5.0", "3.5.0", _DBR_PYTHON, NOT_CONFIRMED, _DBR_INSTALL,
             ("dbr-versions", "dbr-15.0"), databricks=True),
    Platform("Databricks Runtime 16.4 LTS", "3.5.2", "3.5.2", _DBR_PYTHON, NOT_CONFIRMED, _DBR_INSTALL,
             ("dbr-versions", "dbr-15.0"), databricks=True),
    Platform("Databricks Runtime 17.3 LTS", "4.0.0", "4.0.0", _DBR_PYTHON, NOT_CONFIRMED, _DBR_INSTALL,
             ("dbr-versions", "dbr-15.0"), databricks=True),
    Platform("Databricks Runtime 18 LTS", "4.1.0", "4.1.0", _DBR_PYTHON, NOT_CONFIRMED, _DBR_INSTALL,
             ("dbr-18", "dbr-15.0"), databricks=True),
    Platform("Databricks standard (shared) access mode", "the runtime's (rows above)", None,
             "the runtime's (rows above)", "as the runtime",
             f"as the runtime; that the session is a Spark Connect client (no SparkContext): per "
             f"templates/databricks_notebook.py, {NOT_CONFIRMED} in the platform's pages",
             ("dbx-connect-limits",), connect=True, databricks=True),
    Platform("Databricks serverless (environment versions 2 to 5)",
             "managed by Databricks, not pinned: the environment pins the client (Databricks Connect 15.4.5, "
             "16.4.2, 17.x, 18 in environments 2, 3, 4, 5)", None,
             "3.11.10 (environment 2), 3.12.3 (environments 3, 4, 5); environment 1: 3.10.12",
             "yes from environment 2; not environment 1",
             f"the wheel from a volume or workspace files: {NOT_CONFIRMED} on serverless, nor a local disk for "
             "`wal_dir`; Databricks Connect 16.3 and below: serverless UDFs cannot include custom libraries "
             "(the sink's tasks run this package)",
             ("dbx-envs", "dbx-connect-limits"), connect=True, databricks=True),
)


def entry_points(p: Platform) -> str:
    """The package's entry points on ``p``, from the package's version checks for its PySpark.

    Raises:
        ValueError: ``p.pyspark`` is not a version.
    """
    from spark_recoverable_sink.driver.versions import features, parse_version

    points = ["`foreachBatch(sink)` through Spark Connect (pass `run_id=`)" if p.connect else "`foreachBatch(sink)`",
              "`sink.write(df)`"]
    if p.pyspark is None:
        points.append(f'`format("recoverable-kafka")`: {NOT_CONFIRMED} (needs PySpark 4.1\'s streaming Arrow writer)')
    elif features(parse_version(p.pyspark)).python_data_source:
        points.append('`format("recoverable-kafka")`')
    else:
        points.append(f'not `format("recoverable-kafka")` (Spark {p.pyspark}: it needs PySpark 4.1)'
                      + ("; the sink checks by import, so a runtime with the streaming Arrow writer back-ported "
                         f"would run it: {NOT_CONFIRMED}" if p.databricks else ""))
    return ", ".join(points)


def cited() -> tuple[Source, ...]:
    """The sources the rows cite, in the order of first citation (their numbers in the table).

    Raises:
        KeyError: a row cites a key missing from :data:`SOURCES`.
    """
    order: list[Source] = []
    for p in PLATFORMS:
        for key in p.sources:
            if _BY_KEY[key] not in order:
                order.append(_BY_KEY[key])
    return tuple(order)


def platforms_table() -> str:
    """The per-platform table, Markdown, one row per :data:`PLATFORMS`, and its numbered Sources list under it."""
    numbers = {s.key: i for i, s in enumerate(cited(), 1)}
    rows = ["| Platform | Spark | Default Python | Python 3.11+ on the driver and the executors | Entry points "
            "| Installing the package | Sources |",
            "| --- | --- | --- | --- | --- | --- | --- |"]
    for p in PLATFORMS:
        refs = ", ".join(f"[{numbers[k]}]" for k in p.sources)
        rows.append(f"| {p.name} | {p.spark} | {p.python} | {p.python_311} | {entry_points(p)} | {p.install} "
                    f"| {refs} |")
    sources = [f"{i}. {s.title}: <{s.url}>" for i, s in enumerate(cited(), 1)]
    return "\n".join(rows) + "\n\nSources:\n\n" + "\n".join(sources) + "\n"
