"""Tier 1: the native occurrence table of a large partition lives in a mapped file, not in the worker's heap.

Past ``spill_above`` bytes the table is a shared mapping of an unlinked file in
the sink's WAL directory (its pages file-backed: written back and evicted by
the kernel, so anonymous memory stays flat; measured by ``bench/memory.py``). Here:
the numbers are the same, nothing is left on disk, and a file that cannot be
made is an error, named as the WAL disk's, never a wrong number.
"""

from __future__ import annotations

import errno
import os
from types import SimpleNamespace

import numpy as np
import pyarrow as pa
import pytest

from spark_recoverable_sink import WalWriteError, fingerprint
from spark_recoverable_sink.native import library
from spark_recoverable_sink.schema import normalize_batch
from spark_recoverable_sink.task.writer import _with_ids
from tests.record_ids import TEST_IDS

pytestmark = pytest.mark.skipif(not library.available(),
                                reason=f"native extension not built: {library.why_unavailable()}")


def test_a_table_past_spill_above_is_an_unlinked_mapped_file_giving_the_same_numbers(tmp_path):
    fps = np.random.default_rng(3).integers(0, 5000, 200_000, dtype=np.uint64)  # ~5000 distinct: a 128 KiB table
    mem, spilled = library.module().Occurrences(), library.module().Occurrences(str(tmp_path), 64 << 10)
    for part in np.array_split(fps, 7):
        assert np.array_equal(mem.number(part), spilled.number(part))
    assert spilled.spilled and not mem.spilled and spilled.nbytes > 64 << 10
    assert os.listdir(tmp_path) == []  # unlinked at once: nothing left behind, even by a killed worker


def test_a_spill_file_that_cannot_be_made_is_an_oserror_and_the_table_is_not_used_again(tmp_path):
    occ = library.module().Occurrences(str(tmp_path / "missing"), 0)
    with pytest.raises(OSError) as ei:
        occ.number(np.arange(10, dtype=np.uint64))
    assert ei.value.errno == errno.ENOENT and "missing" in str(ei.value)
    with pytest.raises(RuntimeError, match="failed half-way"):
        occ.number(np.arange(10, dtype=np.uint64))


def test_the_writer_names_a_refused_spill_file_as_the_wal_disk_refusing_a_write(tmp_path, monkeypatch):
    monkeypatch.setattr(fingerprint, "SPILL_ABOVE", 0)
    rt = SimpleNamespace(config=SimpleNamespace(name="s"), sdir=str(tmp_path / "missing"))
    batch = normalize_batch(pa.RecordBatch.from_pydict({"value": [b"a", b"b"]}), "t", 0, "r")
    with pytest.raises(WalWriteError, match="occurrence table") as ei:
        _with_ids(rt, batch, SimpleNamespace(scheme=TEST_IDS, occurrences=fingerprint.new_occurrences(rt.sdir)))
    assert ei.value.path == rt.sdir and isinstance(ei.value.__cause__, OSError)
