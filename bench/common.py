"""Shared pieces of the benchmarks: producer settings, topics, counting, WAL polling, machine facts.

Every writer measured here (raw, flush-writer, the sink) uses the *same*
producer configuration: librdkafka's defaults plus the sink's safe defaults
``enable.idempotence=true`` and ``acks=all`` (:func:`producer_conf`).
"""

from __future__ import annotations

import math
import os
import platform
import statistics
import subprocess
import sys
import threading
import time
from typing import Any, Iterator

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if REPO not in sys.path:
    sys.path.insert(0, REPO)

#: The sink's safe producer defaults, applied to every writer so the comparison is fair.
# the sink's defaults: safe delivery, and the Java client's partitioner (what Spark's own Kafka sink uses)
SAFE_PRODUCER_CONF = {"enable.idempotence": "true", "acks": "all", "partitioner": "murmur2_random"}


def producer_conf(bootstrap: str) -> dict[str, str]:
    """The producer configuration of every writer: librdkafka defaults + the sink's safe defaults."""
    return {"bootstrap.servers": bootstrap, **SAFE_PRODUCER_CONF}


def check_same_producer_conf(bootstrap: str) -> dict[str, str]:
    """The configuration the sink hands to confluent-kafka; raises if it differs from :func:`producer_conf`."""
    from spark_recoverable_sink.config import SinkConfig

    eff = SinkConfig.build("conf-check", producer_conf(bootstrap), "/tmp/unused").producer_conf()
    if eff != producer_conf(bootstrap):
        raise RuntimeError(f"the sink's effective producer conf {eff} differs from the writers' {producer_conf(bootstrap)}")
    return eff


# -- topics ---------------------------------------------------------------------------


def create_topic(bootstrap: str, name: str, partitions: int, config: dict[str, str] | None = None) -> None:
    """Create ``name`` and wait until every partition's leader answers a ListOffsets request.

    A produce to a partition its leader has not opened yet can fail
    NOT_LEADER_OR_FOLLOWER and leave an idempotent producer retrying on
    OUT_OF_ORDER_SEQUENCE_NUMBER (KAFKA-15591): that would time a broker race,
    not a writer.
    """
    from confluent_kafka.admin import AdminClient, NewTopic

    from devtools.topics import wait_for_leaders

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for _t, fut in admin.create_topics([NewTopic(name, partitions, 1, config=config or {})]).items():
        fut.result(30)
    wait_for_leaders(bootstrap, name, partitions)


def delete_topic(bootstrap: str, name: str) -> float | None:
    """Delete a topic (frees the broker's disk) and, on a bench broker, wait until its files are gone.

    A bench broker (bench/broker_watch.py, named by its ``DATA_ENV``) removes
    a deleted topic's files within a fraction of a second; waiting for that
    here keeps the removal out of the next timed window. Returns the seconds
    waited for the files (None: not waited, or still there after 60 s, which
    is logged). Errors of the deletion are logged and ignored.
    """
    from confluent_kafka.admin import AdminClient

    from bench.broker_watch import DATA_ENV, wait_files_gone

    admin = AdminClient({"bootstrap.servers": bootstrap})
    try:
        for _t, fut in admin.delete_topics([name], operation_timeout=30).items():
            fut.result(30)
    except Exception as exc:  # noqa: BLE001 - best effort: a leftover topic only costs broker memory
        print(f"[bench] could not delete topic {name}: {exc}", file=sys.stderr)
        return None
    data_dir = os.environ.get(DATA_ENV)
    if not data_dir:
        return None
    waited = wait_files_gone(data_dir, name)
    if waited is None:
        print(f"[bench] topic {name}: its files were still in {data_dir} 60 s after the deletion", file=sys.stderr)
    return waited


def count_topic(bootstrap: str, topic: str, expected: int, idle_s: float = 3.0, timeout_s: float = 600.0,
                isolation: str = "read_committed") -> int:
    """Number of records in ``topic``, counted by consuming every partition from the beginning.

    Counted by consuming (a read_committed count must skip transaction
    markers and aborted records, which offsets include). Stops as soon as
    ``expected`` records came (later duplicates are not counted), once every
    partition was read to its end with nothing new for ``idle_s``, or after
    ``idle_s`` (at least 15 s when fewer came) of quiet.
    """
    from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

    c = Consumer({
        "bootstrap.servers": bootstrap, "group.id": f"bench-count-{time.monotonic_ns()}",
        "enable.auto.commit": False, "auto.offset.reset": "earliest", "fetch.max.bytes": 52428800,
        "isolation.level": isolation, "enable.partition.eof": True,
    })
    try:
        md = c.list_topics(topic, timeout=10)
        parts = {(topic, p) for p in md.topics[topic].partitions}
        c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for _t, p in parts])
        n = 0
        at_end: set[tuple[str, int]] = set()
        start = last = time.monotonic()
        while time.monotonic() - start < timeout_s:
            msgs = c.consume(10000, 0.5)
            for m in msgs:
                err = m.error()
                if err is None:
                    n += 1
                    at_end.discard((m.topic(), m.partition()))
                elif err.code() == KafkaError._PARTITION_EOF:
                    at_end.add((m.topic(), m.partition()))
            now = time.monotonic()
            if any(m.error() is None for m in msgs):
                last = now
            quiet = now - last
            if n >= expected:
                break  # only "at least the expected count arrived" is claimed
            if quiet >= (idle_s if at_end >= parts else max(idle_s, 15.0)):
                break
        return n
    finally:
        c.close()


# -- the WAL seen from outside ----------------------------------------------------------


def wal_records(wal_dir: str, sink_name: str) -> int:
    """Records still in a sink's WAL slots (unacked, or acked but not yet pruned).

    Opens each slot read-only (LMDB allows readers in other processes) and
    reads the record count from each chunk's header.
    """
    import lmdb

    from spark_recoverable_sink.wal.format import chunk_rows

    sdir = os.path.join(wal_dir, sink_name)
    if not os.path.isdir(sdir):
        return 0
    total = 0
    for name in sorted(os.listdir(sdir)):
        path = os.path.join(sdir, name)
        if not (name.startswith("slot-") and os.path.isdir(path) and os.path.exists(os.path.join(path, "data.mdb"))):
            continue
        env = lmdb.open(path, readonly=True, lock=True, max_dbs=4, subdir=True, create=False, readahead=False)
        try:
            try:
                db = env.open_db(b"chunks", create=False)
            except lmdb.NotFoundError:
                continue
            with env.begin(db=db, buffers=True) as txn:
                for _k, v in txn.cursor():
                    total += chunk_rows(v)
        finally:
            env.close()
    return total


def wait_wal_empty(wal_dir: str, sink_name: str, timeout_s: float, interval_s: float = 0.02) -> float | None:
    """Poll until the sink's WAL holds no record; returns the monotonic time it was seen empty (None: timeout)."""
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if wal_records(wal_dir, sink_name) == 0:
            return time.monotonic()
        time.sleep(interval_s)
    return None


# -- processes ------------------------------------------------------------------------------


def proc_status(pid: int | str = "self") -> dict[str, int]:
    """``VmHWM``, ``VmRSS`` ... of a process, in KiB, from /proc/<pid>/status."""
    out: dict[str, int] = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(("Vm", "Rss")):
                k, v = line.split(":", 1)
                out[k] = int(v.split()[0])
    return out


class PeakSampler:
    """Peak ``RssAnon`` (KiB) of this process, sampled every ``every_s`` by a thread (the kernel keeps no peak of it)."""

    def __init__(self, every_s: float = 0.05) -> None:
        self.peak_anon_kib = proc_status().get("RssAnon", 0)
        self._every = every_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rss-sampler", daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(self._every):
            self.peak_anon_kib = max(self.peak_anon_kib, proc_status().get("RssAnon", 0))

    def __enter__(self) -> "PeakSampler":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak_anon_kib = max(self.peak_anon_kib, proc_status().get("RssAnon", 0))


# -- statistics ------------------------------------------------------------------------------


def median(xs: list[float]) -> float | None:
    return statistics.median(xs) if xs else None


def percentile(xs: list[float], q: float) -> float | None:
    """Nearest-rank percentile (q in 0..100)."""
    if not xs:
        return None
    s = sorted(xs)
    k = max(0, min(len(s) - 1, math.ceil(q / 100.0 * len(s)) - 1))
    return float(s[k])


# -- data ----------------------------------------------------------------------------------------


def arrow_batches(rows: int, value_bytes: int, batch_rows: int = 10_000, start: int = 0) -> Iterator[Any]:
    """Lazily built Arrow batches of (key, value) binary rows, like the Spark benchmarks' data.

    key = the row number as decimal text; value = that text left-padded with 'v' to ``value_bytes``.
    """
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    for lo in range(start, start + rows, batch_rows):
        n = min(batch_rows, start + rows - lo)
        ids = pc.cast(pa.array(np.arange(lo, lo + n, dtype=np.int64)), pa.string())
        vals = pc.utf8_lpad(ids, value_bytes, "v")
        yield pa.RecordBatch.from_arrays([pc.cast(ids, pa.binary()), pc.cast(vals, pa.binary())], ["key", "value"])


# -- machine facts -----------------------------------------------------------------------------


def _version(mod: str) -> str | None:
    try:
        m = __import__(mod)
        return getattr(m, "__version__", None)
    except Exception:  # noqa: BLE001
        return None


def broker_version() -> str | None:
    try:
        from devtools.kafka_broker import kafka_version

        return f"Apache Kafka {kafka_version()} (single-node KRaft, devtools/kafka_broker.py)"
    except Exception as exc:  # noqa: BLE001
        return f"unknown ({exc})"


def java_version() -> str | None:
    try:
        r = subprocess.run(["java", "-version"], capture_output=True, text=True, timeout=30)
        return (r.stderr or r.stdout).splitlines()[0].strip()
    except Exception:  # noqa: BLE001
        return None


def cpu_model() -> str | None:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


def mem_total_gib() -> float | None:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal"):
                    return round(int(line.split()[1]) / 1024 / 1024, 1)
    except OSError:
        pass
    return None


def machine_facts() -> dict[str, Any]:
    import confluent_kafka

    return {
        "hostname": platform.node(),
        "cores": os.cpu_count(),
        "cpu": cpu_model(),
        "mem_gib": mem_total_gib(),
        "os": platform.platform(),
        "python": platform.python_version(),
        "java": java_version(),
        "spark": _version("pyspark"),
        "pyarrow": _version("pyarrow"),
        "confluent_kafka": getattr(confluent_kafka, "__version__", None) or str(confluent_kafka.version()),
        "librdkafka": confluent_kafka.libversion()[0],
        "lmdb": _version("lmdb"),
        "broker": broker_version(),
        "loadavg_start": list(os.getloadavg()),
    }


def git_commit() -> str | None:
    try:
        r = subprocess.run(["git", "-C", REPO, "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10)
        dirty = subprocess.run(["git", "-C", REPO, "status", "--porcelain", "--", "spark_recoverable_sink"],
                               capture_output=True, text=True, timeout=10).stdout.strip()
        return r.stdout.strip() + (" (spark_recoverable_sink/ modified)" if dirty else "")
    except Exception:  # noqa: BLE001
        return None
