"""Tier 1: Arrow arrays built from their buffers (spark_recoverable_sink/arrays.py) equal pyarrow's own."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from spark_recoverable_sink import arrays


@pytest.mark.parametrize("typ", [pa.int32(), pa.int64(), pa.uint32(), pa.uint64(), pa.float64()])
def test_numbers_with_and_without_nulls(typ):
    assert arrays.numeric(np.arange(5), typ).equals(pa.array(range(5), typ))
    got = arrays.column([1, None, 3, None], typ)
    got.validate(full=True)
    assert got.equals(pa.array([1, None, 3, None], typ)) and got.null_count == 2


@pytest.mark.parametrize("typ", [pa.string(), pa.binary(), pa.large_binary()])
def test_strings_and_bytes(typ):
    vals = ["", "a", None, "ünï", "x" * 1000] if typ == pa.string() else [b"", b"a", None, b"\x00\xff", b"x" * 1000]
    got = arrays.column(vals, typ)
    got.validate(full=True)
    assert got.equals(pa.array(vals, typ))
    assert arrays.column([], typ).equals(pa.array([], typ))


def test_a_record_batch_of_rows_takes_a_missing_key_as_null():
    schema = pa.schema([("n", pa.int64()), ("s", pa.string()), ("f", pa.float64())])
    got = arrays.record_batch([{"n": 1, "s": "a", "f": 0.5}, {"n": None}], schema)
    assert got.schema == schema
    assert got.to_pylist() == [{"n": 1, "s": "a", "f": 0.5}, {"n": None, "s": None, "f": None}]


def test_values_view_a_slice_and_a_chunked_array():
    a = pa.array(np.arange(10, dtype=np.uint64))
    assert arrays.values(a.slice(3, 4)).tolist() == [3, 4, 5, 6]
    assert arrays.values(pa.chunked_array([a.slice(0, 2), a.slice(8, 2)])).tolist() == [0, 1, 8, 9]


def test_a_binary_scalar_joins_in_compute_kernels():
    import pyarrow.compute as pc

    got = pc.binary_join_element_wise(arrays.binary_scalar(b"p:"), pa.array([b"a", b"b"]), arrays.binary_scalar(b""))
    assert got.to_pylist() == [b"p:a", b"p:b"]


def test_offsets_past_2_gib_are_refused_for_a_32_bit_offset_type(monkeypatch):
    monkeypatch.setitem(arrays._OFFSETS, pa.binary(), np.int8)  # a small offset width stands in for 2 GiB of bytes
    with pytest.raises(OverflowError):
        arrays.column([b"x" * 100, b"y" * 100], pa.binary())


def test_values_refuse_nulls_and_other_types_and_view_an_empty_array():
    with pytest.raises(ValueError):
        arrays.values(pa.array([1, None], pa.int32()))
    with pytest.raises(ValueError):
        arrays.values(pa.array(["a"]))
    empty = pa.Array.from_buffers(pa.uint64(), 0, [None, None])
    assert arrays.values(empty).dtype == np.uint64 and len(arrays.values(empty)) == 0


def test_builders_refuse_what_pyarrow_would():
    with pytest.raises(TypeError):
        arrays.column([5], pa.binary())
    with pytest.raises(TypeError):
        arrays.column([b"bytes"], pa.string())
    with pytest.raises(ValueError):
        arrays.numeric(np.zeros((2, 2)), pa.int64())


def test_a_batch_normalised_with_a_default_topic_for_null_topics_imports_no_pandas():
    import subprocess
    import sys

    code = (
        "import sys, pyarrow as pa\n"
        "from spark_recoverable_sink.arrays import column\n"
        "from spark_recoverable_sink.schema import normalize_batch\n"
        "b = pa.RecordBatch.from_arrays([column([b'v1', b'v2'], pa.binary()), column(['t', None], pa.string())],\n"
        "                               names=['value', 'topic'])\n"
        "out = normalize_batch(b, 'default', 'p:', 0)\n"
        "assert out.column(out.schema.get_field_index('topic')).to_pylist() == ['t', 'default'], out\n"
        "print('pandas' in sys.modules)\n")
    got = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert got.returncode == 0, got.stderr
    assert got.stdout.strip() == "False"
