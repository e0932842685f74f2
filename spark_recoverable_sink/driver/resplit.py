"""Exactly-once, driver: a batch re-split into ``exactly_once_lanes`` Spark partitions by each record's lane.

A lane must hold the same records on every run of a batch, however Spark
split them (DESIGN.md, "Units that do not depend on how Spark split the
batch"). Each record's lane is its destination partition
(:mod:`..task.lanes`), computed in the executors, then the batch is
repartitioned by it.

Two ways to compute it, same lanes:

* an Arrow UDF (PySpark 4.1+, :func:`pyspark.sql.functions.arrow_udf`): only
  the columns the lane needs cross to Python (the key, the topic and
  partition columns, and the first 64 bytes of a keyless record's value);
  the rows stay in the JVM;
* otherwise (PySpark 3.5 and 4.0) a ``mapInArrow`` pass that sends every
  column to Python and back.

Where it runs: the driver, once per batch (it reads the sink topic's
partition count and builds the plan). What pickles: the config and that count.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pyarrow as pa

from ..config import SinkConfig
from ..task.lanes import LANE_COLUMN, LaneTagger, driver_counts, lane_values
from .coalesce import coalesce_width
from .versions import features

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import DataFrame

__all__ = ["by_lane", "LaneColumn"]

#: Bytes of a keyless record's value its lane is hashed from (:func:`..task.lanes.lane_values`).
VALUE_HEAD = 64


class LaneColumn:
    """Picklable body of the Arrow UDF: (key, topic, partition, value head) arrays -> lane tags."""

    def __init__(self, config: SinkConfig, counts: dict[str, int]) -> None:
        self.tagger = LaneTagger(config, counts)

    def __call__(self, key: pa.Array, topic: pa.Array, partition: pa.Array, head: pa.Array) -> pa.Array:
        batch = pa.RecordBatch.from_arrays([key, topic, partition, head], names=["key", "topic", "partition", "value"])
        return lane_values(batch, self.tagger.config, self.tagger.count)


def _arrow_udf() -> Any:
    """PySpark's ``arrow_udf`` (4.1+), else ``None`` (:mod:`.versions`)."""
    if not features().arrow_udf:
        return None
    from pyspark.sql.functions import arrow_udf

    return arrow_udf


def _at_most_one_task_per_core(df: "DataFrame") -> "DataFrame":
    """``df`` coalesced (no shuffle) to the cluster's cores when it has more partitions.

    The lane pass costs a Python worker round trip per task: 64 input
    partitions on 2 cores would pay it 64 times for work that 2 tasks do as
    fast. Lanes are a function of each record, so how the pass is split does
    not change them. Left as it is wherever
    :func:`.coalesce.coalesce_width` says so (cores not known, dynamic
    allocation, a batch known to have no more partitions than cores).
    """
    width = coalesce_width(df)
    return df if width is None else df.coalesce(width)


def by_lane(df: "DataFrame", config: SinkConfig) -> "DataFrame":
    """``df`` re-split into ``config.exactly_once_lanes`` partitions by each record's lane.

    Raises:
        ConfigError: the sink's topic does not exist.
        confluent_kafka.KafkaException: no broker answered and the topic's count was never read.
    """
    from pyspark.sql import functions as F
    from pyspark.sql.types import IntegerType, StructField, StructType

    counts = driver_counts(config)
    df = _at_most_one_task_per_core(df)
    arrow_udf = _arrow_udf()
    if arrow_udf is None:
        schema = StructType([*df.schema.fields, StructField(LANE_COLUMN, IntegerType(), False)])
        tagged = df.mapInArrow(LaneTagger(config, counts), schema)
    else:
        cols = {c.lower(): c for c in df.columns}

        def col(name: str, kind: str) -> Any:
            return F.col(f"`{cols[name]}`").cast(kind) if name in cols else F.lit(None).cast(kind)

        key = col("key", "binary")
        head = F.when(key.isNull(), F.substring(col("value", "binary"), 1, VALUE_HEAD))
        body = LaneColumn(config, counts)

        def lanes(key: pa.Array, topic: pa.Array, partition: pa.Array, head: pa.Array) -> pa.Array:
            return body(key, topic, partition, head)

        udf = arrow_udf(lanes, IntegerType())  # SCALAR, from the type hints
        tagged = df.withColumn(LANE_COLUMN, udf(key, col("topic", "string"), col("partition", "int"), head))
    return tagged.repartition(config.exactly_once_lanes, LANE_COLUMN).drop(LANE_COLUMN)
