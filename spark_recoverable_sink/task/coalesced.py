"""A coalesced task's input: the rows of several Spark partitions, each row carrying its own partition's index.

At-least-once, the driver coalesces a batch of more Spark partitions than
the cluster has cores to one task per core (:mod:`..driver.split`), and
adds :data:`SOURCE_PARTITION` (``spark_partition_id()`` before the
coalesce) so that a record keeps the id its own partition gives it: ids stay
``sink:run:batch:<its partition>:...`` however the partitions are grouped
into tasks. :func:`split_by_partition` cuts a task's Arrow batches into
pieces of one partition each (a coalesced partition's rows arrive one parent
partition after another, so an Arrow batch holds at most a few runs).

Where it runs: the executor, inside the task. Nothing here pickles.
"""

from __future__ import annotations

from typing import Iterator

import numpy as np
import pyarrow as pa

from ..arrays import values

__all__ = ["SOURCE_PARTITION", "split_by_partition"]

#: The column the driver adds before a coalesce: the row's own Spark partition (``spark_partition_id()``).
SOURCE_PARTITION = "__rks_spark_partition"


def split_by_partition(batch: pa.RecordBatch, partition: int) -> Iterator[tuple[int, pa.RecordBatch]]:
    """``(partition, rows)`` runs of ``batch``, without :data:`SOURCE_PARTITION`, in arrival order.

    A batch without that column is all of the task's own ``partition``.
    """
    i = batch.schema.get_field_index(SOURCE_PARTITION)
    if i < 0:
        yield partition, batch
        return
    ids = values(batch.column(i))
    rows = batch.remove_column(i)
    starts = np.concatenate(([0], np.flatnonzero(ids[1:] != ids[:-1]) + 1)) if len(ids) else np.zeros(0, np.int64)
    for k, start in enumerate(starts):
        end = starts[k + 1] if k + 1 < len(starts) else len(ids)
        yield int(ids[start]), rows.slice(int(start), int(end - start))
