"""The cluster's cores, as the driver can tell them from a session: what sizes a batch's tasks and a drain job.

The cores (:func:`session_cores`): Spark's default parallelism on classic
Spark. A Spark Connect session has no SparkContext; its configuration tells
them where it can: ``spark.default.parallelism`` if set, else the master's
(``local[N]``, ``local-cluster[N,C,M]``; ``local[*]``: this host's, where
the Connect server runs a foreachBatch function), else
``spark.executor.instances`` x ``spark.executor.cores`` when both are set
(and dynamic allocation is off). Anywhere else (a cluster manager's master
and no fixed executors) the cores are not known: set
``spark.default.parallelism`` to the cluster's cores to tell them.

Under dynamic allocation the registered cores are not the cluster's
(:func:`dynamic_allocation`): :mod:`.split` then leaves a batch as Spark split
it and does not size exactly-once's ``"auto"`` lanes by them.

Where it runs: the driver; it reads the session's configuration only (no job).
"""

from __future__ import annotations

import os
import re
from typing import Any

__all__ = ["session_cores", "dynamic_allocation", "drain_tasks", "DRAIN_TASKS_UNKNOWN"]

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
        if instances and cores and not dynamic_allocation(spark):
            return max(1, int(instances) * int(cores))
    except ValueError:  # a value that is not a number: not known
        return None
    return None


def dynamic_allocation(spark: Any) -> bool:
    """Whether the session runs under dynamic allocation (its registered cores are not its cores)."""
    return (_conf(spark, "spark.dynamicAllocation.enabled") or "false").lower() == "true"


def drain_tasks(spark: Any) -> int:
    """A drain job's task count: the cluster's cores (:func:`session_cores`), else :data:`DRAIN_TASKS_UNKNOWN`."""
    return session_cores(spark) or DRAIN_TASKS_UNKNOWN
