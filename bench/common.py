"""What every benchmark section stands on: the producer settings, a section's broker, topics, CPU, the machine.

Runs in the benchmark's driver process (bench/run.py) and, for the producer
settings and the WAL's record count, in its child processes. Every writer
measured here uses the *same* producer settings: librdkafka's defaults plus
the sink's safe defaults (:func:`producer_conf`), checked against what the
sink itself hands to confluent-kafka (:func:`check_same_producer_conf`).
"""

from __future__ import annotations

import math
import os
import platform
import subprocess
import sys
import time
from typing import Any, Iterator

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if REPO not in sys.path:
    sys.path.insert(0, REPO)

#: The sink's safe defaults, and the Java client's partitioner (what Spark's own Kafka sink uses), for every writer.
SAFE_PRODUCER_CONF = {"enable.idempotence": "true", "acks": "all", "partitioner": "murmur2_random"}
#: A bench broker removes a deleted topic's files this long after the deletion (Kafka's default: 60 s, which
#: removed earlier runs' files during later timed writes).
DELETE_DELAY_MS = 200


def log(msg: str) -> None:
    """A progress line on stderr: ``[bench HH:MM:SS] msg``."""
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def producer_conf(bootstrap: str) -> dict[str, str]:
    """The producer configuration of every writer: librdkafka defaults + the sink's safe defaults."""
    return {"bootstrap.servers": bootstrap, **SAFE_PRODUCER_CONF}


def check_same_producer_conf(bootstrap: str) -> dict[str, str]:
    """The configuration the sink hands to confluent-kafka.

    Raises:
        RuntimeError: it differs from :func:`producer_conf` (the comparison would not be fair).
    """
    from spark_recoverable_sink.config import SinkConfig

    eff = SinkConfig.build("conf-check", producer_conf(bootstrap), "/tmp/unused").producer_conf()
    if eff != producer_conf(bootstrap):
        raise RuntimeError(f"the sink's producer conf {eff} differs from the writers' {producer_conf(bootstrap)}")
    return eff


# -- the section's broker -----------------------------------------------------------------------------------------


class Brokers:
    """A fresh Apache Kafka broker for each section (devtools/kafka_broker.py), and what each one used.

    Single-node KRaft, its log on the local disk, a 1 GiB heap, a deleted
    topic's files removed within :data:`DELETE_DELAY_MS` (:func:`delete_topic`
    waits for them: no removal runs inside a timed write). ``used`` holds, per
    section, the broker's CPU seconds and peak resident set, read when it stops.
    """

    def __init__(self, scratch: str) -> None:
        self.scratch = scratch
        self.current: Any = None
        self.section = ""
        self.used: dict[str, dict[str, Any]] = {}

    def fresh(self, section: str) -> Any:
        """Stop the running broker, start a new one for ``section``; returns it."""
        from devtools.kafka_broker import KafkaBroker

        self.stop()
        self.section = section
        self.current = KafkaBroker(os.path.join(self.scratch, f"kafka-{section}"), heap="1g", jvm_options=(),
                                   properties={"log.segment.delete.delay.ms": str(DELETE_DELAY_MS)}).start()
        self.used[section] = {"loadavg_start": list(os.getloadavg())}
        return self.current

    def stop(self) -> None:
        if self.current is None:
            return
        try:
            cpu = _stat(self.current.proc.pid)
            status = proc_status(self.current.proc.pid)
            self.used[self.section].update(cpu_s=round(cpu[1], 2) if cpu else None, rss_kib=status.get("VmRSS"),
                                           hwm_kib=status.get("VmHWM"))
        except OSError:
            pass
        self.current.stop()
        self.current = None


# -- topics ---------------------------------------------------------------------------------------------------------


def create_topic(bootstrap: str, name: str, partitions: int, config: dict[str, str] | None = None) -> None:
    """Create ``name`` and wait until every partition's leader answers a ListOffsets request.

    A produce to a partition its leader has not opened yet can fail
    NOT_LEADER_OR_FOLLOWER and leave an idempotent producer retrying on
    OUT_OF_ORDER_SEQUENCE_NUMBER (KAFKA-15591): that would time a broker race, not a writer.

    Raises:
        RuntimeError: a partition had no leader answering within 60 s (devtools/topics.py).
    """
    from confluent_kafka.admin import AdminClient, NewTopic

    from devtools.topics import wait_for_leaders

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for _t, fut in admin.create_topics([NewTopic(name, partitions, 1, config=config or {})]).items():
        fut.result(30)
    wait_for_leaders(bootstrap, name, partitions)


def delete_topic(bootstrap: str, name: str, data_dir: str | None = None) -> float | None:
    """Delete a topic (frees the broker's disk) and, given the broker's ``data_dir``, wait until its files are gone.

    Returns the seconds waited for the files (None: not waited, or still there
    after 60 s, which is logged). A failed deletion is logged and ignored (a
    leftover topic only costs the broker memory).
    """
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    try:
        for _t, fut in admin.delete_topics([name], operation_timeout=30).items():
            fut.result(30)
    except Exception as exc:  # noqa: BLE001
        log(f"could not delete topic {name}: {exc}")
        return None
    if not data_dir:
        return None
    waited = wait_files_gone(data_dir, name)
    if waited is None:
        log(f"topic {name}: its files were still in {data_dir} 60 s after the deletion")
    return waited


def wait_files_gone(data_dir: str, topic: str, timeout_s: float = 60.0) -> float | None:
    """Wait until no directory of ``topic`` (live, or renamed ``...-delete``) is left; seconds waited, None: timeout."""
    t0 = time.monotonic()
    prefix = topic + "-"
    while True:
        try:
            left = [d for d in os.listdir(data_dir) if d.startswith(prefix) and d[len(prefix):][:1].isdigit()]
        except OSError:
            return time.monotonic() - t0
        if not left:
            return time.monotonic() - t0
        if time.monotonic() - t0 > timeout_s:
            return None
        time.sleep(0.05)


def count_topic(bootstrap: str, topic: str, expected: int, idle_s: float = 3.0, timeout_s: float = 600.0) -> int:
    """Records in ``topic`` (read_committed), counted by consuming every partition from the beginning.

    Stops once ``expected`` records came (later duplicates are not counted),
    or after ``idle_s`` of quiet with every partition read to its end (15 s
    of quiet otherwise), or after ``timeout_s``.
    """
    from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-count-{time.monotonic_ns()}",
                  "enable.auto.commit": False, "auto.offset.reset": "earliest", "fetch.max.bytes": 52428800,
                  "isolation.level": "read_committed", "enable.partition.eof": True})
    try:
        parts = set(c.list_topics(topic, timeout=10).topics[topic].partitions)
        c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in parts])
        n, at_end = 0, set()
        start = last = time.monotonic()
        while time.monotonic() - start < timeout_s and n < expected:
            msgs = c.consume(10000, 0.5)
            for m in msgs:
                if m.error() is None:
                    n += 1
                    at_end.discard(m.partition())
                    last = time.monotonic()
                elif m.error().code() == KafkaError._PARTITION_EOF:
                    at_end.add(m.partition())
            if time.monotonic() - last >= (idle_s if at_end >= parts else max(idle_s, 15.0)):
                break
        return n
    finally:
        c.close()


# -- processes and CPU ----------------------------------------------------------------------------------------------

_TICK = os.sysconf("SC_CLK_TCK")
#: What a process of the run is: the broker's JVM, Spark's JVM (driver and executors in local mode), or Python
#: (the bench driver, Spark's Python daemon and workers, with their librdkafka threads).
KINDS = ("spark_jvm", "python", "broker")


def proc_status(pid: int | str = "self") -> dict[str, int]:
    """``VmHWM``, ``VmRSS``, ``RssAnon`` ... of a process, in KiB, from /proc/<pid>/status."""
    out: dict[str, int] = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(("Vm", "Rss")):
                k, v = line.split(":", 1)
                out[k] = int(v.split()[0])
    return out


def _stat(pid: int) -> tuple[int, float] | None:
    """(parent pid, user + system seconds with reaped children's) of ``pid``; None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            raw = fh.read()
    except OSError:
        return None
    f = raw[raw.rindex(b")") + 2:].split()  # after "(comm)", which may hold spaces
    return int(f[1]), sum(int(x) for x in f[11:15]) / _TICK


def _kind(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            argv = fh.read().split(b"\0")
    except OSError:
        return "python"
    if os.path.basename(argv[0]) != b"java":
        return "python"
    return "broker" if b"kafka.Kafka" in argv else "spark_jvm"


def tree_cpu_by_kind(root: int | None = None) -> dict[str, float]:
    """CPU seconds of ``root`` (default: this process) and its live descendants, per :data:`KINDS`.

    Children already reaped count for their parent (``cutime``/``cstime``): a
    worker Spark closed counts too. Resolution: one clock tick.
    """
    stats = {int(n): st for n in os.listdir("/proc") if n.isdigit() and (st := _stat(int(n))) is not None}
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in stats.items():
        children.setdefault(ppid, []).append(pid)
    out = dict.fromkeys(KINDS, 0.0)
    todo = [os.getpid() if root is None else root]
    while todo:
        pid = todo.pop()
        if pid in stats:
            out[_kind(pid)] += stats[pid][1]
        todo.extend(children.get(pid, ()))
    return out


def machine_cpu_s() -> dict[str, float]:
    """The whole machine's CPU seconds since boot (``/proc/stat``): ``busy``, ``kernel`` and ``iowait``."""
    with open("/proc/stat") as fh:
        t = [int(x) for x in fh.readline().split()[1:9]]
    user, nice, system, _idle, iowait, irq, softirq, steal = t + [0] * (8 - len(t))
    return {"busy": (user + nice + system + irq + softirq + steal) / _TICK, "iowait": iowait / _TICK,
            "kernel": (system + irq + softirq) / _TICK}


class CpuMeter:
    """CPU seconds of the run's process tree, and of the whole machine, between :meth:`start` and :meth:`stop`.

    The bench process is the root of everything a run uses (Spark's JVM, the
    Python workers, the broker). Work the kernel does for the run outside that
    tree (page-cache writeback, interrupts) is only in the machine's figure,
    as is whatever else ran on the machine then.
    """

    def start(self) -> "CpuMeter":
        self._m0, self._by0 = machine_cpu_s(), tree_cpu_by_kind()
        self.split: dict[str, float] = {}
        self.machine: dict[str, float] = {}
        return self

    def stop(self) -> float:
        """CPU seconds of the tree since :meth:`start`; :attr:`split` per kind, :attr:`machine` the machine's."""
        by1, m1 = tree_cpu_by_kind(), machine_cpu_s()
        self.machine = {k: round(m1[k] - self._m0[k], 3) for k in m1}
        self.split = {k: round(by1[k] - self._by0[k], 3) for k in KINDS}
        return sum(by1.values()) - sum(self._by0.values())


# -- data and statistics --------------------------------------------------------------------------------------------


def arrow_batches(rows: int, value_bytes: int, batch_rows: int = 10_000, start: int = 0) -> Iterator[Any]:
    """Arrow batches of (key, value) binary rows, like the Spark sections' rows (built lazily).

    key = the row number as decimal text; value = that text left-padded with 'v' to ``value_bytes``.
    """
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    for lo in range(start, start + rows, batch_rows):
        ids = pc.cast(pa.array(np.arange(lo, min(lo + batch_rows, start + rows), dtype=np.int64)), pa.string())
        vals = pc.utf8_lpad(ids, value_bytes, "v")
        yield pa.RecordBatch.from_arrays([pc.cast(ids, pa.binary()), pc.cast(vals, pa.binary())], ["key", "value"])


def percentile(xs: list[float], q: float) -> float | None:
    """Nearest-rank percentile (q in 0..100); None when empty."""
    if not xs:
        return None
    s = sorted(xs)
    return float(s[max(0, min(len(s) - 1, math.ceil(q / 100.0 * len(s)) - 1))])


# -- the machine ----------------------------------------------------------------------------------------------------


def _try(fn: Any) -> Any:
    try:
        return fn()
    except Exception:  # noqa: BLE001 - a fact of the page, never a reason to stop
        return None


def _first_line(path: str, prefix: str) -> str | None:
    with open(path) as f:
        return next((line.split(":", 1)[1].strip() for line in f if line.startswith(prefix)), None)


def machine_facts() -> dict[str, Any]:
    """The machine, the versions of what runs, and the load average when the run starts."""
    import confluent_kafka

    from devtools.kafka_broker import kafka_version

    def version(mod: str) -> Any:
        return _try(lambda: __import__(mod).__version__)

    java = _try(lambda: subprocess.run(["java", "-version"], capture_output=True, text=True, timeout=30).stderr
                .splitlines()[0].strip())
    mem = _try(lambda: round(int(str(_first_line("/proc/meminfo", "MemTotal")).split()[0]) / 1024 / 1024, 1))
    return {"hostname": platform.node(), "cores": os.cpu_count(), "cpu": _try(lambda: _first_line(
        "/proc/cpuinfo", "model name")), "mem_gib": mem, "os": platform.platform(),
        "python": platform.python_version(), "java": java, "spark": version("pyspark"), "pyarrow": version("pyarrow"),
        "confluent_kafka": confluent_kafka.version()[0], "librdkafka": confluent_kafka.libversion()[0],
        "lmdb": version("lmdb"),
        "broker": f"Apache Kafka {_try(kafka_version)} (single-node KRaft, devtools/kafka_broker.py)",
        "loadavg_start": list(os.getloadavg())}


def git_commit() -> str | None:
    """The checkout's commit, marked when spark_recoverable_sink/ has uncommitted changes."""
    def run(*args: str) -> str:
        return subprocess.run(["git", "-C", REPO, *args], capture_output=True, text=True, timeout=10).stdout.strip()

    return _try(lambda: run("rev-parse", "HEAD") + (" (spark_recoverable_sink/ modified)"
                                                    if run("status", "--porcelain", "--", "spark_recoverable_sink")
                                                    else ""))
