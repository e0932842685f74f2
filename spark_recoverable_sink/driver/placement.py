"""At-least-once, driver: which task writes which record, so that record ids hold across re-runs.

A record's id must be the same in every run of its batch, whatever split
and order the run has (:mod:`..ids`). Spark's Kafka source re-runs a batch
from its offset log with another Kafka-partition -> Spark-partition split,
so an id that names its Spark partition changes with it. By ``record_ids``:

* ``"content"`` (the default): the batch is re-split (a shuffle in the JVM,
  no Python pass) by each record's *place*, Spark's hash of its ``(topic,
  partition)`` when its partition column is set, else of its ``key``, else
  of its ``value`` (:func:`.resplit.record_hash`, exactly-once's lane rule),
  into one partition per core. Every copy of a record lands in the same
  task, so a task numbers the copies of a record (its occurrences) over the
  whole batch; the place goes to the task (a column, :data:`..ids.PLACE_INPUT_COLUMN`)
  and into the id, which tells tasks apart without a partition:
  ``sink:run:batch:<place><fingerprint>-<occurrence>``. A re-run with another
  split, another order or another core count gives every record the same id.
  Order: all records of a destination partition given by a partition
  column, and all records of a key, are written by one task, in the order
  each input partition gave them (Spark's shuffle keeps a map task's order
  within a reduce partition): a Kafka source's records copied with their
  ``partition`` column keep their input order per output partition, as with
  Spark's sink, and a key's records from one input partition reach Kafka in
  their input order, as consumers rely on; records of *different* keys from
  one input partition may interleave differently than Spark's sink writes
  them. The shuffle costs a pass of the batch through Spark's shuffle
  (measured in docs/PERFORMANCE.md); it also replaces the coalesce below (one
  task per core either way). Where the cores cannot be read (Spark Connect)
  or under dynamic allocation, the shuffle has Spark's
  ``spark.sql.shuffle.partitions`` partitions, which adaptive execution
  coalesces.
* ``"partition"``: the batch as Spark split it (coalesced to the cores where
  :func:`.coalesce.one_task_per_core` says so, each row keeping its own
  partition's index): ids name the Spark partition and hold across re-runs
  only for sources that keep their split (files), not Spark's Kafka source.
* ``"columns"``: ids come from the user's ``id_columns`` (unique per batch
  by the user's word, e.g. the Kafka source's topic, partition and offset):
  no shuffle, and a coalesce to the cores needs no tag.

Exactly-once is left alone: its units are lanes (:mod:`.resplit`).

Where it runs: the driver, once per batch (it builds the plan, runs nothing).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..config import COLUMN_IDS, CONTENT_IDS, EXACTLY_ONCE, SinkConfig
from ..ids import PLACE_INPUT_COLUMN
from .coalesce import coalesce_width, cores_of, dynamic_allocation, one_task_per_core
from .resplit import record_hash

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import DataFrame

__all__ = ["place_for_ids"]


def place_for_ids(df: "DataFrame", config: SinkConfig) -> "DataFrame":
    """``df`` split so that each task's record ids are the same in every run of the batch (see above).

    ``df`` holds the columns the sink selected (:class:`..schema.Columns`).
    """
    from pyspark.sql import functions as F

    if config.guarantee == EXACTLY_ONCE:
        return df
    if config.record_ids == CONTENT_IDS:
        df = df.withColumn(PLACE_INPUT_COLUMN, record_hash(df, config))
        by = F.col(PLACE_INPUT_COLUMN)
        cores = None if dynamic_allocation(df) else cores_of(df)
        return df.repartition(cores, by) if cores else df.repartition(by)
    if config.record_ids == COLUMN_IDS:
        width = coalesce_width(df) if config.coalesce_tasks else None
        return df if width is None else df.coalesce(width)
    return one_task_per_core(df, config)
