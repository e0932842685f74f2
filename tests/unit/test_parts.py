"""Tier 1: a coalesced task's Arrow batches cut into the rows of each Spark partition (task/parts.py)."""

from __future__ import annotations

import pyarrow as pa
import pytest

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


def test_a_task_holds_one_occurrence_table_at_a_time_and_refuses_a_partition_that_comes_back():
    from types import SimpleNamespace

    from spark_recoverable_sink.errors import RecoverableSinkError
    from spark_recoverable_sink.task.writer import _part_of
    from spark_recoverable_sink.wal.format import AttemptKey

    rt = SimpleNamespace(config=SimpleNamespace(name="s"), sdir=None)
    mode = SimpleNamespace(begin=lambda p: AttemptKey(7, p, 1))
    parts: dict = {}
    a = _part_of(rt, mode, parts, 7, 3, "r", "")
    assert _part_of(rt, mode, parts, 7, 3, "r", "") is a and a.occurrences is not None
    b = _part_of(rt, mode, parts, 7, 4, "r", "")
    assert a.occurrences is None and b.occurrences is not None and b.prefix == "s:r:7:4:"
    with pytest.raises(RecoverableSinkError, match="partition 3 came again"):
        _part_of(rt, mode, parts, 7, 3, "r", "")
