"""Processes: start the no-Spark writer program, and find, watch and kill pids through ``/proc``.

Pids are found by ancestry (children of *this* test process's JVM's
``pyspark.daemon``; ``CoarseGrainedExecutorBackend`` JVMs under a process),
never by name.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run_cli(command: str, args: dict, timeout: float = 120) -> tuple[int, list[dict], str]:
    """Run ``python -m tests.programs.writer_cli COMMAND ARGS`` (no Spark); returns (rc, JSON lines, stderr tail)."""
    env = {**os.environ, "PYTHONPATH": REPO}
    p = subprocess.run([sys.executable, "-m", "tests.programs.writer_cli", command, json.dumps(args)],
                       capture_output=True, timeout=timeout, env=env, cwd=REPO)
    lines = [json.loads(line) for line in p.stdout.decode(errors="replace").splitlines() if line.startswith("{")]
    return p.returncode, lines, p.stderr.decode(errors="replace")[-3000:]


def _stat_fields(pid: int) -> list[str] | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            raw = f.read()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    return raw.rsplit(")", 1)[1].split()


def ppid(pid: int) -> int | None:
    f = _stat_fields(pid)
    return int(f[1]) if f else None


def started(pid: int) -> int | None:
    """When ``pid`` started (clock ticks since boot, ``/proc/<pid>/stat`` field 22); ``None`` if it is gone.

    A pid and its start time name one process: after a kill, the pid may be
    given to another process (pids wrap around on a long run).
    """
    f = _stat_fields(pid)
    return int(f[19]) if f else None


def alive(pid: int, since: int | None = None) -> bool:
    """Whether ``pid`` runs (a zombie does not); with ``since`` (its :func:`started`), only that process counts."""
    f = _stat_fields(pid)
    return bool(f) and f[0] not in ("Z", "X") and (since is None or int(f[19]) == since)


def cpu_ticks(pid: int) -> int:
    f = _stat_fields(pid)
    return int(f[11]) + int(f[12]) if f else -1


def cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return ""


def _all_pids() -> list[int]:
    return [int(p) for p in os.listdir("/proc") if p.isdigit()]


def children(pid: int) -> list[int]:
    return [p for p in _all_pids() if ppid(p) == pid]


def descendants(pid: int) -> list[int]:
    parent = {p: ppid(p) for p in _all_pids()}
    out, frontier = [], [pid]
    while frontier:
        nxt = [p for p, pp in parent.items() if pp in frontier]
        out += nxt
        frontier = nxt
    return out


def spark_python_workers(root: int | None = None) -> list[int]:
    """Python workers forked by the ``pyspark.daemon`` of JVMs under ``root`` (default: this process)."""
    root = os.getpid() if root is None else root
    out = []
    for p in descendants(root):
        if "pyspark.daemon" in cmdline(p) and "java" in cmdline(ppid(p) or 0):
            out += [c for c in children(p) if alive(c)]
    return out


def executor_jvms(root: int) -> list[int]:
    """Executor JVMs (``CoarseGrainedExecutorBackend``) under ``root``."""
    return [p for p in descendants(root) if "CoarseGrainedExecutorBackend" in cmdline(p) and alive(p)]


def wait_dead(pid: int, timeout_s: float) -> bool:
    """Wait until ``pid`` has exited (or is a zombie); False after ``timeout_s``."""
    end = time.monotonic() + timeout_s
    while alive(pid):
        if time.monotonic() > end:
            return False
        time.sleep(0.02)
    return True


def kill9(pid: int) -> float:
    """SIGKILL ``pid``; returns the time of the kill (``time.time()``)."""
    t = time.time()
    os.kill(pid, signal.SIGKILL)
    return t


def executor_of(pid: int, executors: list[int]) -> int | None:
    """The executor JVM (one of ``executors``) that ``pid`` descends from, ``None`` if none."""
    p: int | None = pid
    while p and p > 1:
        if p in executors:
            return p
        p = ppid(p)
    return None
