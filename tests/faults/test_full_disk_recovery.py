"""Scenario 9d: recovery on a full disk.

The WAL fills its file system (a real, size-limited tmpfs) while the broker is
stalled; the writers die; something else takes the file system's last byte.
The broker comes back and three new worker processes start at once (a
restarted job's workers, more of them than there are slots): each runs what a
task of the driver's drain job runs. They must deliver every record the dead
ones accepted without first needing new space; a worker that finds no free
slot and no room for a new one delivers what it can and says so; and the space
the delivered records held must come back, so that a new task fits again with
the filler still in place.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from spark_recoverable_sink.wal.slots import list_slots

from .conftest import ENGINES, engine_suffix, mount_tmpfs, new_topic, sink_name, unmount
from .procs import REPO, run_cli
from .readback import LiveReader, keys_of, read_back

ROWS = 500  # rows per task; values of 300 B: ~170 KB of WAL per task


def _fill_to_last_byte(directory: str) -> int:
    """Write a file until the file system refuses even one byte; returns its size."""
    written = 0
    fd = os.open(os.path.join(directory, "filler"), os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        for block in (1 << 20, 1 << 16, 4096, 512, 1):
            buf = b"\0" * block
            while True:
                try:
                    n = os.write(fd, buf)
                except OSError:
                    break
                written += n
                if n < block:
                    break
    finally:
        os.close(fd)
    return written


def _start(command: str, args: dict) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "tests.programs.writer_cli", command, json.dumps(args)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=REPO,
                            env={**os.environ, "PYTHONPATH": REPO})


def _finish(p: subprocess.Popen, timeout: float) -> tuple[int, list[dict], str]:
    out, err = p.communicate(timeout=timeout)
    lines = [json.loads(x) for x in out.decode(errors="replace").splitlines() if x.startswith("{")]
    return p.returncode, lines, err.decode(errors="replace")[-3000:]


def _free(path: str) -> int:
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


@pytest.fixture
def small_disk(tmp_path):
    d = str(tmp_path / "disk")
    mount_tmpfs(d, "4m")
    yield d
    unmount(d)


@pytest.mark.parametrize("engine", ENGINES)
def test_09d_full_disk_recovery_delivers_everything_without_new_space(own_broker, small_disk, scenario, engine):
    scenario.scenario = "09d_full_disk_recovery" + engine_suffix(engine)
    scenario.title = f"recovery on a disk filled to its last byte ({engine} engine)"
    scenario.fault = ("wal_dir on a 4 MiB tmpfs, broker SIGSTOPped: two writers until ENOSPC, both die, the file "
                      "system filled to its last byte, broker resumed, three new workers recover at once")
    topic = new_topic(own_broker.bootstrap)
    name = sink_name("f09d")
    args = dict(name=name, kafka_conf={"bootstrap.servers": own_broker.bootstrap}, wal_dir=small_disk, topic=topic,
                value_size=300, opts=dict(ack_timeout_s=0.0, max_block_s=1.0, delivery_engine=engine))
    own_broker.pause()
    fault_at = time.time()
    writers = [_start("task", {**args, "units": [[b, w, (w * 100 + b) * ROWS, ROWS] for b in range(20)]})
               for w in range(2)]
    accepted, refused = [], []
    for w, p in enumerate(writers):
        rc, lines, err = _finish(p, 120)
        assert rc == 0 and len(lines) == 20, err
        for b, out in enumerate(lines):
            if out["ok"]:
                accepted += range((w * 100 + b) * ROWS, (w * 100 + b + 1) * ROWS)
            else:
                refused.append(out)
    assert accepted, f"not one task was accepted: {refused[:1]}"
    assert refused and refused[0]["type"] == "WalWriteError", f"40 tasks fit on a 4 MiB disk? {refused[:1]}"
    filler = _fill_to_last_byte(small_disk)
    sdir = os.path.join(small_disk, name)
    slots_before = list_slots(sdir)
    scenario.figures.update(accepted_tasks=len(accepted) // ROWS, filler_bytes=filler, slots=slots_before,
                            free_bytes_before=_free(small_disk))
    own_broker.resume()
    reader = LiveReader(own_broker.bootstrap, topic).start()
    try:
        workers = [_start("drain_job", {**args, "timeout_s": 60}) for _ in range(3)]
        done = [_finish(p, 120) for p in workers]
        full_at = reader.wait_for(keys_of(accepted), 30)
        t = read_back(own_broker.bootstrap, topic, accepted, reader)
    finally:
        reader.stop()
    scenario.apply(t)
    scenario.recovery(fault_at, full_at)
    scenario.figures.update(workers=[d[1][-1] if d[1] else d[2][-300:] for d in done],
                            free_bytes_after_drain=_free(small_disk))
    assert t.lost == 0, f"lost {t.lost} of {len(accepted)} accepted rows, e.g. {t.lost_sample}; workers: {done}"
    for rc, lines, err in done:
        assert rc == 0 and lines and lines[-1]["pending"] == 0 and not lines[-1]["adopted_left"], (rc, lines, err)
    # Delivering freed what it held: a new task fits on the disk again, the filler still in place.
    rc, lines, err = run_cli("task", {**args, "units": [[100, 0, 1_000_000, ROWS]]})
    assert rc == 0 and lines and lines[0]["ok"], (lines[0]["message"] if lines else None, err)
    scenario.figures.update(free_bytes_after_new_task=_free(small_disk))


def test_09e_no_room_for_a_slot_is_a_clear_error_not_a_crash(tmp_path, scenario):
    """A worker that finds no free slot and no room for a new one: its task fails naming the full disk.

    Before: LMDB created the new slot's lock file and wrote it through a memory
    map, and the process died of SIGBUS (or the slot was called "unreadable" and
    the next one tried, without end). No broker is needed: nothing is produced.
    """
    from spark_recoverable_sink.wal.slots import SlotLock, sink_dir

    scenario.scenario, scenario.title = "09e_no_room_for_a_slot", "No free slot and no room for a new one: a task"
    disk = str(tmp_path / "disk")
    mount_tmpfs(disk, "1m")
    try:
        name = sink_name("f09e")
        held = SlotLock(sink_dir(disk, name), 0)  # a live worker holds the only slot
        assert held.try_acquire(create=True)
        _fill_to_last_byte(disk)
        args = dict(name=name, kafka_conf={"bootstrap.servers": "127.0.0.1:9"}, wal_dir=disk, topic="t",
                    units=[[0, 0, 0, 10]])
        rc, lines, err = run_cli("task", args, timeout=60)
        held.release()
    finally:
        unmount(disk)
    assert rc == 0, f"the worker died (rc {rc}): {err}"
    assert lines and lines[0]["type"] == "WalWriteError", (lines, err)
    assert "no room" in lines[0]["message"] or "cannot be created" in lines[0]["message"], lines[0]["message"]


def test_09f_a_prune_the_full_disk_refuses_is_deferred_and_the_slot_renewed(tmp_path, scenario):
    """Deleting needs fresh pages too (LMDB copies on write): on a disk with no byte left, a prune of delivered
    chunks reads as done and is written later; an empty slot is recreated and its space returned. Small
    chunks fill the disk, so LMDB's own free pages are used up too (tests/unit/test_wal_space.py: a dead
    letter is never deferred)."""
    from spark_recoverable_sink import WalWriteError
    from spark_recoverable_sink.wal.format import AttemptKey, ChunkKey
    from spark_recoverable_sink.wal.log import Wal

    scenario.scenario, scenario.title = "09f_prune_deferred_on_a_full_disk", "A prune the full disk refuses, deferred"
    disk = str(tmp_path / "disk")
    mount_tmpfs(disk, "1m")
    try:
        wal = Wal(os.path.join(disk, "slot-00000"), sink_name="s", map_size=64 << 20, sync=True)
        closing = wal.close
        keys = []
        with pytest.raises(WalWriteError):
            for i in range(100_000):
                key = ChunkKey(1, 0, i, 1)
                wal.append(key, b"x" * 100)
                keys.append((key, 100))
        _fill_to_last_byte(disk)
        assert _free(disk) == 0
        half = len(keys) // 2
        wal.prune(chunks=keys[:half], attempts_done=[AttemptKey(1, 0, 1)])  # refused by the disk: deferred
        assert wal.deferred() and wal.live_bytes == 100 * (len(keys) - half)
        wal.prune(chunks=keys[half:])  # the deferred deletions with it: refused again, deferred
        assert wal.deferred() and wal.is_empty() and wal.live_bytes == 0
        assert wal.chunk_keys() == [] and wal.read_chunk(keys[0][0]) is None
        assert wal.renewable()
        size = wal.data_file_bytes()
        wal.renew()  # no byte free: the old files go first
        assert not wal.deferred() and wal.is_empty() and wal.data_file_bytes() < size // 4
        wal.append(ChunkKey(2, 0, 0, 2), b"y" * 100)  # the space came back
    finally:
        closing()
        unmount(disk)

