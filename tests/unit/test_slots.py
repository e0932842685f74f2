"""Tier 1: slot ownership by OS file lock; orphans are slots whose lock is free."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from spark_recoverable_sink.slots import SlotLock, acquire_free_slot, list_slots, sink_dir

HOLDER = """
import sys, time
from spark_recoverable_sink.slots import acquire_free_slot
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
