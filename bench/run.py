"""The benchmark's one runner: one process tree, one Spark session, a fresh broker per section, one results file.

Usage::

    python bench/run.py --quick                    # small sizes, 1-3 rounds: a smoke test, not a measurement
    python bench/run.py                            # the measured run (about an hour; a quiet machine)
    python bench/run.py --only throughput,kafka-source --out-dir /tmp/b --no-render

Sections (``--only`` picks some, comma-separated):

``throughput``   batch write of cached rows (100 B and 1 KiB values): Spark's Kafka sink, sink sync and
                 exactly-once (native engine), and the flush-writer (a Python produce loop without the WAL);
                 an untimed warm-up round, then 5 interleaved rounds, order rotated (bench/spark.py)
``kafka-source`` a Kafka → Kafka copy through Spark's Kafka source, micro-batch p50 / p95 at 4 and 200
                 Spark partitions: Spark's sink, sink sync, exactly-once (bench/kafka_source.py)
``realtime``     the same copy in Spark's real-time mode: end-to-end latency (bench/kafka_source.py)
``memory``       peak memory of one partition of 1M and 100M rows written through the sink (bench/memory.py)

Results go to ``<out-dir>/<timestamp>.json`` (default bench/results/: commit it in place of the run before);
then bench/render.py writes docs/PERFORMANCE.md and docs/performance.png from it (``--no-render``: not).
Exits 1 when a section failed (its error is in the file).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
import traceback
import uuid
from typing import Any, Callable

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
# Spark's Python workers must use this interpreter and find bench.writers.
os.environ["PYSPARK_PYTHON"] = os.environ.get("PYSPARK_PYTHON") or sys.executable
os.environ["PYSPARK_DRIVER_PYTHON"] = os.environ.get("PYSPARK_DRIVER_PYTHON") or sys.executable
os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (REPO, os.environ.get("PYTHONPATH")) if p)

from bench import common  # noqa: E402
from bench.common import log  # noqa: E402

SECTIONS = ("throughput", "kafka-source", "realtime", "memory")
MODES: dict[str, dict[str, Any]] = {
    "quick": {"tp_rows": {"100": 100_000, "1024": 100_000}, "tp_rounds": 3, "tp_warm_rows": 20_000,
              "sizes": [100, 1024], "mem_rows": [200_000, 1_000_000],
              "ks_rows_per_trigger": 5_000, "ks_in_partitions": 8, "ks_partitions": [4], "ks_batches": 3,
              "ks_warmup_batches": 1, "ks_rounds": 1,
              "rt_rows_per_s": 1_000, "rt_warmup_s": 6, "rt_measure_s": 6, "rt_rounds": 1},
    # throughput: 4 writers x 2 sizes x (a warm-up round + 5 rounds); kafka-source: 3 writers x 2 widths x 5 rounds
    # of 3 + 10 batches (about 20 min); realtime: 3 writers x 5 rounds of 10 s warm-up + 20 s measured
    "full": {"tp_rows": {"100": 2_000_000, "1024": 1_000_000}, "tp_rounds": 5, "tp_warm_rows": 500_000,
             "sizes": [100, 1024], "mem_rows": [1_000_000, 100_000_000],
             "ks_rows_per_trigger": 50_000, "ks_in_partitions": 8, "ks_partitions": [4, 200], "ks_batches": 10,
             "ks_warmup_batches": 3, "ks_rounds": 5,
             "rt_rows_per_s": 1_000, "rt_warmup_s": 10, "rt_measure_s": 20, "rt_rounds": 5},
}


def guarded(fn: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """Run a section; a failure is recorded in the results (and fails the run), never hidden."""
    try:
        return fn()
    except Exception as exc:  # noqa: BLE001
        traceback.print_exc()
        return {"error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()}


def spark_sections(results: dict[str, Any], p: dict[str, Any], brokers: common.Brokers, scratch: str,
                   want: set[str], args: argparse.Namespace) -> None:
    """The sections that run in this process's SparkSession, each on a fresh broker."""
    from bench import kafka_source as ks
    from bench import spark as sb

    spark = sb.build_spark(args.cores, args.cores, args.driver_memory)
    results["settings"]["spark"] = sb.spark_settings(spark)
    try:
        if "throughput" in want:
            broker = brokers.fresh("throughput")
            results["throughput"] = guarded(lambda: sb.throughput(
                spark, broker.bootstrap, broker.data_dir, rows_by_size={s: p["tp_rows"][str(s)] for s in p["sizes"]},
                partitions=args.cores, topic_partitions=args.topic_partitions, rounds=p["tp_rounds"],
                warm_rows=p["tp_warm_rows"], scratch=scratch))
        if "kafka-source" in want:
            bootstrap = brokers.fresh("kafka-source").bootstrap
            results["kafka_source"] = guarded(lambda: ks.kafka_source_latency(
                spark, bootstrap, rows_per_trigger=p["ks_rows_per_trigger"], in_partitions=p["ks_in_partitions"],
                partitions=p["ks_partitions"], value_bytes=100, batches=p["ks_batches"],
                warmup_batches=p["ks_warmup_batches"], rounds=p["ks_rounds"], topic_partitions=args.topic_partitions,
                scratch=scratch))
        if "realtime" in want:
            bootstrap = brokers.fresh("realtime").bootstrap
            results["realtime"] = guarded(lambda: ks.realtime_latency(
                spark, bootstrap, rows_per_s=p["rt_rows_per_s"], partitions=min(2, args.cores), value_bytes=100,
                warmup_s=p["rt_warmup_s"], measure_s=p["rt_measure_s"], rounds=p["rt_rounds"], scratch=scratch))
    finally:
        spark.stop()


def memory_section(p: dict[str, Any], bootstrap: str, scratch: str, topic_partitions: int) -> dict[str, Any]:
    """One child process per size (bench/memory.py); the growth of its peaks from the smallest to the largest.

    Raises:
        RuntimeError: a child exited without a result.
    """
    runs = []
    for rows in p["mem_rows"]:
        topic = f"bench-mem-{rows}-{uuid.uuid4().hex[:6]}"
        # 100 M rows are ~15 GB in Kafka: old segments go while the run writes (nothing reads them back)
        common.create_topic(bootstrap, topic, topic_partitions, {"retention.bytes": str(1 << 30)})
        try:
            arg = json.dumps({"bootstrap": bootstrap, "topic": topic, "rows": rows,
                              "wal_dir": os.path.join(scratch, "wal")})
            out = subprocess.run([sys.executable, os.path.join(REPO, "bench", "memory.py"), arg], cwd=REPO,
                                 capture_output=True, text=True, timeout=3600)
        finally:
            common.delete_topic(bootstrap, topic)
        line = next((ln for ln in out.stdout.splitlines() if ln.startswith("RESULT ")), None)
        if line is None:
            raise RuntimeError(f"bench/memory.py exited {out.returncode} without a result: {out.stderr[-2000:]}")
        runs.append(json.loads(line[len("RESULT "):]))
        log(f"memory: {rows:,} rows: peak RSS {runs[-1]['peak_hwm_kib'] / 1024:.0f} MiB, "
            f"peak RssAnon {runs[-1]['peak_anon_kib'] / 1024:.0f} MiB")
    grow = len(runs) >= 2
    return {"value_bytes": 100, "runs": runs,
            "growth": runs[-1]["peak_hwm_kib"] / runs[0]["peak_hwm_kib"] - 1.0 if grow else None,
            "anon_growth": runs[-1]["peak_anon_kib"] / runs[0]["peak_anon_kib"] - 1.0 if grow else None}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="small sizes, 1-3 rounds (a smoke test)")
    ap.add_argument("--only", default=",".join(SECTIONS), help=f"comma-separated subset of {','.join(SECTIONS)}")
    ap.add_argument("--cores", type=int, default=os.cpu_count() or 2, help="Spark local[N] and its partitions")
    ap.add_argument("--topic-partitions", type=int, default=4)
    ap.add_argument("--driver-memory", default="6g")
    ap.add_argument("--out-dir", default=os.path.join(REPO, "bench", "results"))
    ap.add_argument("--no-render", action="store_true", help="do not write docs/PERFORMANCE.md and its chart")
    args = ap.parse_args()
    want = {s.strip() for s in args.only.split(",") if s.strip()}
    if unknown := want - set(SECTIONS):
        ap.error(f"unknown sections: {sorted(unknown)}")
    mode = "quick" if args.quick else "full"
    p = MODES[mode]
    stamp = time.strftime("%Y%m%dT%H%M%S")
    scratch = os.path.join(args.out_dir, "tmp", stamp)
    os.makedirs(scratch, exist_ok=True)
    started = time.monotonic()
    results: dict[str, Any] = {
        "meta": {"timestamp": stamp, "mode": mode, "sections": sorted(want), "commit": common.git_commit(),
                 "machine": common.machine_facts(), "params": p},
        "settings": {"partitions": args.cores, "cores": args.cores, "topic_partitions": args.topic_partitions,
                     "value_sizes": p["sizes"]}}
    log(f"mode={mode} sections={','.join(sorted(want))} scratch={scratch}")
    brokers = common.Brokers(scratch)
    try:
        broker = brokers.fresh("settings")
        results["settings"]["producer_conf"] = {
            k: v for k, v in common.check_same_producer_conf(broker.bootstrap).items() if k != "bootstrap.servers"}
        results["settings"]["broker"] = (f"{results['meta']['machine']['broker']}, log on the local disk, "
                                         "127.0.0.1, a fresh one per section")
        props = broker.server_properties()
        results["settings"]["broker_properties"] = {
            k: props[k] for k in ("num.network.threads", "num.io.threads", "log.segment.bytes",
                                  "log.segment.delete.delay.ms") if k in props}
        if want - {"memory"}:
            try:
                spark_sections(results, p, brokers, scratch, want, args)
            except Exception as exc:  # noqa: BLE001 - e.g. Spark failed to start: every Spark section failed
                traceback.print_exc()
                for s in want - {"memory"}:
                    results.setdefault(s.replace("-", "_"), {"error": f"{type(exc).__name__}: {exc}"})
        if "memory" in want:
            bootstrap = brokers.fresh("memory").bootstrap
            results["memory"] = guarded(lambda: memory_section(p, bootstrap, scratch, args.topic_partitions))
    finally:
        brokers.stop()
    results["meta"].update(brokers=brokers.used, elapsed_s=round(time.monotonic() - started, 1),
                           loadavg_end=list(os.getloadavg()))
    from bench import render

    results["targets"] = render.evaluate_targets(results)
    path = os.path.join(args.out_dir, f"{stamp}.json")
    with open(path, "w") as f:
        json.dump(results, f, indent=1, default=str)
        f.write("\n")
    log(f"results: {path}, {results['meta']['elapsed_s']} s")
    for t in results["targets"]:
        log(f"target {t['status']:>12}: {t['name']}: {t['measured_text']}")
    if not args.no_render:
        render.render(results, path)
    shutil.rmtree(scratch, ignore_errors=True)
    try:
        os.rmdir(os.path.join(args.out_dir, "tmp"))
    except OSError:  # another run's scratch is there
        pass
    failed = [s for s in SECTIONS if "error" in (results.get(s.replace("-", "_")) or {})]
    if failed:
        log(f"FAILED sections: {', '.join(failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
