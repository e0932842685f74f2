"""The test hooks themselves (tests/hooks.py): a park is an event the test waits for, a crash fires once."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from tests.hooks import Hooks, env_for

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

CHILD = textwrap.dedent("""
    import sys
    from spark_recoverable_sink import _points
    for rows in (1000, 2000, 3000):
        _points.point("task.mid_task", batch=int(sys.argv[1]), spark_partition=0, rows=rows)
        print("passed", rows, flush=True)
""")


def _child(hook_dir: str, batch: int, timeout_s: float = 60) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": ROOT, **env_for(hook_dir)}
    return subprocess.Popen([sys.executable, "-c", CHILD, str(batch)], env=env, cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_park_blocks_the_first_matching_process_until_released(tmp_path):
    hooks = Hooks(str(tmp_path))
    parked = hooks.park("task.mid_task", batch__ge=1, rows__ge=2000)
    other = _child(str(tmp_path), 0)  # batch 0 does not match: runs through
    assert other.wait(60) == 0 and other.stdout.read().split("\n")[:3] == ["passed 1000", "passed 2000",
                                                                            "passed 3000"]
    p = _child(str(tmp_path), 1)
    try:
        at = parked.wait(60)
        assert at["pid"] == p.pid and at["coords"] == {"batch": 1, "spark_partition": 0, "rows": 2000}
        assert p.poll() is None  # still parked: the test holds it
        second = _child(str(tmp_path), 2)  # the park was claimed: a second process is not held
        assert second.wait(60) == 0
        parked.release()
        assert p.wait(60) == 0
        assert p.stdout.read().split() == ["passed", "1000", "passed", "2000", "passed", "3000"]
    finally:
        if p.poll() is None:
            p.kill()


def test_a_park_never_released_fails_loudly(tmp_path):
    hooks = Hooks(str(tmp_path))
    parked = hooks.park("task.mid_task", timeout_s=0.5)
    p = _child(str(tmp_path), 1)
    assert p.wait(60) != 0
    assert "HookTimeout" in p.stderr.read()
    assert parked.expired() is not None


def test_crash_ends_the_first_process_past_the_threshold_once(tmp_path):
    hooks = Hooks(str(tmp_path))
    crash = hooks.crash("task.mid_task", after_rows=2000)
    p = _child(str(tmp_path), 3)
    assert p.wait(60) == 137
    assert p.stdout.read().split() == ["passed", "1000"]
    assert crash.fired()["pid"] == p.pid and crash.fired()["coords"]["rows"] == 2000
    again = _child(str(tmp_path), 3)
    assert again.wait(60) == 0  # one-shot
    assert hooks.armed() == []


def test_wait_without_a_matching_process_is_an_assertion(tmp_path):
    parked = Hooks(str(tmp_path)).park("task.after_commit")
    with pytest.raises(AssertionError, match="no process reached task.after_commit"):
        parked.wait(0.2)
