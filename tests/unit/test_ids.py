"""Tier 1: record ids depend on a record's content and its occurrence among equal records, never on row order."""

from __future__ import annotations

import random

import numpy as np
import pyarrow as pa
import pytest

from spark_recoverable_sink import fingerprint
from spark_recoverable_sink.fingerprint import (
    _Occurrences,
    fingerprints,
    fingerprints_py,
    mix_pairs,
)
from spark_recoverable_sink.ids import (
    FP_COLUMN,
    new_occurrences,
    record_id_at,
    record_id_prefix,
    record_ids,
    sequence_ids,
    unit_digest,
    valid_run_id,
    with_ids,
)
from spark_recoverable_sink.native import library
from spark_recoverable_sink.schema import HEADERS_TYPE, normalize_batch

PREFIX = record_id_prefix("orders", 7, 3, "3ffbea5019c44624")


def _rows(n: int, dup_every: int = 5, seed: int = 1) -> list[dict]:
    rnd = random.Random(seed)
    rows = []
    for i in range(n):
        j = i - i % dup_every if i % dup_every == 1 else i  # every dup_every-th pair is equal content
        rows.append({"key": None if j % 7 == 0 else b"k%d" % (j % 13), "value": b"" if j % 11 == 0 else b"v%d" % j,
                     "partition": None if j % 3 else j % 4, "timestamp": 1700000000000 + j,
                     "headers": [{"key": "h", "value": b"x%d" % (j % 2)}] if j % 4 == 0 else None})
    rnd.shuffle(rows)
    return rows


def _batches(rows: list[dict], size: int) -> list[pa.RecordBatch]:
    schema = pa.schema([("key", pa.binary()), ("value", pa.binary()), ("partition", pa.int32()),
                        ("timestamp", pa.int64()), ("headers", HEADERS_TYPE)])
    return [normalize_batch(pa.RecordBatch.from_pylist(rows[i:i + size], schema=schema), "t", "p", i)
            for i in range(0, len(rows), size)]


def _ids_of(rows: list[dict], size: int, counter=None) -> list[tuple[bytes, bytes | None, bytes]]:
    occ = counter or new_occurrences()
    out, seq = [], 0
    for b in _batches(rows, size):
        b = with_ids(b, occ)
        for rid, k, v in zip(record_ids(PREFIX, b).to_pylist(), b.column("key").to_pylist(),
                             b.column("value").to_pylist()):
            out.append((rid, k, v))
        seq += b.num_rows
    return out


def test_ids_do_not_depend_on_row_order_or_batch_boundaries():
    rows = _rows(3000)
    first = _ids_of(rows, 1000)
    shuffled = list(rows)
    random.Random(9).shuffle(shuffled)
    second = _ids_of(shuffled, 777)  # other order, other Arrow batches: the same (id, record) pairs
    assert sorted(first) == sorted(second)
    assert len({rid for rid, _k, _v in first}) == len(first)  # unique, equal records included
    assert all(rid.startswith(PREFIX) for rid, _k, _v in first)


def test_equal_records_are_numbered_and_different_content_differs():
    rows = [{"value": b"same"}] * 3 + [{"value": b"other"}]
    suffixes = [rid[len(PREFIX):].decode().split("-") for rid, _k, _v in _ids_of(rows, 2)]
    by_fp: dict[str, list[str]] = {}
    for fp, occ in suffixes:
        by_fp.setdefault(fp, []).append(occ)
    assert sorted(sorted(v) for v in by_fp.values()) == [["0"], ["0", "1", "2"]]
    assert all(len(fp) == 16 for fp in by_fp)
    # null and empty are told apart, and so are key and value swapped
    fp = fingerprints(pa.RecordBatch.from_pylist(
        [{"key": None, "value": b"a"}, {"key": b"", "value": b"a"}, {"key": b"a", "value": b"b"},
         {"key": b"b", "value": b"a"}], schema=pa.schema([("key", pa.binary()), ("value", pa.binary())])))
    assert len(set(fp.tolist())) == 4


def test_content_ids_need_fingerprints_and_the_sink_s_own_records_are_numbered():
    b = normalize_batch(pa.RecordBatch.from_pydict({"value": [b"a", b"b"]}), "t", "p", 0)
    for name_them in (lambda: record_ids(PREFIX, b), lambda: record_id_at(PREFIX, b, 1), lambda: unit_digest(b)):
        with pytest.raises(ValueError, match="fingerprints"):  # never positions in their place
            name_them()
    with_fp = with_ids(b, new_occurrences())
    assert record_id_at(PREFIX, with_fp, 1) == record_ids(PREFIX, with_fp).to_pylist()[1].decode()
    assert record_ids(PREFIX, with_fp.slice(0, 0)).to_pylist() == []
    assert sequence_ids(b"rks-eo.s:r:0:sweep:", 3, 2).to_pylist() == [b"rks-eo.s:r:0:sweep:3", b"rks-eo.s:r:0:sweep:4"]


@pytest.mark.skipif(not library.available(), reason="the native extension is not built here: "
                    f"{library.why_unavailable()}")
def test_native_and_reference_fingerprints_agree_bit_for_bit():
    for b in _batches(_rows(2500, seed=4), 1000):
        assert np.array_equal(fingerprints(b), fingerprints_py(b))
        topical = b.append_column("topic", pa.array([f"t{i % 3}" if i % 5 else "" for i in range(b.num_rows)]))
        assert np.array_equal(fingerprints(topical), fingerprints_py(topical))
        assert np.array_equal(fingerprints(b.slice(17, 300)), fingerprints_py(b.slice(17, 300)))


def test_occurrence_counters_agree_across_calls():
    rnd = np.random.default_rng(3)
    ref, fast = _Occurrences(), new_occurrences()
    for n in (0, 1, 5, 1000, 4000, 333):
        fps = rnd.integers(0, 50, n).astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15)
        fps[: n // 10] = np.uint64(2**64 - 1) if n else fps[:0]
        assert np.array_equal(ref.number(fps), fast.number(fps))


def test_unit_digest_is_order_independent_and_accumulates():
    b = with_ids(_batches(_rows(500, seed=5), 500)[0], new_occurrences())
    whole = unit_digest(b)
    parts = unit_digest(b.slice(200), unit_digest(b.slice(0, 200)))
    assert whole == parts
    rev = b.take(pa.array(list(range(b.num_rows - 1, -1, -1))))
    assert unit_digest(rev) == whole
    other = b.set_column(b.schema.get_field_index(FP_COLUMN), FP_COLUMN,
                         pa.array(b.column(FP_COLUMN).to_numpy() + np.uint64(1)))
    assert unit_digest(other) != whole
    fps, occs = b.column(FP_COLUMN).to_numpy(), b.column("rks_occ").to_numpy()
    assert mix_pairs(fps, occs) == fingerprint.mix_pairs(fps[::-1].copy(), occs[::-1].copy())


def test_run_ids():
    assert all(valid_run_id(r) for r in ("3ffbea5019c44624", "nightly-2024.05_06", "x" * 64))
    assert not any(valid_run_id(r) for r in ("", "a:b", "x" * 65, "sp ace", "é"))
    assert record_id_prefix("orders", 7, 3) == b"orders::7:3:"  # no run given (tools, tests): an empty component
    assert PREFIX == b"orders:3ffbea5019c44624:7:3:"


def test_timestamp_id_columns_do_not_depend_on_the_session_time_zone():
    """PySpark sends timestamps in spark.sql.session.timeZone: the same instants in two zones give the same ids."""
    from spark_recoverable_sink.ids import id_fingerprints

    micros = [1_700_000_000_123_456, 0, None]
    utc = pa.array(micros, pa.timestamp("us", tz="UTC"))
    ny = pa.array(micros, pa.timestamp("us", tz="America/New_York"))
    a = id_fingerprints(pa.RecordBatch.from_arrays([utc], names=["ts"]))
    b = id_fingerprints(pa.RecordBatch.from_arrays([ny], names=["ts"]))
    assert list(a) == list(b)
    assert len(set(a.tolist())) == 3, "the instants and the null stay apart"


def test_a_place_tells_apart_records_whose_fingerprints_collide_in_different_tasks():
    """record_ids="content": two different records whose 64-bit fingerprints collide, placed in two tasks (each
    numbers its own occurrences from 0), still get two ids: the place is in the id."""
    from spark_recoverable_sink.ids import PLACE_COLUMN, has_place

    batch = _batches([{"key": b"a", "value": b"1"}, {"key": b"b", "value": b"2"}], 2)[0]
    prefix = record_id_prefix("orders", 7, 0, "3ffbea5019c44624", scope="batch")
    collide = np.array([0x1234, 0x1234], dtype=np.uint64)
    task_a = with_ids(batch.slice(0, 1), new_occurrences(), collide[:1], np.array([-5], dtype=np.int32))
    task_b = with_ids(batch.slice(1, 1), new_occurrences(), collide[1:], np.array([77], dtype=np.int32))
    (id_a,), (id_b,) = record_ids(prefix, task_a).to_pylist(), record_ids(prefix, task_b).to_pylist()
    assert id_a != id_b
    assert id_a == prefix + b"fffffffb" + b"0000000000001234-0" and id_b == prefix + b"0000004d0000000000001234-0"
    assert has_place(task_a) and task_a.column(PLACE_COLUMN).to_pylist() == [0xFFFFFFFB]
    assert record_id_at(prefix, task_b, 0) == id_b.decode()
    # one task, two places, one colliding fingerprint: each (place, fingerprint) numbered on its own
    both = with_ids(batch, new_occurrences(), collide, np.array([-5, 77], dtype=np.int32))
    assert record_ids(prefix, both).to_pylist() == [id_a, id_b]
    # and equal records (same place, same fingerprint) are numbered 0, 1
    same = with_ids(batch, new_occurrences(), collide, np.array([9, 9], dtype=np.int32))
    assert [i[-2:] for i in record_ids(prefix, same).to_pylist()] == [b"-0", b"-1"]
