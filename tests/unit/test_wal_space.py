"""Which prunes a refusing disk may defer (wal/space.py): never one that stores a dead letter."""

from __future__ import annotations

import contextlib

import pytest

from spark_recoverable_sink import WalWriteError
from spark_recoverable_sink.wal.format import AttemptKey, ChunkKey
from spark_recoverable_sink.wal.log import Wal
from spark_recoverable_sink.wal.records import DeadLetter


@pytest.fixture
def wal(tmp_path):
    w = Wal(str(tmp_path / "slot-00000"), sink_name="s", map_size=64 << 20, sync=False)
    yield w
    w.close()


def _refusing(wal, monkeypatch):
    real = wal._write

    @contextlib.contextmanager
    def refuse(what):
        if what == "prune":
            raise WalWriteError(f"WAL slot {wal.path}: {what} failed, nothing written: No space left", wal.path)
        with real(what) as txn:
            yield txn

    monkeypatch.setattr(wal, "_write", refuse)
    return real


def test_a_refused_prune_with_a_dead_letter_raises_and_defers_nothing(wal, monkeypatch):
    key = ChunkKey(1, 0, 0, 1)
    wal.append(key, b"x" * 10)
    _refusing(wal, monkeypatch)
    dead = [(key.pack(), DeadLetter("r", 87, "refused", "t", None, None, b"v", (), None))]
    with pytest.raises(WalWriteError):
        wal.prune(chunks=[(key, 10)], dead=dead)
    assert not wal.deferred() and not wal.is_empty() and wal.live_bytes == 10


def test_a_refused_prune_is_deferred_then_written_with_the_next_one(wal, monkeypatch):
    a, b = ChunkKey(1, 0, 0, 1), ChunkKey(1, 0, 10, 1)
    for k in (a, b):
        wal.append(k, b"x" * 10)
    monkeypatch.setattr(wal, "_write", wal._write)  # restored by monkeypatch.undo below
    _refusing(wal, monkeypatch)
    wal.prune(chunks=[(a, 10)], attempts_done=[AttemptKey(1, 0, 1)])
    assert wal.deferred() and wal.live_bytes == 10 and wal.chunk_keys() == [(b, 10)]
    wal.prune(chunks=[(a, 10)])  # pruned again while deferred: counted once
    assert wal.live_bytes == 10
    monkeypatch.undo()
    wal.prune(chunks=[(b, 10)])  # writes the deferred deletion too
    assert not wal.deferred() and wal.live_bytes == 0 and wal.is_empty()
    wal.close()
    again = Wal(wal.path, sink_name="s", map_size=64 << 20, sync=False)
    try:
        assert again.is_empty() and again.attempts() == {}
    finally:
        again.close()
