"""Exactly-once, driver: a batch re-split into the run's lanes (Spark partitions) by each record's lane.

A lane must hold the same records on every run of a batch, however Spark
split them (DESIGN.md, "Units that do not depend on how Spark split the
batch"): a lane is one unit (one transaction, one marker) per batch. A
record's lane is Spark's own hash (Murmur3, the function bucketed tables
rely on: the same in every Spark version) of:

* its ``(topic, partition)`` when its ``partition`` column is set: the records
  a batch places on a partition explicitly go through one lane, in order;
* else its ``key``: all of a key's records go through one lane, so a key's
  records from one input partition reach Kafka in their input order (what
  Kafka consumers rely on); records of *different* keys of one input
  partition may land on one Kafka partition from different lanes, so their
  relative order there is not kept;
* else its ``value``: equal keyless records share a lane (their ids are
  numbered there).

The hash is taken in the JVM (no Python pass before the shuffle), and before
a Schema Registry format encodes the key or value, so that a change of
schema id between two runs of a batch moves no record to another lane. It
depends on nothing else: not on the topic's partition count, the
partitioner, nor the Spark split; only the lane count, which a run keeps.
Spark's hash partitioning of the batch by that value (``repartition(L, v)``)
then puts lane ``pmod(hash(v), L)`` in Spark partition of that index.

Where it runs: the driver, once per batch (it builds the plan, runs nothing).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..config import SinkConfig
from .coalesce import coalesce_width

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import DataFrame

__all__ = ["LANE_COLUMN", "record_hash", "with_lane", "by_lane"]

#: The column carrying a record's lane hash from before the encoding to the re-split (dropped there).
LANE_COLUMN = "__rks_lane"


def record_hash(df: "DataFrame", config: SinkConfig) -> Any:
    """Spark's hash of a record's (topic, partition) when its partition column is set, else of its key, else of its
    value: a JVM expression, the same for equal records, on every Spark version (Murmur3, seed 42)."""
    from pyspark.sql import functions as F

    cols = df.columns
    value = F.hash(F.col("value")) if "value" in cols else F.lit(0)
    lane = F.when(F.col("key").isNotNull(), F.hash(F.col("key"))).otherwise(value) if "key" in cols else value
    if "partition" in cols:
        topic = F.col("topic") if config.topic is None and "topic" in cols else F.lit(config.topic or "")
        lane = F.when(F.col("partition").isNotNull(), F.hash(topic, F.col("partition"))).otherwise(lane)
    return lane


def with_lane(df: "DataFrame", config: SinkConfig) -> "DataFrame":
    """``df`` with each record's lane hash in :data:`LANE_COLUMN` (before any encoding of key or value).

    Columns are the user's, found as the sink finds them (exact names); a
    ``topic`` column counts only without a ``topic`` option.
    """
    return df.withColumn(LANE_COLUMN, record_hash(df, config))


def by_lane(df: "DataFrame", config: SinkConfig, lanes: int) -> "DataFrame":
    """``df`` (with :data:`LANE_COLUMN`) re-split into ``lanes`` partitions (the run's plan), one lane each.

    The stage before the shuffle is coalesced to the cores where
    :func:`.coalesce.coalesce_width` says so and ``coalesce_tasks`` is set (a
    narrower map stage; the lanes do not depend on it).
    """
    width = coalesce_width(df) if config.coalesce_tasks else None
    if width is not None:
        df = df.coalesce(width)
    return df.repartition(lanes, LANE_COLUMN).drop(LANE_COLUMN)
