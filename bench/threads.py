"""Where a writer's CPU goes, thread by thread, and what Spark's JVM runs: a profile of both sinks.

The throughput section (bench/run.py) gives each writer's CPU per process kind (Spark's
JVM, the Python workers, the broker). This splits it further, for Spark's own Kafka sink
and this sink side by side, on the same cached rows and the same broker:

* **per thread**, from ``/proc/<pid>/task/<tid>/stat`` of every process of the tree,
  grouped by thread name (digits dropped): Spark's task threads, the Java producer's
  network thread, the JVM's GC and JIT threads, the Python workers' main threads,
  librdkafka's ``rdk:`` threads, the broker's request handlers and network threads;
* **by method**, in Spark's JVM: a Java Flight Recorder recording (``jcmd JFR.start``
  around one extra untimed write per writer, 1 ms sampling), its samples of running
  Java code counted by the first frame, from the leaf up, that belongs to a known
  component (the Kafka client, Spark's Kafka writer, Arrow and the Python runner,
  the shuffle, generated code and rows); samples of JDK code alone count as ``jdk``.

Steps (one broker of its own, started as the benchmark's are: bench/run_brokers.py):

1. Every writer writes ``--rows // 4`` rows, untimed (warm-up of the JVM, the workers, the broker).
2. ``--rows`` rows of ``--size`` B cached in ``local[2]``, 2 Spark partitions, topics of 4.
3. ``--rounds`` rounds, the writers interleaved and rotated (bench/spark_throughput.py's
   order); each write's per-thread CPU is the difference of two snapshots. A thread that
   ended within the write is not in the second snapshot: the process's own total (which
   keeps it) is reported beside the threads' sum.
4. With ``--jfr``: one more write per writer, recorded (not timed).

Usage::

    python bench/threads.py --rows 2000000 --rounds 5 --jfr --json /tmp/threads.json
    python bench/run.py --only threads --merge-into bench/results/latest.json   # section 10 of docs/PERFORMANCE.md

Per record figures are medians over the rounds, with the lowest and highest.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from typing import Any

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
os.environ["PYSPARK_PYTHON"] = os.environ.get("PYSPARK_PYTHON") or sys.executable  # the workers: this venv
os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (REPO, os.environ.get("PYTHONPATH")) if p)  # and bench/

from bench import common  # noqa: E402
from bench.cpu import tree_cpu_s, tree_threads  # noqa: E402
from bench.render_threads import threads_md  # noqa: E402
from bench.spark_bench import RAW, SPARK_KAFKA, SYNC, build_spark, kafka_columns, log  # noqa: E402
from bench.spark_target import make_target  # noqa: E402
from bench.spark_throughput import rotated  # noqa: E402

JFR_BOUND_S = 120.0  # one jcmd or jfr call
WRITERS = (SPARK_KAFKA, SYNC, RAW)  # Spark's sink, this one, and the raw confluent-kafka loop beside them
#: Java components by class-name prefix, looked for from a sample's leaf frame upwards; the first match names it.
COMPONENTS = (
    ("kafka client", ("org.apache.kafka.",)),
    ("spark kafka writer", ("org.apache.spark.sql.kafka010.",)),
    ("arrow and python runner", ("org.apache.arrow.", "org.apache.spark.sql.execution.arrow.",
                                 "org.apache.spark.sql.execution.python.", "org.apache.spark.api.python.")),
    ("shuffle and storage", ("org.apache.spark.shuffle.", "org.apache.spark.storage.",
                             "org.apache.spark.util.collection.", "org.apache.spark.io.",
                             "org.apache.spark.serializer.", "net.jpountz.", "com.github.luben.")),
    ("rows and generated code", ("org.apache.spark.sql.catalyst.", "org.apache.spark.unsafe.",
                                 "org.apache.spark.sql.execution.", "org.apache.spark.sql.columnar.")),
    ("spark other", ("org.apache.spark.", "scala.")),
)


def thread_group(comm: str) -> str:
    """A thread's name with its numbers dropped (``GC Thread#0`` -> ``GC Thread#``): threads of one pool together."""
    return re.sub(r"\d+", "", comm).strip() or "?"


def snapshot(root: int) -> dict[tuple[int, int], tuple[str, str, float]]:
    """(pid, tid) -> (process kind, thread group, CPU seconds) for every thread of ``root``'s process tree."""
    return {key: (kind, thread_group(comm), cpu) for key, (kind, comm, cpu) in tree_threads(root).items()}


def thread_cpu(before: dict[tuple[int, int], tuple[str, str, float]],
               after: dict[tuple[int, int], tuple[str, str, float]]) -> dict[str, float]:
    """CPU seconds between the snapshots per ``kind/thread group`` (a thread new since ``before`` from zero)."""
    out: dict[str, float] = collections.defaultdict(float)
    for key, (kind, group, cpu) in after.items():
        d = cpu - before.get(key, (kind, group, 0.0))[2]
        if d > 0:
            out[f"{kind}/{group}"] += d
    return dict(out)


def classify(frames: list[str]) -> str:
    """The component of a sample whose frames (class.method, leaf first) are ``frames`` (:data:`COMPONENTS`)."""
    for frame in frames:
        for name, prefixes in COMPONENTS:
            if frame.startswith(prefixes):
                return name
    return "jdk"


def jfr_components(jfr_json: dict[str, Any]) -> dict[str, dict[str, int]]:
    """Samples of running Java code (``jdk.ExecutionSample``) per thread group and :func:`classify` component."""
    out: dict[str, dict[str, int]] = collections.defaultdict(lambda: collections.defaultdict(int))
    for ev in jfr_json.get("recording", {}).get("events", []):
        if ev.get("type") != "jdk.ExecutionSample":
            continue
        v = ev.get("values", {})
        thread = (v.get("sampledThread") or {}).get("javaName") or "?"
        frames = [_frame(fr.get("method") or {}) for fr in (v.get("stackTrace") or {}).get("frames", [])]
        out[thread_group(thread)][classify(frames)] += 1
    return {k: dict(v) for k, v in out.items()}


def _frame(method: dict[str, Any]) -> str:
    """``class.method`` of a JFR JSON frame's method (its class named with slashes there)."""
    return f"{(method.get('type') or {}).get('name', '').replace('/', '.')}.{method.get('name', '')}"


def _jcmd(pid: int, *args: str) -> None:
    subprocess.run(["jcmd", str(pid), *args], check=True, capture_output=True, timeout=JFR_BOUND_S)


def _jfc(scratch: str) -> str:
    """JFR's ``profile`` settings (of the JDK that runs ``java``) with Java samples every 1 ms instead of 10."""
    java_home = os.path.dirname(os.path.dirname(os.path.realpath(shutil.which("java") or "java")))
    with open(os.path.join(java_home, "lib", "jfr", "profile.jfc")) as f:
        text = f.read()
    text, n = re.subn(r'(control="method-sampling-java-interval">)[^<]*<', r"\g<1>1 ms<", text)
    if n != 1:
        raise RuntimeError("profile.jfc: the Java sampling interval was not found")
    path = os.path.join(scratch, "samples.jfc")
    with open(path, "w") as f:
        f.write(text)
    return path


def _target(spark: Any, writer: str, bootstrap: str, scratch: str, size: int, tag: str, partitions: int,
            topic_partitions: int) -> Any:
    """``writer`` bound to a new topic, warmed up (bench/spark_target.py)."""
    topic = f"bench-threads-{writer}-{tag}-{uuid.uuid4().hex[:6]}"
    common.create_topic(bootstrap, topic, topic_partitions)
    tg = make_target(writer, bootstrap, topic, os.path.join(scratch, "wal"), topic)
    tg.warm_up(spark, partitions, size)
    return tg, topic


def measure(spark: Any, bootstrap: str, writers: list[str], rows: int, size: int, rounds: int, scratch: str,
            jfr: bool, partitions: int = 2, topic_partitions: int = 4) -> dict[str, Any]:
    """Steps 1-4 of the module doc: per writer, its rounds' per-thread CPU and its JVM's JFR components.

    Runs in the process of ``spark`` (local mode: its JVM runs the tasks); ``bootstrap``'s broker is a
    child of this process (bench/run_brokers.py), so that its threads are in the tree measured.
    """
    jvm = int(spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid())
    root = os.getpid()

    def cached(n: int) -> Any:
        df = kafka_columns(spark.range(0, n, 1, partitions), "id", size).cache()
        assert df.count() == n
        return df

    warm = cached(max(10_000, rows // 4))  # Step 1
    for writer in writers:
        tg, topic = _target(spark, writer, bootstrap, scratch, size, "w", partitions, topic_partitions)
        tg.write(warm, batch_id=1)
        common.delete_topic(bootstrap, topic)
    warm.unpersist()
    df = cached(rows)  # Step 2
    runs: list[dict[str, Any]] = []
    for rnd in range(rounds):  # Step 3
        for writer in rotated(tuple(writers), rnd, rounds):
            tg, topic = _target(spark, writer, bootstrap, scratch, size, str(rnd), partitions, topic_partitions)
            s0, p0 = snapshot(root), tree_cpu_s(root)
            t0 = time.monotonic()
            tg.write(df, batch_id=1)
            wall = time.monotonic() - t0
            s1, p1 = snapshot(root), tree_cpu_s(root)
            common.delete_topic(bootstrap, topic)
            runs.append({"writer": writer, "round": rnd, "seconds": wall, "threads": thread_cpu(s0, s1),
                         "process_total": p1 - p0})
            log(f"threads: {writer} round {rnd}: {rows / wall:,.0f} rows/s")
    profiles: dict[str, Any] = {}
    if jfr:  # Step 4
        jfc = _jfc(scratch)
        for writer in writers:
            tg, topic = _target(spark, writer, bootstrap, scratch, size, "jfr", partitions, topic_partitions)
            path = os.path.join(scratch, f"{writer}.jfr")
            _jcmd(jvm, "JFR.start", f"name=rks-{writer}", f"settings={jfc}")
            tg.write(df, batch_id=1)
            _jcmd(jvm, "JFR.stop", f"name=rks-{writer}", f"filename={path}")
            common.delete_topic(bootstrap, topic)
            js = subprocess.run(["jfr", "print", "--json", "--events", "jdk.ExecutionSample", path], check=True,
                                capture_output=True, text=True, timeout=JFR_BOUND_S).stdout
            profiles[writer] = jfr_components(json.loads(js))
    df.unpersist()
    return {"rows": rows, "value_bytes": size, "rounds": rounds, "writers": writers, "partitions": partitions,
            "topic_partitions": topic_partitions, "runs": runs,
            "jfr": profiles, "summary": summarize(runs, writers, rows)}


def summarize(runs: list[dict[str, Any]], writers: list[str], rows: int) -> dict[str, Any]:
    """Per writer: µs per record per ``kind/thread group`` (median, low, high over the rounds), and rows/s."""
    out: dict[str, Any] = {}
    for w in writers:
        mine = [r for r in runs if r["writer"] == w]
        groups = sorted({g for r in mine for g in r["threads"]})
        per = {g: [r["threads"].get(g, 0.0) / rows * 1e6 for r in mine] for g in groups}
        total = [r["process_total"] / rows * 1e6 for r in mine]
        out[w] = {"rows_per_s": [rows / r["seconds"] for r in mine],
                  "us_per_record": {g: _stats(v) for g, v in per.items()},
                  "threads_sum": _stats([sum(r["threads"].values()) / rows * 1e6 for r in mine]),
                  "process_total": _stats(total)}
    return out


def _stats(xs: list[float]) -> dict[str, float]:
    return {"median": common.median(xs) or 0.0, "low": min(xs), "high": max(xs)}


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--writers", default=",".join(WRITERS))
    ap.add_argument("--rows", type=int, default=2_000_000)
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--jfr", action="store_true", help="also record one write per writer with JFR")
    ap.add_argument("--json", help="write the result here")
    a = ap.parse_args()
    from bench.run_brokers import Brokers

    scratch = tempfile.mkdtemp(prefix="rks-threads-")
    brokers = Brokers(scratch)
    broker = brokers.fresh("threads")
    spark = build_spark(2, 2, "6g")
    try:
        result = measure(spark, broker.bootstrap, a.writers.split(","), a.rows, a.size, a.rounds, scratch, a.jfr)
        result["commit"] = common.git_commit()
    finally:
        spark.stop()
        brokers.stop()
    if a.json:
        with open(a.json, "w") as f:
            json.dump(result, f, indent=1)
    print(threads_md(result))


if __name__ == "__main__":
    main()
