"""CPU time of the benchmark's whole process tree, from ``/proc``.

The bench process is the root of everything a run uses: the Spark driver
JVM, Spark's Python daemon and its workers, and the broker are all its
descendants. :func:`tree_cpu_s` sums user + system time over the live
descendants (and the root), plus the time of their children already reaped
(``cutime``/``cstime``): a worker Spark closed counts too. A process that
died between two samples and was not reaped yet is missed (it is rare and
short). Resolution: one clock tick (10 ms).

Work the kernel does for the run outside that tree (the page-cache
writeback of the WAL's and the broker's files, kworker and journal
threads, interrupts) is in no process of it: :func:`machine_cpu_s` reads
the whole machine's busy and iowait time from ``/proc/stat``, and
:class:`CpuMeter` records both over the same window (whatever else runs on
the machine is in the machine figure too).
"""

from __future__ import annotations

import os

__all__ = ["tree_cpu_s", "tree_cpu_by_kind", "tree_pids", "tree_threads", "machine_cpu_s", "process_kind",
           "CpuMeter", "KINDS"]

#: What a process of the tree is: the broker's JVM, Spark's JVM (driver and, in local mode, the executors),
#: or Python (the bench driver, Spark's Python daemon and workers, with their librdkafka threads).
KINDS = ("spark_jvm", "python", "broker")

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
    return sum(tree_cpu_by_kind(root).values())


def process_kind(pid: int) -> str:
    """What process ``pid`` is, of :data:`KINDS` (its command line; a process gone counts as Python)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            cmd = fh.read()
    except OSError:
        return "python"
    argv = cmd.split(b"\0")
    if os.path.basename(argv[0]) != b"java":
        return "python"
    return "broker" if b"kafka.Kafka" in argv else "spark_jvm"


def machine_cpu_s() -> dict[str, float]:
    """The whole machine's CPU seconds since boot, all cores: ``busy`` (not idle, not iowait) and ``iowait``.

    From the ``cpu`` line of ``/proc/stat`` (user nice system idle iowait irq
    softirq steal ...; guest time is already inside user).
    """
    with open("/proc/stat") as fh:
        fields = fh.readline().split()
    ticks = [int(x) for x in fields[1:9]] + [0] * max(0, 9 - len(fields))
    user, nice, system, idle, iowait, irq, softirq, steal = ticks[:8]
    return {"busy": (user + nice + system + irq + softirq + steal) / _TICK, "iowait": iowait / _TICK,
            "kernel": (system + irq + softirq) / _TICK}


def _proc_stats() -> dict[int, tuple[int, float]]:
    """(parent pid, CPU seconds with reaped children) of every live process."""
    stats: dict[int, tuple[int, float]] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            st = _stat(int(name))
            if st is not None:
                stats[int(name)] = st
    return stats


def tree_pids(root: int | None = None, stats: dict[int, tuple[int, float]] | None = None) -> list[int]:
    """``root`` (default: this process) and its live descendants, from ``stats`` (default: read now)."""
    stats = _proc_stats() if stats is None else stats
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in stats.items():
        children.setdefault(ppid, []).append(pid)
    out, todo = [], [os.getpid() if root is None else root]
    while todo:
        pid = todo.pop()
        if pid in stats:
            out.append(pid)
        todo.extend(children.get(pid, ()))
    return out


def tree_cpu_by_kind(root: int | None = None) -> dict[str, float]:
    """CPU seconds of ``root``'s live tree per :data:`KINDS` (reaped children count for their parent's kind)."""
    stats = _proc_stats()
    out = dict.fromkeys(KINDS, 0.0)
    for pid in tree_pids(root, stats):
        out[process_kind(pid)] += stats[pid][1]
    return out


def tree_threads(root: int | None = None) -> dict[tuple[int, int], tuple[str, str, float]]:
    """(pid, tid) -> (process kind, thread name, user+system seconds) of every thread of ``root``'s live tree."""
    out: dict[tuple[int, int], tuple[str, str, float]] = {}
    for pid in tree_pids(root):
        kind = process_kind(pid)
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in tids:
            try:
                with open(f"/proc/{pid}/task/{tid}/stat", "rb") as fh:
                    raw = fh.read()
            except OSError:
                continue
            comm = raw[raw.index(b"(") + 1:raw.rindex(b")")].decode(errors="replace")
            f = raw[raw.rindex(b")") + 2:].split()
            out[(pid, int(tid))] = (kind, comm, (int(f[11]) + int(f[12])) / _TICK)
    return out


class CpuMeter:
    """CPU seconds of the process tree of ``root`` (default: this process) between :meth:`start` and :meth:`stop`."""

    def __init__(self, root: int | None = None) -> None:
        self._root = root
        self._t0 = 0.0

    def start(self) -> "CpuMeter":
        self._m0 = machine_cpu_s()
        self._by0 = tree_cpu_by_kind(self._root)
        self._t0 = sum(self._by0.values())
        self.split: dict[str, float] = {}
        self.machine: dict[str, float] = {}
        return self

    def stop(self) -> float:
        """CPU seconds since :meth:`start`; :attr:`split` holds them per kind (:data:`KINDS`).

        A process that ended between the two samples and was reaped counts for its parent's kind (a Python
        worker Spark closed: Python, its daemon reaps it); one reaped by a process of another kind moves its
        whole CPU time there (rare within a timed write: Spark's Python daemon outlives it).
        :attr:`machine` holds the whole machine's ``busy``, ``kernel`` and ``iowait`` seconds over the window.
        """
        by1 = tree_cpu_by_kind(self._root)
        m1 = machine_cpu_s()
        self.machine = {k: round(m1[k] - self._m0[k], 3) for k in m1}
        self.split = {k: round(by1[k] - self._by0.get(k, 0.0), 3) for k in KINDS}
        return sum(by1.values()) - self._t0
