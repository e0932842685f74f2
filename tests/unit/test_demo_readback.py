"""The demo's read-back judges the ids the sink writes, in every scope, and still fails on a loss or a copy.

The numbers come from :func:`jobs.demo_readback.summarize` over ids made by the
package's own id functions (``tests/record_ids.ids_of``), as a task makes them.
"""

from __future__ import annotations

import json
import os
import sys

import pyarrow as pa
import pytest

from spark_recoverable_sink.report import BatchReport, TaskReport

from ..record_ids import ids_of

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "templates"))
from demo_readback import ReadBack, summarize, verdict  # noqa: E402

SINK, RUN = "demo-to-kafka", "35472510c8f2418e"


def _batch(first: int, n: int) -> pa.RecordBatch:
    values = [json.dumps({"n": i}).encode() for i in range(first, first + n)]
    return pa.RecordBatch.from_arrays([pa.array([str(i).encode() for i in range(first, first + n)]),
                                       pa.array(values)], names=["key", "value"])


def _written(scope: str) -> tuple[list[BatchReport], list[tuple[bytes, bytes]]]:
    """Two batches of two partitions of 50 rows each, and the (id, value) of every record they wrote."""
    reports, records = [], []
    for batch in (0, 1):
        parts = []
        for p in (0, 1):
            first = batch * 100 + p * 50
            rows = _batch(first, 50)
            places = None if scope == "partition" else range(p * 1000, p * 1000 + 50)
            ids = ids_of(SINK, RUN, batch, p, [rows], topic="t", places=places)
            records += [(bytes.fromhex(i), v) for i, v in zip(ids, rows.column(1).to_pylist())]
            parts.append(TaskReport(origin=p, spark_attempt=0, rows=50, bytes=0, acked=50, pending=0, retried=0,
                                         dead_lettered=0, replayed=0, seconds=0.1, pid=1, slot="s"))
        reports.append(BatchReport.from_tasks(batch, parts, 0.1, run=RUN))
    return reports, records


def _read(records: list[tuple[bytes, bytes]]) -> ReadBack:
    got = ReadBack()
    for rid, value in records:
        got.add(rid, value)
    return got


@pytest.mark.parametrize("scope", ["place", "partition"])
def test_every_record_once_passes_in_either_scope(scope):
    reports, records = _written(scope)
    numbers = summarize(SINK, reports, _read(records))
    assert numbers["lost"] == 0 and numbers["unexpected_ids"] == 0 and numbers["rows_sent"] == 200, numbers
    assert verdict(numbers)


def test_a_copy_of_an_id_is_counted_and_passes():
    reports, records = _written("place")
    numbers = summarize(SINK, reports, _read(records + records[:3]))
    assert numbers["duplicates"] == 3 and numbers["lost"] == 0
    assert verdict(numbers)  # at-least-once: a consumer drops them by rks-id


def test_a_lost_record_fails():
    reports, records = _written("place")
    numbers = summarize(SINK, reports, _read(records[:-1]))
    assert numbers["lost"] == 1 and numbers["missing_values"] == 1
    assert not verdict(numbers)


def test_a_value_sent_again_under_another_id_fails():
    reports, records = _written("place")
    rid, value = records[0]
    numbers = summarize(SINK, reports, _read(records + [(rid[:-1] + bytes([rid[-1] ^ 1]), value)]))
    assert numbers["values_under_other_ids"] == 1 and numbers["unexpected_ids"] == 1
    assert not verdict(numbers)


def test_ids_of_another_run_are_unexpected_and_their_batch_lost():
    reports, records = _written("place")
    other = [(rid[:1] + b"\0" * 8 + rid[9:], v) for rid, v in records]  # another run's key
    numbers = summarize(SINK, reports, _read(other))
    assert numbers["lost"] == 200 and numbers["unexpected_ids"] == 200
    assert not verdict(numbers)


def test_records_without_an_id_fail():
    reports, records = _written("place")
    got = _read(records)
    got.add(None, json.dumps({"n": 0}).encode())
    numbers = summarize(SINK, reports, got)
    assert numbers["records_without_id"] == 1
    assert not verdict(numbers)
