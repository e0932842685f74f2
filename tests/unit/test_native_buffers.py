"""Tier 1: malformed buffers handed straight to the native extension raise ValueError/TypeError, never a read past a buffer.

The C side takes each column as ``(length, offset, validity, buf1, buf2, width)``
of buffer-protocol objects (see :mod:`spark_recoverable_sink.native.library`)
and bounds-checks all of them before it reads a row. These tests hand it
hand-made buffers that lie about their sizes. The producer points at a port
nobody listens on: nothing is sent, only the checks run.
"""

from __future__ import annotations

import socket
import struct

import numpy as np
import pyarrow as pa
import pytest

from spark_recoverable_sink.native import library
from spark_recoverable_sink.native.producer import Producer

pytestmark = pytest.mark.skipif(not library.available(),
                                reason=f"native extension not built: {library.why_unavailable()}")


def i32(*v: int) -> bytes:
    return struct.pack(f"<{len(v)}i", *v)


def bin_col(n, offsets, data, validity=None, off=0, width=4):
    packed = i32(*offsets) if width == 4 else struct.pack(f"<{len(offsets)}q", *offsets)
    return (n, off, validity, packed, data, width)


GOOD = bin_col(2, [0, 1, 2], b"ab")
IDS = bin_col(2, [0, 1, 2], b"xy")


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # nothing listens there once closed


@pytest.fixture(scope="module")
def raw():
    """The C producer object itself (the wrapper's conversions bypassed)."""
    p = Producer({"bootstrap.servers": f"127.0.0.1:{_closed_port()}", "message.timeout.ms": 1000},
                 log_cb=lambda *_: None)  # no "connection refused" lines on stderr
    yield p._p
    p.purge()
    p.close()


def produce(p, values=GOOD, keys=None, topics=None, partitions=None, timestamps=None, headers=None,
            ids=IDS, indices=None):
    return p.produce_chunk(1, "t", values, keys, topics, partitions, timestamps, headers, ids, b"rks-id",
                           indices, 0.0)


def fingerprints_into(out, values, keys=None):
    return library.module().fingerprints_into(out, values, keys, None, None, None, None)


BAD_BINARY = {
    "offsets past data end": bin_col(2, [0, 1, 3], b"ab"),
    "non-monotonic offsets": bin_col(3, [0, 2, 1, 3], b"abc"),
    "negative first offset": bin_col(2, [-1, 1, 2], b"ab"),
    "short validity bitmap": bin_col(20, list(range(21)), b"a" * 20, validity=b"\xff"),
    "short offsets buffer": bin_col(3, [0, 1, 2], b"abc"),
    "offset+length past offsets": bin_col(2, [0, 1, 2], b"ab", off=1),
    "bad width": (2, 0, None, i32(0, 1, 2), b"ab", 3),
    "negative length": (-1, 0, None, i32(0), b"", 4),
    "negative offset": (1, -1, None, i32(0, 1), b"a", 4),
    "huge offset": (1, 2**62, None, i32(0, 1), b"a", 4),
    "not a tuple": [2, 0, None, i32(0, 1, 2), b"ab", 4],
    "short tuple": (2, 0, None),
    "large offsets past data": bin_col(2, [0, 1, 2**40], b"ab", width=8),
}


@pytest.mark.parametrize("name", sorted(BAD_BINARY))
def test_bad_binary_column_in_every_place(raw, name):
    col = BAD_BINARY[name]
    with pytest.raises(ValueError):  # as values (ids of the same row count, so only the values are wrong)
        produce(raw, values=col, ids=col if name == "short validity bitmap" else IDS)
    with pytest.raises(ValueError):
        produce(raw, keys=col)
    with pytest.raises(ValueError):
        produce(raw, ids=col)
    with pytest.raises(ValueError):
        fingerprints_into(np.empty(2, np.uint64), col)


def test_bad_int_columns(raw):
    with pytest.raises(ValueError, match="value buffer too short"):
        produce(raw, partitions=(2, 0, None, i32(1), None, 4))
    with pytest.raises(ValueError, match="value buffer too short"):
        produce(raw, timestamps=(2, 1, None, struct.pack("<2q", 1, 2), None, 8))
    with pytest.raises(ValueError, match="rows"):
        produce(raw, partitions=(3, 0, None, i32(1, 2, 3), None, 4))


def test_bad_indices(raw):
    for idx in ([0, 2], [-1], [5, 0]):
        with pytest.raises(ValueError, match="out of range"):
            produce(raw, indices=np.array(idx, dtype=np.int64))
    with pytest.raises(ValueError, match="int64"):
        produce(raw, indices=b"\x00" * 7)


def test_bad_headers(raw):
    key = bin_col(1, [0, 1], b"k")
    val = bin_col(1, [0, 1], b"v")
    st = (1, 0, None, None, None, 0)
    good = ((2, 0, None, i32(0, 1, 1), None, 4), st, key, val)
    assert produce(raw, headers=good)[0] == 2
    with pytest.raises(ValueError, match="past the struct"):  # list entry 1 does not exist
        produce(raw, headers=((2, 0, None, i32(0, 1, 2), None, 4), st, key, val))
    with pytest.raises(ValueError, match="shorter"):  # two struct entries, one key and one value
        produce(raw, headers=((2, 0, None, i32(0, 1, 2), None, 4), (2, 0, None, None, None, 0), key, val))
    with pytest.raises(ValueError):  # an empty validity bitmap for one struct entry
        produce(raw, headers=((2, 0, None, i32(0, 1, 1), None, 4), (1, 0, b"", None, None, 0), key, val))
    with pytest.raises(ValueError):
        produce(raw, headers=(good[0], st, key))
    with pytest.raises(ValueError):
        produce(raw, headers=(good[0], None, key, val))


def test_required_and_mismatched(raw):
    with pytest.raises(ValueError, match="required"):
        produce(raw, values=None)
    with pytest.raises(ValueError, match="rows"):
        produce(raw, ids=bin_col(1, [0, 1], b"x"))
    with pytest.raises(ValueError, match="topic"):
        raw.produce_chunk(1, None, GOOD, None, None, None, None, None, IDS, b"rks-id", None, 0.0)
    with pytest.raises(ValueError, match="output buffer"):
        fingerprints_into(np.empty(3, np.uint64), GOOD)
    with pytest.raises(ValueError, match="no column"):
        fingerprints_into(np.empty(0, np.uint64), None)


def test_still_usable_after_errors(raw):
    assert produce(raw) == (2, [])
    produced, fails = produce(raw, topics=bin_col(2, [0, 0, 1], b"t"))  # row 0: an empty topic name
    assert produced == 1 and [f[0] for f in fails] == [0]  # that row alone fails


def test_wrapper_rejects_bad_types():
    with pytest.raises(TypeError):
        library.headers_column(pa.array([1, 2]))
    with pytest.raises((pa.ArrowInvalid, pa.ArrowNotImplementedError, TypeError)):
        library.column(pa.array([[1]]), "int32")


def gen(p, prefix=b"pre:", cols=None, seq0=-1, ids=None, indices=None):
    """produce_chunk with ids made in C from (prefix, id columns, first position)."""
    cols = ((np.array([1, 2], np.uint64), 8), (np.array([0, 0], np.uint32), 4)) if cols is None else cols
    return p.produce_chunk(1, "t", GOOD, None, None, None, None, None, ids, b"rks-id", indices, 0.0,
                           prefix, cols, seq0)


def test_ids_made_in_c_are_bounds_checked(raw):
    assert gen(raw) == (2, [])
    u64 = np.array([1, 2], np.uint64)
    with pytest.raises(ValueError, match="id_cols has 1 rows, expected 2"):
        gen(raw, cols=((np.array([1], np.uint64), 8),))
    with pytest.raises(ValueError, match="id_cols has 3 rows, expected 2"):
        gen(raw, cols=((np.array([1, 2, 3], np.uint64), 8),))
    with pytest.raises(TypeError, match="id_cols"):
        gen(raw, cols=((np.array([0, 0], np.uint64), 4),))  # the width says 4 bytes, the array holds 8
    with pytest.raises(TypeError, match="id_cols"):
        gen(raw, cols=((np.array([1, 2], np.int64), 8),))
    with pytest.raises(TypeError, match="id_cols"):
        gen(raw, cols=((np.arange(4, dtype=np.uint64)[::2], 8),))  # strided
    with pytest.raises(TypeError, match="id_cols"):
        gen(raw, cols=((b"\x00" * 16, 8),))  # raw bytes carry no element type
    with pytest.raises(ValueError, match="4 or 8"):
        gen(raw, cols=((u64, 2),))
    with pytest.raises(ValueError, match="at most 3"):
        gen(raw, cols=((u64, 8),) * 4)
    with pytest.raises(TypeError, match="tuple"):
        gen(raw, cols=[(u64, 8)])
    with pytest.raises(TypeError, match="id_prefix"):
        gen(raw, prefix="pre:")
    with pytest.raises(ValueError, match="at most 64"):
        gen(raw, prefix=b"x" * 65)
    assert gen(raw, prefix=b"x" * 64, seq0=7)[0] == 2  # the longest prefix, three columns and a position fit
    assert gen(raw, prefix=b"x" * 64, cols=((u64, 8),) * 3, seq0=7)[0] == 2
    with pytest.raises(ValueError, match="not both"):
        gen(raw, ids=IDS)
    with pytest.raises(ValueError, match="go with id_prefix"):
        raw.produce_chunk(1, "t", GOOD, None, None, None, None, None, IDS, b"rks-id", None, 0.0,
                          None, ((u64, 8),))
    with pytest.raises(ValueError, match="out of range"):
        gen(raw, indices=np.array([2], np.int64))
    assert gen(raw, indices=np.array([1], np.int64)) == (1, [])


def test_wrapper_checks_id_arguments_before_the_c_call():
    p = Producer.__new__(Producer)  # no C producer behind it: the checks come first
    with pytest.raises(ValueError, match="not both"):
        p.produce_chunk(1, "t", pa.array([b"a"]), ids=pa.array([b"a"]), id_prefix=b"p", id_cols=(([1], 8),))
    with pytest.raises(ValueError, match="go with id_prefix"):
        p.produce_chunk(1, "t", pa.array([b"a"]), ids=pa.array([b"a"]), id_seq0=0)
    with pytest.raises(ValueError, match="required"):
        p.produce_chunk(1, "t", pa.array([b"a"]))
