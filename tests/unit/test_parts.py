"""Tier 1: a coalesced task's Arrow batches cut into the rows of each Spark partition (task/parts.py)."""

from __future__ import annotations

import pyarrow as pa

from spark_recoverable_sink.task.parts import SOURCE_PARTITION, split_by_partition


def _batch(parts: list[int]) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays([pa.array([f"v{i}" for i in range(len(parts))]), pa.array(parts, pa.int32())],
                                      names=["value", SOURCE_PARTITION])


def test_runs_of_one_partition_each_in_arrival_order_without_the_column():
    got = [(p, rows.column("value").to_pylist(), rows.schema.names)
           for p, rows in split_by_partition(_batch([3, 3, 4, 4, 4, 9]), partition=0)]
    assert got == [(3, ["v0", "v1"], ["value"]), (4, ["v2", "v3", "v4"], ["value"]), (9, ["v5"], ["value"])]


def test_a_batch_without_the_column_is_the_tasks_own_partition_and_an_empty_one_yields_nothing():
    plain = pa.RecordBatch.from_arrays([pa.array(["a", "b"])], names=["value"])
    assert [(p, rows.num_rows) for p, rows in split_by_partition(plain, partition=5)] == [(5, 2)]
    assert list(split_by_partition(_batch([]), partition=5)) == []
    assert [(p, r.num_rows) for p, r in split_by_partition(_batch([1, 2, 1]), 0)] == [(1, 1), (2, 1), (1, 1)]
