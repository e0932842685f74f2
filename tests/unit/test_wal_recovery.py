"""Tier 1: the LMDB write-ahead log of one slot, after a reboot and when a slot fails to open or recover."""

from __future__ import annotations

import os

import pytest

from spark_recoverable_sink.wal.format import ChunkKey
from spark_recoverable_sink.wal.log import Wal, map_size_for
from spark_recoverable_sink.wal.records import OPEN, AttemptState, DeadLetter

from .wal_helpers import MIB, _chunk, _committed, _raw_put, _wal


# -- wal_sync="none": after a reboot, a slot is validated in full -----------------------

def _other_boot(tmp_path, monkeypatch) -> None:
    from spark_recoverable_sink.wal import log as wal_mod

    f = tmp_path / "boot_id"
    f.write_text("00000000-0000-0000-0000-000000000000\n")
    monkeypatch.setattr(wal_mod, "_BOOT_ID_FILE", str(f))


def test_sync_none_slot_is_validated_after_a_reboot_and_refused_if_anything_is_bad(tmp_path, monkeypatch):
    from spark_recoverable_sink.errors import WalUncleanError
    from spark_recoverable_sink.wal.records import encode_attempt

    wal, ck = _committed(tmp_path, sync=False)
    wal.close()
    again = Wal(str(tmp_path / "slot"), sink_name="s", map_size=64 * MIB, sync=False)
    assert not again.validated_after_reboot  # same boot: the page cache still holds every write
    again.close()
    _other_boot(tmp_path, monkeypatch)
    good = Wal(str(tmp_path / "slot"), sink_name="s", map_size=64 * MIB, sync=True)
    assert good.validated_after_reboot and good.attempts()[ck.attempt].committed
    good.close()
    # opened with sync since: the commit that stamped it flushed everything, no more validation
    assert not _wal(tmp_path).validated_after_reboot
    # written without sync again, then a "reboot" with a damaged record
    Wal(str(tmp_path / "slot"), sink_name="s", map_size=64 * MIB, sync=False).close()
    bad = bytearray(encode_attempt(AttemptState(2, 0, 5, 1.0)))
    bad[10] ^= 1
    _raw_put(tmp_path / "slot", b"attempts", ck.attempt.pack(), bytes(bad))
    from spark_recoverable_sink.wal import log as wal_mod

    monkeypatch.setattr(wal_mod, "_BOOT_ID_FILE", str(tmp_path / "another"))  # unknown boot: validate too
    with pytest.raises(WalUncleanError) as ei:
        _wal(tmp_path)
    assert "wal_sync" in str(ei.value) and ei.value.path == str(tmp_path / "slot")


# -- a slot that fails to open or recover: lock released, env closed, never a stuck slot ----

def _runtime_config(tmp_path, **kw):
    from spark_recoverable_sink.config import SinkConfig

    return SinkConfig.build("s", {"bootstrap.servers": "127.0.0.1:9"}, str(tmp_path / "wal"), topic="t", **kw)


def _slot0(tmp_path, sync: bool = True) -> tuple[str, ChunkKey]:
    from spark_recoverable_sink.wal.slots import sink_dir, slot_paths

    lock_path, path = slot_paths(sink_dir(str(tmp_path / "wal"), "s"), 0)
    open(lock_path, "w").close()
    wal = Wal(path, sink_name="s", map_size=map_size_for(1 << 30), sync=sync)
    ck = ChunkKey(1, 0, 0, wal.reserve_gen())
    wal.append(ck, _chunk(5), new_attempt=AttemptState(OPEN, 0, 0, 1.0))
    wal.commit_attempt(ck.attempt, 0, 5, 1.0)
    wal.close()
    return path, ck


def _slot0_free(tmp_path) -> bool:
    from spark_recoverable_sink.wal.slots import SlotLock

    lock = SlotLock(str(tmp_path / "wal" / "s"), 0)
    free = lock.try_acquire()
    lock.release()
    return free


def test_a_corrupt_dead_letter_in_a_slot_marks_it_unreadable_and_releases_its_lock(tmp_path):
    import struct

    from spark_recoverable_sink.task.runtime import WorkerRuntime
    from spark_recoverable_sink.wal.records import encode_dead_letter

    path, ck = _slot0(tmp_path)
    raw = bytearray(encode_dead_letter(DeadLetter("s:1:0:2", 10, "x", "t", None, None, b"v", (), None)))
    raw[35] = 0xFF
    _raw_put(path, b"dead", struct.pack(">QIQI", 1, 0, 2, ck.gen), bytes(raw))
    rt = WorkerRuntime(_runtime_config(tmp_path))
    try:
        assert rt.lock.index != 0 and "dead letter" in rt.adopter.unreadable[0] and path in rt.adopter.unreadable[0]
        assert _slot0_free(tmp_path)  # not held by a lost descriptor: an operator can quarantine it
    finally:
        rt.close()


def test_any_exception_while_opening_a_slot_releases_its_lock(tmp_path, monkeypatch):
    from spark_recoverable_sink.recovery.adopter import SlotAdopter
    from spark_recoverable_sink.task.runtime import WorkerRuntime

    _slot0(tmp_path)
    monkeypatch.setattr(SlotAdopter, "recover", lambda self, wal: (_ for _ in ()).throw(RuntimeError("bug")))
    with pytest.raises(RuntimeError):
        WorkerRuntime(_runtime_config(tmp_path))
    assert _slot0_free(tmp_path)


def test_an_unclean_sync_none_slot_is_quarantined_automatically_and_reported(tmp_path, monkeypatch):
    from spark_recoverable_sink.task.runtime import WorkerRuntime
    from spark_recoverable_sink.wal.records import encode_attempt

    path, ck = _slot0(tmp_path, sync=False)
    bad = bytearray(encode_attempt(AttemptState(2, 0, 5, 1.0)))
    bad[10] ^= 1
    _raw_put(path, b"attempts", ck.attempt.pack(), bytes(bad))
    _other_boot(tmp_path, monkeypatch)
    rt = WorkerRuntime(_runtime_config(tmp_path, wal_sync="none"))
    try:
        [(dest, why)] = rt.adopter.quarantined.items()
        assert "wal_sync" in why and "checksum" in why
        assert os.path.exists(os.path.join(dest, "data.mdb"))  # bytes kept for the operator
        assert not rt.adopter.unreadable and rt.wal.attempts() == {}  # the worker writes in a fresh slot
    finally:
        rt.close()
