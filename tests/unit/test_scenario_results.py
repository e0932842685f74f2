"""The fault suite's results file: rows recorded by processes at once are all kept.

Two pytest-xdist workers (or a soak beside the suite) record rows into one
JSON file; each replaces the whole file. The read-modify-write holds a lock:
a writer that starts while another is between its read and its write waits
for it, then reads what it wrote.
"""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
import time

from tests.faults.scenario_results import ScenarioRow, record_result

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CHILD = ("import sys; from tests.faults.scenario_results import ScenarioRow, record_result; "
         "record_result(ScenarioRow('second', 't', status='passed'), sys.argv[1])")


def _waits_for_flock(pid: int, path: str) -> bool:
    """Whether ``pid`` is blocked in ``flock`` on ``path`` (a waiter line of /proc/locks)."""
    ino = os.stat(path).st_ino
    with open("/proc/locks") as f:
        return any("->" in line.split() and str(pid) in line.split() and line.split()[-3].endswith(f":{ino}")
                   for line in f)


def test_a_row_recorded_while_another_writer_is_mid_write_is_kept(tmp_path):
    path = str(tmp_path / "results.json")
    record_result(ScenarioRow("zeroth", "t", status="passed"), path)
    with open(f"{path}.lock", "a") as lock:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX)  # this test is the other writer, between read and write
        with open(path) as f:
            mine = json.load(f)
        child = subprocess.Popen([sys.executable, "-c", CHILD, path], cwd=ROOT, stderr=subprocess.PIPE, text=True)
        try:
            end = time.monotonic() + 60
            while child.poll() is None and not _waits_for_flock(child.pid, f"{path}.lock"):
                assert time.monotonic() < end, "the child neither waited for the lock nor ended"
                time.sleep(0.01)
            mine["scenarios"]["first"] = {"scenario": "first", "status": "passed"}
            with open(path, "w") as f:
                json.dump(mine, f)
        finally:
            fcntl.flock(lock.fileno(), fcntl.LOCK_UN)
            _, err = child.communicate(timeout=60)
    assert child.returncode == 0, err
    with open(path) as f:
        assert sorted(json.load(f)["scenarios"]) == ["first", "second", "zeroth"]
    assert sorted(os.listdir(tmp_path)) == ["results.json", "results.json.lock"]  # no temporary file left
