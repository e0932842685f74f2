"""Tier 1: the fault tests' process identity: a pid and its start time, so that a reused pid is not the killed one."""

from __future__ import annotations

import subprocess
import sys

from tests.faults.procs import alive, kill9, started


def test_a_killed_process_is_told_apart_from_another_that_got_its_pid():
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        since = started(p.pid)
        assert since is not None and alive(p.pid) and alive(p.pid, since)
        # another process under that pid later: same pid, another start time
        assert not alive(p.pid, since + 1)
        kill9(p.pid)
        p.wait(10)
        assert started(p.pid) is None and not alive(p.pid, since)
    finally:
        p.kill()
        p.wait(10)
