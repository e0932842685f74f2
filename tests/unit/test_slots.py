"""Tier 1: slot ownership by OS file lock; orphans are slots whose lock is free."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from spark_recoverable_sink.wal.slots import (
    SlotLock,
    acquire_free_slot,
    list_slots,
    sink_dir,
)

HOLDER = """
import sys, time
from spark_recoverable_sink.wal.slots import acquire_free_slot
lock = acquire_free_slot(sys.argv[1])
print(lock.index, flush=True)
time.sleep(600)
"""


def _holder(sdir: str) -> tuple[subprocess.Popen, int]:
    p = subprocess.Popen([sys.executable, "-c", HOLDER, sdir], stdout=subprocess.PIPE, text=True)
    return p, int(p.stdout.readline())


def test_two_processes_never_share_a_slot(tmp_path):
    sdir = sink_dir(str(tmp_path), "s")
    p1, i1 = _holder(sdir)
    p2, i2 = _holder(sdir)
    try:
        assert i1 != i2
        mine = acquire_free_slot(sdir)
        assert mine.index not in (i1, i2)
        assert list_slots(sdir) == sorted([i1, i2, mine.index])
        assert not SlotLock(sdir, i1).try_acquire()
        mine.release()
    finally:
        p1.kill(), p2.kill()
        p1.wait(), p2.wait()


def test_lock_of_a_killed_owner_is_free(tmp_path):
    sdir = sink_dir(str(tmp_path), "s")
    p, index = _holder(sdir)
    lock = SlotLock(sdir, index)
    assert not lock.try_acquire()
    os.kill(p.pid, signal.SIGKILL)
    p.wait()
    deadline = time.monotonic() + 5
    while not lock.try_acquire():
        assert time.monotonic() < deadline
        time.sleep(0.01)
    assert lock.held
    # the free slot is reused before a new one is made
    lock.release()
    again = acquire_free_slot(sdir)
    assert again.index == index
    again.release()


def test_lock_file_names_its_holder(tmp_path):
    sdir = sink_dir(str(tmp_path), "s")
    lock = acquire_free_slot(sdir)
    with open(lock.lock_path) as f:
        assert f"pid={os.getpid()}" in f.read()
    lock.release()
    assert oct(os.stat(sdir).st_mode & 0o777) == oct(0o700)


# -- quarantine while another process is between open() and flock() ------------------

def _park_once(action):
    """A hook that runs ``action`` the first time a lock file has been opened but not yet locked."""
    fired = []

    def hook(name, coords):
        if name == "slot.lock.opened" and not fired:
            fired.append(coords["path"])
            action()
    return hook, fired


def test_a_lock_on_a_file_quarantined_between_open_and_flock_is_let_go(tmp_path):
    from spark_recoverable_sink import _points
    from spark_recoverable_sink.wal.quarantine import quarantine_slot

    sdir = sink_dir(str(tmp_path), "s")
    acquire_free_slot(sdir).release()  # slot 0 exists, free
    hook, fired = _park_once(lambda: quarantine_slot(str(tmp_path), "s", 0))
    before = _points._hook  # the session's test hooks (tests/hooks.py): put back after
    _points.install(hook)
    try:
        lock = SlotLock(sdir, 0)
        assert not lock.try_acquire()  # the file it opened is gone: no owner of a deleted slot
        assert fired and not lock.held
    finally:
        _points.install(before)


def test_a_lock_retries_when_the_path_was_replaced_between_open_and_flock(tmp_path):
    from spark_recoverable_sink import _points
    from spark_recoverable_sink.wal.quarantine import quarantine_slot

    sdir = sink_dir(str(tmp_path), "s")
    acquire_free_slot(sdir).release()

    def quarantine_then_recreate():
        quarantine_slot(str(tmp_path), "s", 0)
        other = SlotLock(sdir, 0)  # another process creates slot 0 anew and holds it
        assert other.try_acquire(create=True)
        holders.append(other)

    holders: list[SlotLock] = []
    hook, fired = _park_once(quarantine_then_recreate)
    before = _points._hook
    _points.install(hook)
    try:
        lock = SlotLock(sdir, 0)
        # Before the fix this returned True: a lock on the unlinked file while `other` holds
        # the file at the path -- two owners of one slot.
        assert not lock.try_acquire()
        holders[0].release()
        assert lock.try_acquire()
        mine, at_path = os.fstat(lock._fd), os.stat(lock.lock_path)
        assert (mine.st_dev, mine.st_ino) == (at_path.st_dev, at_path.st_ino)
        lock.release()
    finally:
        _points.install(before)


# -- a wal_dir another user could have planted or can change --------------------------

import pytest  # noqa: E402

from spark_recoverable_sink.errors import ConfigError, WalError  # noqa: E402


def test_wal_dir_owned_by_another_user_is_refused(tmp_path):
    wal = tmp_path / "wal"
    wal.mkdir(mode=0o700)
    os.chown(wal, 54321, 54321)
    with pytest.raises(WalError, match="owned by uid 54321") as ei:
        sink_dir(str(wal), "s")
    assert "wal_dir" in str(ei.value) and str(wal) in str(ei.value) and ei.value.path == str(wal)


@pytest.mark.parametrize("mode", [0o777, 0o770, 0o1777, 0o720])
def test_wal_dir_writable_by_group_or_others_is_refused(tmp_path, mode):
    wal = tmp_path / "wal"
    wal.mkdir()
    os.chmod(wal, mode)
    with pytest.raises(WalError, match="chmod go-w"):
        sink_dir(str(wal), "s")


def test_planted_symlinks_are_never_followed(tmp_path):
    target = tmp_path / "attacker"
    target.mkdir(mode=0o700)
    (tmp_path / "wal").symlink_to(target)
    with pytest.raises(WalError, match="symbolic link"):
        sink_dir(str(tmp_path / "wal"), "s")
    wal = tmp_path / "wal2"
    wal.mkdir(mode=0o700)
    (wal / "s").symlink_to(target)  # the sink directory
    with pytest.raises(WalError, match="symbolic link"):
        sink_dir(str(wal), "s")
    sdir = sink_dir(str(tmp_path / "wal3"), "s")
    os.symlink(str(target / "x.lock"), os.path.join(sdir, "slot-00000.lock"))  # a lock file
    with pytest.raises(WalError, match="symbolic link"):
        SlotLock(sdir, 0).try_acquire()
    assert not (target / "x.lock").exists()


def test_lock_file_of_another_user_is_refused(tmp_path):
    sdir = sink_dir(str(tmp_path / "wal"), "s")
    path = os.path.join(sdir, "slot-00000.lock")
    open(path, "w").close()
    os.chown(path, 54321, 54321)
    with pytest.raises(WalError, match="owned by uid 54321"):
        SlotLock(sdir, 0).try_acquire()


def test_wal_dir_that_is_a_file_is_a_wal_error_naming_it_on_the_executor(tmp_path):
    f = tmp_path / "file"
    f.write_text("x")
    for path in (str(f), str(f / "wal")):
        with pytest.raises(WalError) as ei:
            sink_dir(path, "s")
        assert "wal_dir" in str(ei.value) and str(f) in str(ei.value)
        assert not isinstance(ei.value, (FileExistsError, NotADirectoryError))


def test_default_wal_dir_is_private_to_the_user_and_expanded_on_the_executor(tmp_path, monkeypatch):
    from spark_recoverable_sink.config import DEFAULT_WAL_DIR

    assert DEFAULT_WAL_DIR.startswith("~/") and "/tmp" not in DEFAULT_WAL_DIR
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    sdir = sink_dir(DEFAULT_WAL_DIR, "s")
    assert sdir == str(tmp_path / "home" / ".local" / "state" / "spark_recoverable_sink" / "s")
    assert oct(os.stat(os.path.dirname(sdir)).st_mode & 0o777) == oct(0o700)


# -- the driver refuses what is wrong on every host, and creates nothing ------------------

def _build(wal_dir):
    from spark_recoverable_sink.config import SinkConfig

    return SinkConfig.build("s", {"bootstrap.servers": "b:9092"}, wal_dir, topic="t")


def test_driver_refuses_a_wal_dir_that_is_a_file_or_a_symlink_or_under_a_file(tmp_path):
    f = tmp_path / "file"
    f.write_text("x")
    (tmp_path / "link").symlink_to(tmp_path)
    for bad, why in ((str(f), "not a directory"), (str(f / "wal"), "not a directory"),
                     (str(tmp_path / "link"), "symbolic link"), ("/etc/passwd", "not a directory")):
        with pytest.raises(ConfigError, match=why) as ei:
            _build(bad)
        assert ei.value.option == "wal_dir" and bad.split("/wal")[0] in str(ei.value)


def test_driver_accepts_a_missing_wal_dir_without_creating_it(tmp_path):
    _build(str(tmp_path / "a" / "b"))
    _build("~/somewhere")
    assert not (tmp_path / "a").exists()
