"""At-least-once, driver: a batch of more Spark partitions than the cluster has cores, written by one task per core.

Spark starts a Python worker round trip for every task of a ``mapInArrow``
(tens of ms on a small machine, measured in docs/PERFORMANCE.md): at 200
partitions (Spark's default shuffle width) on 2 cores that alone took 5.6 s
per micro-batch, whatever the sink did. Coalescing (no shuffle) to the
cluster's cores gives the same parallelism for one round trip per core.
A batch whose partition count is known to be no more than the cores is left
as it is: tagging its rows costs a projection in the JVM and a column in
every Arrow batch (measured: 20 % of the sink's throughput at 2 partitions
on 2 cores, ``bench/results/20261126T193755-commits.json``) for nothing.
The count is read without running anything for a foreachBatch micro-batch
(Spark hands it over as an RDD), a DataFrame of an RDD or of local rows and
``spark.range``, cached or not, with no shuffle; anything else (a file,
table or Kafka scan; an adaptive plan, whose last stage is only sized once
its shuffles ran) is tagged as before.

Record ids must not change with it (:mod:`..ids`: a record's id names its
Spark partition), so each row carries its own partition's index,
``spark_partition_id()`` taken before the coalesce
(:data:`..task.coalesced.SOURCE_PARTITION`): a coalesced task writes each
partition's rows as that partition's own WAL attempt and id prefix. Ids are
then the same whether the batch is coalesced or not, and however Spark
groups the partitions.

What it costs: a coalesce without a shuffle narrows the whole last stage
(the reading and transforming before the sink run in those tasks too); it
groups partitions by count, not size (a skewed batch has stragglers); a
failed task re-sends a core's share of the batch rather than one
partition's. Under dynamic allocation the core count is only what is
registered now, and a stage of that many tasks would never ask for more
executors: there the batch is left as Spark split it.

The cores (:func:`session_cores`): Spark's default parallelism on classic
Spark. A Spark Connect session has no SparkContext; its configuration tells
them where it can: ``spark.default.parallelism`` if set, else the master's
(``local[N]``, ``local-cluster[N,C,M]``; ``local[*]``: this host's, where
the Connect server runs a foreachBatch function), else
``spark.executor.instances`` x ``spark.executor.cores`` when both are set.
Anywhere else (a cluster manager's master and no fixed executors) the cores
are not known and coalescing stays off: set ``spark.default.parallelism``
to the cluster's cores to turn it on.

Exactly-once's written batch is left alone: its units are lanes
(:mod:`.resplit`), and with ``exactly_once_lanes=0`` each Spark partition is
one. Its lane pass (which only tags rows with their lane before the shuffle)
is coalesced by the same rule, :func:`coalesce_width`, untagged.

Where it runs: the driver, once per batch (it only builds the plan).
"""

from __future__ import annotations

import os
import re
from typing import TYPE_CHECKING, Any

from ..config import EXACTLY_ONCE, SinkConfig
from ..task.coalesced import SOURCE_PARTITION

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import DataFrame

__all__ = ["cores_of", "session_cores", "lane_cores", "drain_tasks", "partitions_of", "coalesce_width",
           "dynamic_allocation", "one_task_per_core", "DRAIN_TASKS_UNKNOWN"]

#: A drain job's task count where the cores cannot be told (Spark Connect on a cluster manager with neither
#: spark.default.parallelism nor fixed executors set): a few per executor of a small cluster. Each task waits
#: at most the drain's timeout for its worker, so more tasks than cores would queue waits behind each other.
DRAIN_TASKS_UNKNOWN = 8

_LOCAL = re.compile(r"local(?:\[(\*|\d+)(?:\s*,\s*\d+)?\])?")
_LOCAL_CLUSTER = re.compile(r"local-cluster\[\s*(\d+)\s*,\s*(\d+)\s*,\s*\d+\s*\]")


def _conf(spark: Any, key: str) -> str | None:
    try:
        value = spark.conf.get(key, None)
    except Exception:  # noqa: BLE001 - not readable (a restricted Connect session): not known
        return None
    return None if value is None else str(value).strip()


def session_cores(spark: Any) -> int | None:
    """The cluster's cores, or ``None`` where they cannot be told (the rule: module doc)."""
    try:
        return max(1, int(spark.sparkContext.defaultParallelism))
    except Exception:  # noqa: BLE001 - Spark Connect: no SparkContext; its configuration below
        pass
    try:
        explicit = _conf(spark, "spark.default.parallelism")
        if explicit:
            return max(1, int(explicit))
        master = _conf(spark, "spark.master") or ""
        if m := _LOCAL.fullmatch(master):
            return (os.cpu_count() or 1) if m.group(1) == "*" else int(m.group(1) or 1)
        if m := _LOCAL_CLUSTER.fullmatch(master):
            return max(1, int(m.group(1)) * int(m.group(2)))
        instances, cores = _conf(spark, "spark.executor.instances"), _conf(spark, "spark.executor.cores")
        if instances and cores and not _dynamic_allocation(spark):
            return max(1, int(instances) * int(cores))
    except ValueError:  # a value that is not a number: not known
        return None
    return None


def drain_tasks(spark: Any) -> int:
    """A drain job's task count: the cluster's cores (:func:`session_cores`), else :data:`DRAIN_TASKS_UNKNOWN`."""
    return session_cores(spark) or DRAIN_TASKS_UNKNOWN


def cores_of(df: "DataFrame") -> int | None:
    """The cluster's cores where they can be told (:func:`session_cores`), else ``None``."""
    return session_cores(df.sparkSession)


#: Leaves of an analyzed plan whose partitions are known without listing, fetching or running anything:
#: a foreachBatch micro-batch (Spark hands it over as a LogicalRDD), a DataFrame of an RDD or of local
#: rows, ``spark.range``.
_CHEAP_LEAVES = frozenset({"LogicalRDD", "Range", "LocalRelation"})


def partitions_of(df: "DataFrame") -> int | None:
    """``df``'s Spark partitions where they are known without running a job or planning a scan, else ``None``.

    Known only when every leaf of the analyzed plan is in
    :data:`_CHEAP_LEAVES` and the physical plan has no exchange or subquery
    (adaptive execution sizes the last stage only once its shuffles ran;
    preparing a plan starts its broadcasts; a cached plan with a shuffle
    would be run to build the cache). ``None`` for anything else (a file,
    table or Kafka scan: planning it twice could list files or fetch
    offsets) and on Spark Connect (no JVM handle).
    """
    try:
        qe = df._jdf.queryExecution()
        leaves = qe.analyzed().collectLeaves()
        if any(leaves.apply(i).getClass().getSimpleName() not in _CHEAP_LEAVES for i in range(leaves.size())):
            return None
        plan = qe.executedPlan()
        if plan.getClass().getSimpleName() == "AdaptiveSparkPlanExec":
            return None
        tree = str(plan.treeString())
        if "Exchange" in tree or "Subquery" in tree:
            return None
        return int(plan.execute().getNumPartitions())
    except Exception:  # noqa: BLE001 - Spark Connect, or a plan that cannot be read: not known
        return None


def _dynamic_allocation(spark: Any) -> bool:
    return (_conf(spark, "spark.dynamicAllocation.enabled") or "false").lower() == "true"


def dynamic_allocation(df: "DataFrame") -> bool:
    """Whether ``df``'s session runs under dynamic allocation (its registered cores are not its cores)."""
    return _dynamic_allocation(df.sparkSession)


def lane_cores(df: "DataFrame") -> int | None:
    """The cores that size ``exactly_once_lanes="auto"``: :func:`session_cores`, ``None`` under dynamic allocation
    (a run's lanes are pinned at its first batch; the cores registered then are not the cluster's)."""
    spark = df.sparkSession
    return None if _dynamic_allocation(spark) else session_cores(spark)


def coalesce_width(df: "DataFrame", partitions: int | None = None) -> int | None:
    """The task count to coalesce ``df`` to (the cluster's cores), or ``None`` to leave it as Spark split it.

    ``None`` where the cores cannot be told (:func:`session_cores`), under
    dynamic allocation (a stage of the registered cores would never ask for
    more executors), and when ``df`` is known to have no more partitions than
    cores (:func:`partitions_of`). Used by both guarantees' passes
    (:func:`one_task_per_core`, :mod:`.resplit`). ``partitions``: ``df``'s, where the caller knows them
    (:mod:`.lineage`).
    """
    cores = cores_of(df)
    if cores is None or dynamic_allocation(df):
        return None
    known = partitions if partitions is not None and partitions >= 0 else partitions_of(df)
    return None if known is not None and known <= cores else cores


def one_task_per_core(df: "DataFrame", config: SinkConfig, partitions: int | None = None) -> "DataFrame":
    """``df`` coalesced to the cluster's cores, each row tagged with its own Spark partition (at-least-once).

    Left as it is under exactly-once, with ``coalesce_tasks=False``, and
    wherever :func:`coalesce_width` says so.
    """
    if config.guarantee == EXACTLY_ONCE or not config.coalesce_tasks:
        return df
    width = coalesce_width(df, partitions)
    if width is None:
        return df
    from pyspark.sql import functions as F

    return df.withColumn(SOURCE_PARTITION, F.spark_partition_id()).coalesce(width)
