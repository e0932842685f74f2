"""Tier 1: record ids (format 1): what they are made of, that they never depend on row order where they must not, and
what a fingerprint collision can cost."""

from __future__ import annotations

import random

import numpy as np
import pyarrow as pa
import pytest

from spark_recoverable_sink import fingerprint, ids
from spark_recoverable_sink.fingerprint import _Occurrences, fingerprints, fingerprints_py, mix_pairs
from spark_recoverable_sink.ids import (
    CONTENT,
    KEY,
    POSITION,
    batch_prefix,
    batch_prefix_of,
    describe,
    id_fields,
    key_hashes,
    new_occurrences,
    record_id_at,
    record_ids,
    run_key,
    scheme_for,
    sequence_ids,
    unit_digest,
    valid_run_id,
    with_ids,
)
from spark_recoverable_sink.native import library
from spark_recoverable_sink.schema import HEADERS_TYPE, normalize_batch

RUN = "3ffbea5019c44624"
SCHEME = scheme_for(CONTENT, "orders", RUN, 7, 3)


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
    return [normalize_batch(pa.RecordBatch.from_pylist(rows[i:i + size], schema=schema), "t", i)
            for i in range(0, len(rows), size)]


def _ids_of(rows: list[dict], size: int, counter=None, scheme=SCHEME) -> list[tuple[bytes, bytes | None, bytes]]:
    occ = counter or new_occurrences()
    out, seq = [], 0
    for b in _batches(rows, size):
        b = with_ids(b, scheme, occ)
        for rid, k, v in zip(record_ids(b, seq).to_pylist(), b.column("key").to_pylist(),
                             b.column("value").to_pylist()):
            out.append((rid, k, v))
        seq += b.num_rows
    return out


def test_the_bytes_of_each_kind():
    rk = run_key("orders", RUN)
    assert len(rk) == 8 and rk != run_key("orders", "other") and rk != run_key("orders2", RUN)
    assert batch_prefix("orders", RUN, 7) == rk + b"\0\0\0\x07"
    one = pa.RecordBatch.from_pydict({"value": [b"a", b"b"]})
    pos = with_ids(normalize_batch(one, "t"), scheme_for(POSITION, "orders", RUN, 7, 3))
    assert pos.schema.names == ["value"], "ids by position store nothing per row"
    assert record_ids(pos, 40).to_pylist() == [bytes([0x11]) + rk + b"\0\0\0\x07" + (3).to_bytes(8, "big") +
                                               (40 + i).to_bytes(8, "big") for i in range(2)]
    content = with_ids(normalize_batch(one, "t"), SCHEME, new_occurrences())
    rid = record_ids(content, 0).to_pylist()[0]
    fp = int(content.column("rks_fp")[0].as_py())
    assert rid == bytes([0x12]) + rk + b"\0\0\0\x07" + b"\0\0\0\x03" + fp.to_bytes(8, "big") + b"\0\0\0\0"
    keyed = with_ids(normalize_batch(one, "t"), scheme_for(KEY, "orders", RUN, 7),
                     keys=(np.array([1, 2], np.uint64), np.array([3, 4], np.uint64)))
    assert record_ids(keyed, 0).to_pylist()[1] == bytes([0x13]) + rk + b"\0\0\0\x07" + (2).to_bytes(8, "big") + \
        (4).to_bytes(8, "big")
    for b, first in ((pos, 40), (content, 0), (keyed, 0)):
        got = record_ids(b, first).to_pylist()
        assert [batch_prefix_of(r) for r in got] == [batch_prefix("orders", RUN, 7)] * 2
        assert record_id_at(b, first, 1) == got[1]
    assert describe(rid) == f"content run={rk.hex()} batch=7 scope=3 fp={fp:016x} occ=0"
    assert batch_prefix_of(b"orders:run:7:0:abc") is None and describe(b"abc") == "abc"


def test_the_native_engine_gets_what_builds_the_same_ids():
    one = normalize_batch(pa.RecordBatch.from_pydict({"value": [b"a", b"b", b"a"]}), "t")
    content = with_ids(one, scheme_for(CONTENT, "s", "r", 1), new_occurrences(), np.array([5, 5, -1]))
    prefix, cols, seq0 = id_fields(content, 9)
    assert seq0 is None and [w for _c, w in cols] == [4, 8, 4] and prefix == content.schema.metadata[b"rks.idp"]
    rows = [prefix + b"".join(int(c[i]).to_bytes(w, "big") for c, w in cols) for i in range(3)]
    assert rows == record_ids(content, 9).to_pylist()
    pos = with_ids(one, scheme_for(POSITION, "s", "r", 1, 0))
    assert id_fields(pos, 9) == (pos.schema.metadata[b"rks.idp"], (), 9)


def test_content_ids_do_not_depend_on_row_order_or_batch_boundaries():
    rows = _rows(3000)
    first = _ids_of(rows, 1000)
    shuffled = list(rows)
    random.Random(9).shuffle(shuffled)
    second = _ids_of(shuffled, 777)  # other order, other Arrow batches: the same (id, record) pairs
    assert sorted(first) == sorted(second)
    assert len({rid for rid, _k, _v in first}) == len(first)  # unique, equal records included
    assert all(rid.startswith(SCHEME.prefix) and len(rid) == 29 for rid, _k, _v in first)


def test_equal_records_are_numbered_and_different_content_differs():
    rows = [{"value": b"same"}] * 3 + [{"value": b"other"}]
    by_fp: dict[bytes, list[int]] = {}
    for rid, _k, _v in _ids_of(rows, 2):
        by_fp.setdefault(rid[17:25], []).append(int.from_bytes(rid[25:], "big"))
    assert sorted(sorted(v) for v in by_fp.values()) == [[0], [0, 1, 2]]
    # null and empty are told apart, and so are key and value swapped
    fp = fingerprints(pa.RecordBatch.from_pylist(
        [{"key": None, "value": b"a"}, {"key": b"", "value": b"a"}, {"key": b"a", "value": b"b"},
         {"key": b"b", "value": b"a"}], schema=pa.schema([("key", pa.binary()), ("value", pa.binary())])))
    assert len(set(fp.tolist())) == 4


def test_a_chunk_names_its_ids_and_the_sink_s_own_records_are_numbered():
    b = normalize_batch(pa.RecordBatch.from_pydict({"value": [b"a", b"b"]}), "t")
    for name_them in (lambda: record_ids(b, 0), lambda: record_id_at(b, 0, 1), lambda: unit_digest(b, 0)):
        with pytest.raises(ValueError, match="id scheme"):  # never positions in their place
            name_them()
    with pytest.raises(ValueError, match="occurrence counter"):
        with_ids(b, SCHEME)
    with_fp = with_ids(b, SCHEME, new_occurrences())
    assert record_ids(with_fp.slice(0, 0), 0).to_pylist() == []
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
    b = with_ids(_batches(_rows(500, seed=5), 500)[0], SCHEME, new_occurrences())
    whole = unit_digest(b, 0)
    parts = unit_digest(b.slice(200), 200, unit_digest(b.slice(0, 200), 0))
    assert whole == parts
    rev = b.take(pa.array(list(range(b.num_rows - 1, -1, -1))))
    assert unit_digest(rev, 0) == whole
    other = b.set_column(b.schema.get_field_index("rks_fp"), "rks_fp",
                         pa.array(b.column("rks_fp").to_numpy() + np.uint64(1)))
    assert unit_digest(other, 0) != whole
    fps, occs = b.column("rks_fp").to_numpy(), b.column("rks_occ").to_numpy()
    assert mix_pairs(fps, occs) == fingerprint.mix_pairs(fps[::-1].copy(), occs[::-1].copy())
    pos = with_ids(_batches(_rows(10), 10)[0], scheme_for(POSITION, "s", "r", 1, 0))
    assert unit_digest(pos, 0) == unit_digest(pos.slice(4), 4, unit_digest(pos.slice(0, 4), 0))
    assert unit_digest(pos, 0) != unit_digest(pos, 1), "positions are what a POSITION unit's digest proves"
    other_input = with_ids(_batches(_rows(10), 10)[0], scheme_for(POSITION, "s", "r", 1, 1))
    assert unit_digest(other_input, 0) != unit_digest(pos, 0), "and its input's scope"


def test_run_ids():
    assert all(valid_run_id(r) for r in ("3ffbea5019c44624", "nightly-2024.05_06", "x" * 64))
    assert not any(valid_run_id(r) for r in ("", "a:b", "x" * 65, "sp ace", "é"))
    with pytest.raises(ValueError, match="batch ids"):
        scheme_for(CONTENT, "s", "r", 1 << 32, 0)


def test_key_ids_are_128_bits_of_the_values_and_do_not_depend_on_the_session_time_zone():
    """PySpark sends timestamps in spark.sql.session.timeZone: the same instants in two zones give the same ids."""
    micros = [1_700_000_000_123_456, 0, None]
    utc = pa.array(micros, pa.timestamp("us", tz="UTC"))
    ny = pa.array(micros, pa.timestamp("us", tz="America/New_York"))
    a = key_hashes(pa.RecordBatch.from_arrays([utc], names=["ts"]))
    b = key_hashes(pa.RecordBatch.from_arrays([ny], names=["ts"]))
    assert [list(x) for x in a] == [list(x) for x in b]
    assert len({(int(x), int(y)) for x, y in zip(*a)}) == 3, "the instants and the null stay apart"
    # the Kafka source's (topic, partition, offset): 200,000 tuples, no two alike in either 64-bit half
    n = 200_000
    cols = pa.RecordBatch.from_arrays([pa.array(["orders", "payments"] * (n // 2)),
                                       pa.array(np.arange(n, dtype=np.int32) % 7),
                                       pa.array(np.arange(n, dtype=np.int64))], names=["topic", "partition", "offset"])
    k1, k2 = key_hashes(cols)
    assert len(set(k1.tolist())) == n and len(set(k2.tolist())) == n and not np.array_equal(k1, k2)


def test_a_place_tells_apart_records_whose_fingerprints_collide_in_different_tasks(monkeypatch):
    """record_ids="content": two different records whose 64-bit fingerprints collide, placed in two tasks (each
    numbers its own occurrences from 0), still get two ids: the place is in the id."""
    monkeypatch.setattr(ids, "fingerprints", lambda b: np.full(b.num_rows, 0x1234, dtype=np.uint64))
    batch = _batches([{"key": b"a", "value": b"1"}, {"key": b"b", "value": b"2"}], 2)[0]
    placed = scheme_for(CONTENT, "orders", RUN, 7)
    task_a = with_ids(batch.slice(0, 1), placed, new_occurrences(), np.array([-5], dtype=np.int32))
    task_b = with_ids(batch.slice(1, 1), placed, new_occurrences(), np.array([77], dtype=np.int32))
    (id_a,), (id_b,) = record_ids(task_a, 0).to_pylist(), record_ids(task_b, 1).to_pylist()
    assert id_a != id_b
    tail = (0x1234).to_bytes(8, "big") + b"\0\0\0\0"
    assert id_a == placed.prefix + b"\xff\xff\xff\xfb" + tail and id_b == placed.prefix + b"\0\0\0\x4d" + tail
    # one task, two places, one colliding fingerprint: each (place, fingerprint) numbered on its own
    both = with_ids(batch, placed, new_occurrences(), np.array([-5, 77], dtype=np.int32))
    assert record_ids(both, 0).to_pylist() == [id_a, id_b]


def test_what_a_fingerprint_collision_within_one_scope_can_cost(monkeypatch):
    """Two different records of one scope whose 64-bit fingerprints collide are told apart by their occurrences,
    in arrival order. A re-run that brings them in the other order swaps their ids: if only the first run's copy of
    record A reached Kafka, the re-run's copy of record B carries A's id, and a consumer de-duplicating by id drops
    B. What docs/guarantees.md states (about n**2 / 2**65 per scope of n records)."""
    monkeypatch.setattr(ids, "fingerprints", lambda b: np.full(b.num_rows, 0x1234, dtype=np.uint64))
    a, b = {"key": b"a", "value": b"A"}, {"key": b"b", "value": b"B"}
    first = dict((v, rid) for rid, _k, v in _ids_of([a, b], 2))
    rerun = dict((v, rid) for rid, _k, v in _ids_of([b, a], 2))
    assert first[b"A"] != first[b"B"], "unique within a run"
    assert rerun[b"B"] == first[b"A"], "the re-run's B carries the first run's A id: a de-duplicator drops it"
