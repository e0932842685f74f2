"""Tier 1: the real-time foreach writer's group commits (task/foreach.py) and its driver-side checks (driver/realtime.py).

A group is committed when it holds ``max_rows`` rows or when its oldest row
has waited ``max_wait_s``: checked at each row, and by a helper thread for a
buffer no row comes to any more (latency only: ``flush`` commits the rest
without it). A failed group commit is never swallowed.
"""

from __future__ import annotations

import datetime
import threading
import time
from types import SimpleNamespace

import pyarrow as pa
import pytest

from spark_recoverable_sink.config import SinkConfig
from spark_recoverable_sink.errors import ConfigError, WalFullError
from spark_recoverable_sink.task.foreach import GroupBuffer, rows_to_batch


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_group_is_committed_when_it_holds_max_rows():
    groups: list[list[int]] = []
    buf = GroupBuffer(groups.append, max_rows=3, max_wait_s=60.0, helper=False, clock=Clock())
    for i in range(7):
        buf.add(i)
    assert groups == [[0, 1, 2], [3, 4, 5]] and len(buf) == 1
    buf.flush()
    assert groups[-1] == [6] and len(buf) == 0 and buf.groups == 3
    buf.flush()  # nothing buffered: no empty group
    assert len(groups) == 3


def test_a_group_is_committed_at_a_row_once_its_oldest_row_waited_max_wait():
    clock = Clock()  # steps of binary fractions: sums without rounding
    groups: list[list[str]] = []
    buf = GroupBuffer(groups.append, max_rows=1000, max_wait_s=0.5, helper=False, clock=clock)
    buf.add("a")
    clock.now += 0.25
    buf.add("b")
    assert groups == []  # the oldest row waited half the bound
    clock.now += 0.25
    buf.add("c")  # the oldest row ("a") has waited the bound: the group goes, this row with it
    assert groups == [["a", "b", "c"]]
    clock.now += 0.375
    buf.add("d")  # a new group's first row starts the clock again
    clock.now += 0.375
    buf.add("e")
    assert groups == [["a", "b", "c"]]


def test_the_helper_thread_commits_a_group_no_row_comes_to_within_its_bound():
    committed: list[tuple[float, list[int]]] = []
    done = threading.Event()

    def commit(rows: list[int]) -> None:
        committed.append((time.monotonic(), rows))
        done.set()

    buf = GroupBuffer(commit, max_rows=1000, max_wait_s=0.03)
    t0 = time.monotonic()
    buf.add(1)
    buf.add(2)
    assert done.wait(5.0), "the helper thread never committed the idle group"
    at, rows = committed[0]
    assert rows == [1, 2]
    assert at - t0 >= 0.03  # not before its oldest row waited the bound
    helper = buf._helper
    buf.close()
    assert helper is not None and not helper.is_alive()  # close stops it (a bounded join)
    buf.add(3)  # after close no helper commits: the caller flushes
    time.sleep(0.1)
    assert len(committed) == 1 and len(buf) == 1
    buf.flush()
    assert committed[-1][1] == [3]


def test_a_failed_group_commit_in_the_helper_thread_is_raised_by_the_next_call_and_nothing_more_is_committed():
    calls: list[list[int]] = []
    failed = threading.Event()

    def commit(rows: list[int]) -> None:
        calls.append(rows)
        failed.set()
        raise WalFullError("the WAL is full (test)", "/nowhere")

    buf = GroupBuffer(commit, max_rows=1000, max_wait_s=0.01)
    buf.add(1)
    assert failed.wait(5.0)
    time.sleep(0.05)
    with pytest.raises(WalFullError):
        buf.add(2)
    with pytest.raises(WalFullError):
        buf.flush()
    buf.close()
    assert calls == [[1]]


def test_bounds_out_of_range_are_refused():
    with pytest.raises(ValueError):
        GroupBuffer(lambda rows: None, max_rows=0)
    with pytest.raises(ValueError):
        GroupBuffer(lambda rows: None, max_wait_s=-1)


def test_rows_become_one_arrow_batch_of_the_chosen_positions_timestamps_as_their_instant():
    ts = datetime.datetime(2026, 3, 1, 12, 30, 5, 123456)  # naive, local time: how PySpark hands a timestamp over
    rows = [(bytearray(b"k1"), bytearray(b"v1"), "in", 0, 7, ts), (None, bytearray(b"v2"), "in", 1, 8, None)]
    schema = pa.schema([("value", pa.binary()), ("key", pa.binary()), ("offset", pa.int64()),
                        ("timestamp", pa.timestamp("us", tz="UTC"))])
    batch = rows_to_batch(rows, [1, 0, 4, 5], schema)
    assert batch.schema == schema
    assert batch.column(0).to_pylist() == [b"v1", b"v2"]
    assert batch.column(1).to_pylist() == [b"k1", None]
    assert batch.column(2).to_pylist() == [7, 8]
    micros = batch.column(3).cast(pa.int64()).to_pylist()
    assert micros[0] == round(ts.timestamp() * 1_000_000) and micros[1] is None


def _df(*fields: tuple[str, str]) -> SimpleNamespace:
    """What foreach_writer reads of a DataFrame: its schema (no SparkSession in this tier)."""
    from pyspark.sql import types as T

    kinds = {"binary": T.BinaryType(), "string": T.StringType(), "int": T.IntegerType(), "bigint": T.LongType(),
             "timestamp": T.TimestampType()}
    return SimpleNamespace(schema=T.StructType([T.StructField(n, kinds[t]) for n, t in fields]))


KAFKA_SOURCE = (("key", "binary"), ("value", "binary"), ("topic", "string"), ("partition", "int"),
                ("offset", "bigint"), ("timestamp", "timestamp"), ("timestampType", "int"))


def test_the_writer_names_records_by_the_kafka_sources_coordinates_or_the_id_columns_and_refuses_neither():
    from spark_recoverable_sink.driver.realtime import foreach_writer

    config = SinkConfig.build("rt", {"bootstrap.servers": "127.0.0.1:1"}, "/tmp/unused", topic="out")
    w = foreach_writer(config, _df(*KAFKA_SOURCE), None, {})
    assert w.config.id_columns == ("topic", "partition", "offset") and w.columns.ids == w.config.id_columns
    assert [w.schema.field(i).name for i in range(len(w.schema))] == w.columns.select
    assert w.positions == [[f for f, _t in KAFKA_SOURCE].index(c) for c in w.columns.select]
    assert w.max_wait_s == pytest.approx(0.02)

    chosen = SinkConfig.build("rt", {"bootstrap.servers": "127.0.0.1:1"}, "/tmp/unused", topic="out",
                              record_ids="columns", id_columns=["order_id"])
    w = foreach_writer(chosen, _df(("value", "binary"), ("order_id", "bigint")), None, {})
    assert w.columns.ids == ("order_id",)

    with pytest.raises(ConfigError) as e:
        foreach_writer(config, _df(("value", "string"), ("order_id", "bigint")), None, {})
    assert e.value.option == "id_columns" and "id_columns=" in str(e.value)
    eo = SinkConfig.build("rt", {"bootstrap.servers": "127.0.0.1:1"}, "/tmp/unused", topic="out",
                          guarantee="exactly_once")
    with pytest.raises(ConfigError) as e:
        foreach_writer(eo, _df(*KAFKA_SOURCE), None, {})
    assert e.value.option == "guarantee"
    with pytest.raises(ConfigError) as e:
        foreach_writer(config, _df(*KAFKA_SOURCE), None, {}, max_wait_ms=-1)
    assert e.value.option == "max_wait_ms"
