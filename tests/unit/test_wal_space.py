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


def test_a_meta_stamp_the_disk_refuses_at_open_goes_with_the_next_write(tmp_path, monkeypatch):
    """A slot written with wal_sync="none", opened with "commit": its meta must change. A full disk refusing
    that write must not stop the slot from opening (recovery needs no new space)."""
    import lmdb

    path = str(tmp_path / "slot-00000")
    w = Wal(path, sink_name="s", map_size=64 << 20, sync=False)
    w.append(ChunkKey(1, 0, 0, 1), b"x" * 10)
    w.close()
    real = Wal._write

    @contextlib.contextmanager
    def refuse_open(self, what):
        if what == "open":
            raise WalWriteError(f"WAL slot {self.path}: open failed, nothing written: No space left", self.path)
        with real(self, what) as txn:
            yield txn

    monkeypatch.setattr(Wal, "_write", refuse_open)
    again = Wal(path, sink_name="s", map_size=64 << 20, sync=True)
    assert again._stamp and again.chunk_keys() == [(ChunkKey(1, 0, 0, 1), 10)]
    again.prune(chunks=[(ChunkKey(1, 0, 0, 1), 10)])  # the first write carries the stamp
    assert not again._stamp
    again.close()
    env = lmdb.open(path, max_dbs=4)
    try:
        with env.begin() as txn:
            assert txn.get(b"sync", db=env.open_db(b"meta", txn=txn)) == b"commit"
    finally:
        env.close()


def test_no_room_for_a_slot_directory_is_a_write_error_not_an_unreadable_slot(tmp_path, monkeypatch):
    """ext4 on a full disk can create an empty lock file but not a directory: ENOSPC from mkdir."""
    import errno
    import os

    from spark_recoverable_sink.wal.slots import ensure_private_dir

    def full(path, mode=0o777):
        raise OSError(errno.ENOSPC, "No space left on device", path)

    monkeypatch.setattr(os, "mkdir", full)
    with pytest.raises(WalWriteError):
        ensure_private_dir(str(tmp_path / "slot-00001"), "WAL slot directory")


def test_a_renew_that_fails_retires_the_slot_its_prunes_do_nothing(wal, monkeypatch):
    key = ChunkKey(1, 0, 0, 1)

    def no_room():
        raise WalWriteError(f"WAL slot {wal.path} cannot be created: no room", wal.path)

    monkeypatch.setattr(wal, "_open", no_room)
    with pytest.raises(WalWriteError):
        wal.renew()
    assert wal.retired
    wal.prune(chunks=[(key, 10)])  # an attempt tracker of the task that failed: nothing to do, no error


def test_an_idle_worker_writes_deferred_deletions_or_renews_its_empty_slot(tmp_path, monkeypatch):
    """Deletions a full disk refused wait for the next prune, which an idle worker never makes: write_deferred."""
    from spark_recoverable_sink.config import SinkConfig
    from spark_recoverable_sink.task.runtime import WorkerRuntime

    cfg = SinkConfig.build("s", {"bootstrap.servers": "127.0.0.1:9"}, str(tmp_path / "wal"), topic="t")
    rt = WorkerRuntime(cfg)
    try:
        with rt.publisher.task():  # as a task or the poller's idle pass: the poll lock held
            _settle_sequence(rt, monkeypatch)
    finally:
        rt.close()


def _settle_sequence(rt, monkeypatch):
    """The sequence, the poll lock held by the caller."""
    key = ChunkKey(1, 0, 0, 1)
    rt.wal.append(key, b"x" * 10)
    monkeypatch.setattr(rt.wal, "_write", rt.wal._write)
    _refusing(rt.wal, monkeypatch)
    rt.wal.prune(chunks=[(key, 10)])
    assert rt.wal.deferred()
    rt.write_deferred()  # still refused, and the slot holds nothing else: recreated
    assert not rt.wal.deferred() and rt.wal.is_empty()
    rt.wal.append(ChunkKey(2, 0, 0, 2), b"y")
    rt.wal.prune(chunks=[(ChunkKey(2, 0, 0, 2), 1)])
    assert rt.wal.deferred()
    monkeypatch.undo()
    rt.wal.append(ChunkKey(3, 0, 0, 3), b"z")  # not empty: only the deletion is written
    rt.write_deferred()
    assert not rt.wal.deferred() and rt.wal.chunk_keys() == [(ChunkKey(3, 0, 0, 3), 1)]
