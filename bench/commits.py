"""Sink sync throughput of several versions of the package, side by side in one run.

What it answers: did a change to the package (a re-layout, a refactor) change
what the sink costs? The main benchmark (``bench/run.py``) measures the
package as it is checked out; this one measures *other* versions of it next
to each other, on the same broker, the same data and the same settings, in
interleaved rounds (round 1 of every version, then round 2 ..., the order
rotated each round), so that a noisy neighbour hurts every version alike.

Usage::

    python bench/commits.py --version pre=19ef936 --version post=c171327 \\
        --version head-python=installed:python --version head-native=installed:native

A version is ``label=<commit>`` (that commit's ``spark_recoverable_sink/``
extracted with ``git archive``, its native extension built with gcc when it
has one, and put first on the ``PYTHONPATH`` of the driver and of Spark's
Python workers) or ``label=installed[:engine]``
(the package this checkout's venv imports, with ``delivery_engine`` set).

Steps of one run:

1. Start a Kafka broker (devtools/kafka_broker.py); extract each commit's package.
2. For each round, for each version (rotated): start a child process with
   its own Spark session (``local[N]``, the main benchmark's settings), its
   working directory outside the checkout, and the version's ``PYTHONPATH``.
3. The child checks that the driver *and* its Python workers import the
   package from where the version says (it refuses to measure otherwise),
   caches the rows, and per value size: a fresh sink and topic, an untimed
   warm-up write (batch 0, a few rows), then the timed ``sink.write`` (batch 1).
   It measures CPU seconds per row of its own process tree (Spark's JVM and
   Python) and of the broker over the timed write, and checks the sink's
   report: every row acked, none pending. In round 0
   it also counts the topic by consuming it.
4. Medians per version and size, and each version's ratio to the first;
   written to ``bench/results/<stamp>-commits.json`` and printed.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def log(msg: str) -> None:
    print(f"[commits {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def _extract(commit: str, into: str) -> str:
    """``commit``'s package sources under ``into``; returns the directory to put on the path."""
    os.makedirs(into, exist_ok=True)
    archive = subprocess.run(["git", "-C", REPO, "archive", commit, "spark_recoverable_sink"],
                             check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", into], input=archive, check=True)
    setup = subprocess.run(["git", "-C", REPO, "show", f"{commit}:setup.py"], capture_output=True, text=True)
    _build_native(os.path.join(into, "spark_recoverable_sink", "native"), setup.stdout if setup.returncode == 0 else "")
    return into


def _build_native(src: str, setup_py: str) -> None:
    """The commit's native extension built in place from the C files its ``setup.py`` names, when it has one.

    Raises:
        subprocess.CalledProcessError: the C sources do not compile.
    """
    import re
    import sysconfig

    names = dict.fromkeys(re.findall(r"rks_\w+\.c", setup_py))  # in setup.py's order, once each
    sources = [os.path.join(src, n) for n in names]
    if not sources:
        return
    subprocess.run(["gcc", "-shared", "-fPIC", "-O2", "-std=c11", "-DPy_LIMITED_API=0x030B0000",
                    f"-I{src}", f"-I{sysconfig.get_paths()['include']}", *sources, "-ldl",
                    "-o", os.path.join(src, "_rks_native.abi3.so")], check=True)


def _child(a: dict[str, Any]) -> dict[str, Any]:
    """Step 3, in the child process (its ``sys.path`` already starts with the version's directory)."""
    import spark_recoverable_sink as rks

    where = os.path.dirname(os.path.dirname(os.path.abspath(rks.__file__)))
    if a["expect_root"] and where != a["expect_root"]:
        raise RuntimeError(f"driver imports the package from {where}, not {a['expect_root']}")
    sys.path.append(REPO)  # bench helpers after the version's package, never before it
    from bench import common
    from bench.cpu import tree_cpu_by_kind, tree_cpu_s
    from bench.spark_bench import build_spark, kafka_columns

    spark = build_spark(a["cores"], a["partitions"], a["driver_memory"], app_name="rks-bench-commits")

    def probe(batches: Any) -> Any:
        import pyarrow as pa
        import spark_recoverable_sink as pkg

        for _ in batches:
            pass
        root = os.path.dirname(os.path.dirname(os.path.abspath(pkg.__file__)))
        yield pa.RecordBatch.from_pylist([{"root": root}])

    roots = {r["root"] for r in spark.range(0, 64, 1, 8).mapInArrow(probe, "root string").collect()}
    if roots != {where}:
        raise RuntimeError(f"Python workers import the package from {sorted(roots)}, the driver from {where}")
    out: dict[str, Any] = {"label": a["label"], "root": where, "runs": []}
    for size, rows in a["rows_by_size"].items():
        size = int(size)
        df = kafka_columns(spark.range(0, rows, 1, a["partitions"]), "id", size).cache()
        assert df.count() == rows
        name = f"bench-commits-{a['label']}-{size}-{a['round']}-{os.getpid()}"
        common.create_topic(a["bootstrap"], name, a["topic_partitions"])
        kw: dict[str, Any] = {"name": name, "kafka_conf": common.producer_conf(a["bootstrap"]), "topic": name,
                              "wal_dir": os.path.join(a["scratch"], "wal"), "ack_timeout_s": 900.0}
        if a["engine"]:
            kw["delivery_engine"] = a["engine"]
        sink = rks.RecoverableKafkaSink(**kw)
        warm = 10 * a["partitions"]
        sink.write(kafka_columns(spark.range(0, warm, 1, a["partitions"]), "id", size), batch_id=0)
        cpu0, broker0 = tree_cpu_by_kind(), tree_cpu_s(a["broker_pid"])
        t0 = time.monotonic()
        r = sink.write(df, batch_id=1)
        seconds = time.monotonic() - t0
        cpu1, broker1 = tree_cpu_by_kind(), tree_cpu_s(a["broker_pid"])
        cpu = {k: (cpu1[k] - cpu0[k]) * 1e6 / rows for k in ("spark_jvm", "python")}
        cpu["broker"] = (broker1 - broker0) * 1e6 / rows
        if r.rows != rows or r.acked != rows or r.pending:
            raise RuntimeError(f"{a['label']} {size} B: report rows={r.rows} acked={r.acked} pending={r.pending}")
        run = {"value_bytes": size, "rows": rows, "seconds": seconds, "rows_per_s": rows / seconds,
               "round": a["round"], "cpu_us_per_row": sum(cpu.values()), "cpu_us_per_row_by_kind": cpu}
        if a["round"] == 0:
            run["read_back"] = common.count_topic(a["bootstrap"], name, rows + warm) - warm
            if run["read_back"] < rows:
                raise RuntimeError(f"{a['label']} {size} B: read back {run['read_back']} of {rows}")
        common.delete_topic(a["bootstrap"], name)
        df.unpersist()
        out["runs"].append(run)
        log(f"{a['label']:14s} {size:5d} B round {a['round']}: {seconds:.2f}s = {rows / seconds:,.0f} rows/s, "
            f"CPU {run['cpu_us_per_row']:.2f} us/row ({', '.join(f'{k} {v:.2f}' for k, v in cpu.items())})")
    spark.stop()
    return out


def _summary(runs: list[dict[str, Any]], labels: list[str]) -> list[dict[str, Any]]:
    rows = []
    for size in sorted({r["value_bytes"] for r in runs}):
        base = None
        for label in labels:
            mine = [r for r in runs if r["label"] == label and r["value_bytes"] == size]
            xs = [r["rows_per_s"] for r in mine]
            med = statistics.median(xs)
            cpu = statistics.median(r["cpu_us_per_row"] for r in mine)
            base = base or (med, cpu)
            rows.append({"label": label, "value_bytes": size, "rounds": len(xs), "median_rows_per_s": med,
                         "min": min(xs), "max": max(xs), "ratio_to_first": med / base[0],
                         "median_cpu_us_per_row": cpu, "cpu_ratio_to_first": cpu / base[1],
                         "median_cpu_us_per_row_by_kind": {
                             k: statistics.median(r["cpu_us_per_row_by_kind"][k] for r in mine)
                             for k in ("spark_jvm", "python", "broker")}})
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--version", action="append", default=[], help="label=<commit> or label=installed[:engine]")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--rows", default="100:5000000,1024:1000000", help="value bytes:rows, comma-separated")
    ap.add_argument("--cores", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--partitions", type=int, default=None)
    ap.add_argument("--topic-partitions", type=int, default=4)
    ap.add_argument("--driver-memory", default="6g")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        a = json.loads(args.child)
        print(json.dumps(_child(a)))
        return 0
    if not args.version:
        ap.error("at least one --version is needed")

    # Step 1
    sys.path.insert(0, REPO)
    from bench.common import git_commit, machine_facts
    from devtools.kafka_broker import KafkaBroker

    scratch = tempfile.mkdtemp(prefix="rks-bench-commits-")
    versions: list[tuple[str, str | None, str | None]] = []  # (label, root on the path or None, engine)
    for spec in args.version:
        label, _, what = spec.partition("=")
        if what.startswith("installed"):
            versions.append((label, None, what.partition(":")[2] or None))
        else:
            versions.append((label, _extract(what, os.path.join(scratch, "src", label)), None))
    rows_by_size = {int(s): int(n) for s, n in (p.split(":") for p in args.rows.split(","))}
    broker = KafkaBroker(os.path.join(scratch, "kafka"), heap="1g", jvm_options=()).start()
    started = time.strftime("%Y%m%dT%H%M%S")
    runs: list[dict[str, Any]] = []
    roots: dict[str, str] = {}
    try:
        # Step 2
        for rnd in range(args.rounds):
            order = versions[rnd % len(versions):] + versions[:rnd % len(versions)]
            for label, root, engine in order:
                env = dict(os.environ)
                env.pop("PYTHONPATH", None)
                env["PYSPARK_PYTHON"] = env["PYSPARK_DRIVER_PYTHON"] = sys.executable  # workers: this venv
                if root:
                    env["PYTHONPATH"] = root
                a = {"label": label, "round": rnd, "engine": engine, "expect_root": root, "rows_by_size": rows_by_size,
                     "cores": args.cores, "partitions": args.partitions or args.cores, "scratch": scratch,
                     "topic_partitions": args.topic_partitions, "driver_memory": args.driver_memory,
                     "bootstrap": broker.bootstrap, "broker_pid": broker.proc.pid}
                p = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", json.dumps(a)],
                                   cwd=scratch, env=env, stdout=subprocess.PIPE, check=True, text=True)
                got = json.loads(p.stdout.strip().splitlines()[-1])
                roots[label] = got["root"]
                runs += [{"label": label, **r} for r in got["runs"]]
    finally:
        broker.stop()
    # Step 4
    labels = [v[0] for v in versions]
    out = {"started": started, "checkout": git_commit(), "machine": machine_facts(), "versions": args.version,
           "roots": roots, "rows_by_size": rows_by_size, "rounds": args.rounds,
           "partitions": args.partitions or args.cores, "runs": runs, "summary": _summary(runs, labels)}
    path = os.path.join(REPO, "bench", "results", f"{started}-commits.json")
    with open(path, "w") as f:
        json.dump(out, f, indent=1)
    for s in out["summary"]:
        log(f"{s['label']:14s} {s['value_bytes']:5d} B: median {s['median_rows_per_s']:,.0f} rows/s "
            f"({s['min']:,.0f}-{s['max']:,.0f}, {s['rounds']} rounds), {s['ratio_to_first']:.3f} x {labels[0]}; "
            f"CPU {s['median_cpu_us_per_row']:.2f} us/row, {s['cpu_ratio_to_first']:.3f} x {labels[0]}")
    log(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
