"""At-least-once, driver: which task writes which record, so that record ids hold across re-runs.

A record's id must be the same in every run of its batch, whatever split
and order the run has (:mod:`..ids`). Spark's Kafka source re-runs a batch
from its offset log with another Kafka-partition -> Spark-partition split,
so an id that names its Spark partition changes with it. By ``record_ids``:

* ``"content"`` (the default): the batch is re-split (a shuffle in the JVM,
  no Python pass) by Spark's hash of each record's ``key``, or of its
  ``value`` when it has no key, into one partition per core. Every copy of a
  record lands in the same task, so a task numbers the copies of a record
  (its occurrences) over the whole batch and ids need no partition:
  ``sink:run:batch:<fingerprint>-<occurrence>``. A re-run with another split,
  another order or another core count gives every record the same id.
  Order: all records of a key are written by one task, in the order each
  input partition gave them (Spark's shuffle keeps a map task's order within
  a reduce partition), so a key's records from one input partition reach
  Kafka in their input order, as consumers rely on; records of *different*
  keys from one input partition may interleave differently than Spark's sink
  writes them. The shuffle costs a pass of the batch through Spark's shuffle
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

from typing import TYPE_CHECKING, Any

from ..config import COLUMN_IDS, CONTENT_IDS, EXACTLY_ONCE, SinkConfig
from .coalesce import coalesce_width, cores_of, dynamic_allocation, one_task_per_core

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import DataFrame

__all__ = ["place_for_ids", "placement_column"]


def placement_column(df: "DataFrame") -> Any:
    """What places a record under ``record_ids="content"``: its key, or its value when the key is null."""
    from pyspark.sql import functions as F

    value = F.col("value").cast("binary")
    return F.coalesce(F.col("key").cast("binary"), value) if "key" in df.columns else value


def place_for_ids(df: "DataFrame", config: SinkConfig) -> "DataFrame":
    """``df`` split so that each task's record ids are the same in every run of the batch (see above).

    ``df`` holds the columns the sink selected (:class:`..schema.Columns`).
    """
    if config.guarantee == EXACTLY_ONCE:
        return df
    if config.record_ids == CONTENT_IDS:
        by = placement_column(df)
        cores = None if dynamic_allocation(df) else cores_of(df)
        return df.repartition(cores, by) if cores else df.repartition(by)
    if config.record_ids == COLUMN_IDS:
        width = coalesce_width(df) if config.coalesce_tasks else None
        return df if width is None else df.coalesce(width)
    return one_task_per_core(df, config)
