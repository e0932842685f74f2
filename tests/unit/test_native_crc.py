"""Tier 1: the native CRC-32 of WAL chunks is zlib's, bit for bit, and a chunk written by either is read by either.

The folded (PCLMULQDQ) path handles 64 bytes and more in 16-byte blocks and
the rest by a table: lengths around every block boundary, unaligned starts
and running CRCs are compared with ``zlib.crc32``.
"""

from __future__ import annotations

import os
import random
import zlib

import pyarrow as pa
import pytest

from spark_recoverable_sink.native import library
from spark_recoverable_sink.wal import format as wal_format
from tests.record_ids import TEST_IDS

pytestmark = pytest.mark.skipif(not library.available(),
                                reason=f"native extension not built: {library.why_unavailable()}")


def _cpu_has_pclmul() -> bool:
    with open("/proc/cpuinfo") as f:
        flags = next((line for line in f if line.startswith("flags")), "").split()
    return "pclmulqdq" in flags and "sse4_1" in flags


def test_crc32_is_zlibs_for_every_length_start_and_running_value():
    native = library.module()
    rng = random.Random(7)
    data = os.urandom(70_000)
    lengths = list(range(0, 200)) + [255, 256, 257, 1023, 1024, 1025, 4096 + 15, 65_536, 69_000]
    for n in lengths:
        for start in (0, 1, 3, 8, 13):
            view = data[start:start + n]
            for seed in (0, 1, 0xFFFFFFFF, rng.getrandbits(32)):
                assert native.crc32(view, seed) == zlib.crc32(view, seed), (n, start, seed)


def test_crc32_takes_any_buffer():
    native = library.module()
    raw = os.urandom(5000)
    for buf in (raw, bytearray(raw), memoryview(raw)[17:], pa.py_buffer(raw)):
        assert native.crc32(buf) == zlib.crc32(buf)


def test_the_folded_path_runs_where_the_cpu_has_it_and_the_wal_uses_it_only_there():
    if os.uname().machine != "x86_64":
        pytest.skip(f"the folded CRC is x86-64 only; this is {os.uname().machine} (the table path is tested above)")
    native = library.module()
    assert native.crc32_hardware() == _cpu_has_pclmul()
    # the table path is slower than zlib's: the WAL takes the native CRC only where it is folded
    assert wal_format._crc32_impl() is (native.crc32 if native.crc32_hardware() else zlib.crc32)


def test_a_chunk_checksummed_natively_is_checked_by_zlib_and_back(monkeypatch):
    from spark_recoverable_sink.ids import new_occurrences, with_ids

    batch = with_ids(pa.RecordBatch.from_pylist([{"value": os.urandom(300)} for _ in range(50)]), TEST_IDS, new_occurrences())
    monkeypatch.setattr(wal_format, "_CRC32", library.module().crc32)
    native_chunk = bytes(wal_format.encode_chunk(batch))
    monkeypatch.setattr(wal_format, "_CRC32", zlib.crc32)  # as a build without the extension
    assert wal_format.decode_chunk(native_chunk).equals(batch)
    zlib_chunk = bytes(wal_format.encode_chunk(batch))
    assert zlib_chunk == native_chunk
    monkeypatch.setattr(wal_format, "_CRC32", library.module().crc32)
    assert wal_format.check_chunk(zlib_chunk) == 50
    corrupt = bytearray(zlib_chunk)
    corrupt[-40] ^= 1
    with pytest.raises(Exception, match="checksum"):
        wal_format.check_chunk(bytes(corrupt))
