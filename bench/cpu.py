"""CPU time of the benchmark's whole process tree, from ``/proc``.

The bench process is the root of everything a run uses: the Spark driver
JVM, Spark's Python daemon and its workers, and the broker are all its
descendants. :func:`tree_cpu_s` sums user + system time over the live
descendants (and the root), plus the time of their children already reaped
(``cutime``/``cstime``): a worker Spark closed counts too. A process that
died between two samples and was not reaped yet is missed (it is rare and
short). Resolution: one clock tick (10 ms).
"""

from __future__ import annotations

import os

__all__ = ["tree_cpu_s", "CpuMeter"]

_TICK = os.sysconf("SC_CLK_TCK")


def _stat(pid: int) -> tuple[int, float] | None:
    """(parent pid, user+system+children's seconds) of ``pid``; None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            raw = fh.read()
    except OSError:
        return None
    fields = raw[raw.rindex(b")") + 2:].split()  # after "(comm)", which may hold spaces
    ppid = int(fields[1])
    utime, stime, cutime, cstime = (int(x) for x in fields[11:15])
    return ppid, (utime + stime + cutime + cstime) / _TICK


def tree_cpu_s(root: int | None = None) -> float:
    """CPU seconds of ``root`` (default: this process) and every live descendant."""
    root = os.getpid() if root is None else root
    stats: dict[int, tuple[int, float]] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            st = _stat(int(name))
            if st is not None:
                stats[int(name)] = st
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in stats.items():
        children.setdefault(ppid, []).append(pid)
    total, todo = 0.0, [root]
    while todo:
        pid = todo.pop()
        if pid in stats:
            total += stats[pid][1]
        todo.extend(children.get(pid, ()))
    return total


class CpuMeter:
    """CPU seconds of the process tree of ``root`` (default: this process) between :meth:`start` and :meth:`stop`."""

    def __init__(self, root: int | None = None) -> None:
        self._root = root
        self._t0 = 0.0

    def start(self) -> "CpuMeter":
        self._t0 = tree_cpu_s(self._root)
        return self

    def stop(self) -> float:
        return tree_cpu_s(self._root) - self._t0
