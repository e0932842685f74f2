"""The benchmark suite: one entry point, one process tree, one Spark session, a fresh broker per section.

Usage::

    python bench/run.py --quick     # tiny sizes, 1-3 rounds each (a smoke test of every section)
    python bench/run.py             # the full, measured run (about 80 minutes; run it on a quiet machine)

Sections (``--only`` picks some, comma-separated):

``throughput``  batch write of N cached rows (100 B and 1 KiB values) per writer:
                raw (ending with flush() and ending by polling), flush-writer
                (without and with the id header), Spark's Kafka sink (two settings),
                sink sync (native engine; record_ids "content" and "partition"),
                sink sync (Python engine), sink async (+ its time until durable),
                sink exactly-once (with and without the re-split); an untimed
                warm-up round, then 5 interleaved rounds (order rotated), medians
                with their spread, ratios taken round by round, CPU seconds per
                record (process tree and whole machine), the broker's request counts
``latency``     micro-batch duration p50/p95/p99 of a streaming query at a fixed
                offered load (rate source, 1 s trigger), per writer
``kafka-source`` a Kafka → Kafka copy as users write it: Spark's Kafka source
                (8 partitions, 50,000 rows per 1 s trigger), a shuffle to 4 and to 200
                partitions, then Spark's Kafka sink, sink sync or exactly-once;
                5 interleaved rounds (bench/kafka_source.py)
``realtime``    Spark's real-time mode (trigger(realTime="5 seconds"), PySpark 4.1+), a Kafka → Kafka
                copy at 1,000 records/s over 2 partitions: end-to-end latency p50/p95 (send → read
                from the output) of Spark's Kafka sink and sink.foreach_writer, and when rows reach
                a Python foreach writer that writes nothing; 5 interleaved rounds (bench/kafka_source.py)
``scaling``     how cost grows with Spark partitions: throughput (same cached rows)
                and micro-batch p50 (same rows per batch) of the flush-writer, sink
                sync, exactly-once and Spark's Kafka sink (+ no-op latency) at 4, 16,
                64 and 200 partitions in local[N], and at 4 on local-cluster[2,1,1024]
                (its own Spark app, bench/cluster.py)
``wal``         the WAL's own cost per record (bench/wal_cost.py), and the whole
                sink path vs a plain produce loop with a callback (outside Spark)
``memory``      peak RSS (VmHWM) of a process writing one partition of two sizes
``recovery``    replay of orphaned records: rows/s until all acked
``profile``     cProfile of write_partition (task thread and poller thread)
``formats``     Schema Registry Avro: the sink with value_format=Avro against the sink
                sending the same bytes and against the hand-written row-by-row
                serializer route (bench/formats.py, its own Spark app and registry)
``threads``     both sinks thread by thread: CPU per record per process and thread of
                Spark's sink, sink sync and the raw loop (5 interleaved rounds), and
                Spark's JVM by method (Java Flight Recorder) (bench/threads.py)

Results go to ``bench/results/<timestamp>.json`` and ``bench/results/latest.json``;
then ``bench/render.py`` writes docs/PERFORMANCE.md, docs/performance.png and
docs/performance-scaling.png (skip with ``--no-render``; ``--docs-dir DIR``
writes them elsewhere).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
import traceback
from typing import Any

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

# Spark's Python workers must use this interpreter and find bench.writers.
os.environ["PYSPARK_PYTHON"] = os.environ.get("PYSPARK_PYTHON") or sys.executable
os.environ["PYSPARK_DRIVER_PYTHON"] = os.environ.get("PYSPARK_DRIVER_PYTHON") or sys.executable
os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (REPO, os.environ.get("PYTHONPATH")) if p)

from bench import common  # noqa: E402
from bench.run_brokers import Brokers  # noqa: E402
from bench.run_children import run_child  # noqa: E402
from bench.run_sections import guarded, section_memory, section_profile, section_recovery, section_wal  # noqa: E402
from bench.run_spark import scaling_cluster, section_scaling_errors, section_spark  # noqa: E402
from bench.spark_bench import log  # noqa: E402

SECTIONS = ("throughput", "latency", "kafka-source", "realtime", "scaling", "wal", "memory", "recovery", "profile",
            "formats", "threads")
SPARK_SECTIONS = {"throughput", "latency", "kafka-source", "realtime", "scaling", "threads"}

MODES: dict[str, dict[str, Any]] = {
    "quick": {
        # quick: 3 rounds (the spread and the rounds' agreement are computed), a small warm-up round
        "tp_rows": {"100": 100_000, "1024": 100_000}, "tp_rounds": 3, "tp_warm_rows": 20_000, "sizes": [100, 1024],
        "verify": True,
        "lat_rows_per_s": 50_000, "lat_duration_s": 6, "lat_warmup_batches": 2, "lat_sizes": [100],
        "wal_rows": 100_000, "wal_repeat": 1, "produce_rows": 200_000, "produce_repeat": 1,
        "mem_rows": [200_000, 1_000_000], "recovery_rows": 200_000, "profile_rows": 200_000,
        "formats_rows": 100_000, "formats_rounds": 1,
        # quick: 4 and 64 partitions only, the sink's two modes (+ the no-op floor in latency), 2 batches each
        "scale_partitions": [4, 64], "scale_value_bytes": 100, "scale_rows": 20_000, "scale_rounds": 1,
        "scale_warm_rows": 5_000, "cluster_warm_rows": 5_000,
        "scale_rows_per_s": 5_000, "scale_duration_s": 2, "scale_warmup_batches": 1, "scale_max_s": 30,
        "scale_verify": False, "scale_tp_writers": ["spark-kafka", "sink-sync", "sink-exactly-once"],
        "scale_lat_writers": ["noop", "spark-kafka", "sink-sync", "sink-exactly-once"],
        "cluster_master": "local-cluster[2,1,1024]", "cluster_partitions": 4, "cluster_rows": 20_000,
        "cluster_rounds": 1, "cluster_duration_s": 2, "cluster_warmup_batches": 1, "cluster_max_s": 30,
        "ks_rows_per_trigger": 5_000, "ks_in_partitions": 8, "ks_partitions": [4], "ks_batches": 3,
        "ks_warmup_batches": 1, "ks_rounds": 1,
        "rt_rows_per_s": 1_000, "rt_warmup_s": 6, "rt_measure_s": 6, "rt_rounds": 1,
        "th_rows": 100_000, "th_rounds": 2,
    },
    "full": {
        # 13 writers (Spark's sink in two settings among them) x 2 sizes x (a warm-up round of a quarter of the
        # rows + 5 timed rounds), round 0 read back: about 45 min
        "tp_rows": {"100": 2_000_000, "1024": 1_000_000}, "tp_rounds": 5, "tp_warm_rows": 500_000, "sizes": [100, 1024],
        "verify": True,
        "lat_rows_per_s": 50_000, "lat_duration_s": 60, "lat_warmup_batches": 10, "lat_sizes": [100],
        "wal_rows": 1_000_000, "wal_repeat": 3, "produce_rows": 1_000_000, "produce_repeat": 5,
        "mem_rows": [1_000_000, 100_000_000], "recovery_rows": 1_000_000, "profile_rows": 1_000_000,
        "formats_rows": 1_000_000, "formats_rounds": 3,
        # scale_rows_per_s: rows in every micro-batch (rate-micro-batch source, 1 s trigger);
        # scale_duration_s: micro-batches measured (after the warm-up ones), or as many as come in scale_max_s
        "scale_partitions": [4, 16, 64, 200], "scale_value_bytes": 100, "scale_rows": 2_000_000, "scale_rounds": 3,
        "scale_warm_rows": 200_000, "cluster_warm_rows": 100_000,
        "scale_rows_per_s": 50_000, "scale_duration_s": 20, "scale_warmup_batches": 3, "scale_max_s": 150,
        "scale_verify": True, "scale_tp_writers": ["flush-writer", "spark-kafka", "sink-sync", "sink-exactly-once"],
        "scale_lat_writers": ["noop", "flush-writer", "spark-kafka", "sink-sync", "sink-exactly-once"],
        "cluster_master": "local-cluster[2,1,1024]", "cluster_partitions": 4, "cluster_rows": 1_000_000,
        "cluster_rounds": 3, "cluster_duration_s": 20, "cluster_warmup_batches": 3, "cluster_max_s": 150,
        # a Kafka → Kafka copy: 8 input partitions, 50,000 rows a 1 s trigger, a shuffle to 4 and to 200 partitions;
        # 3 writers x 2 widths x 5 rounds of 3 + 10 batches: about 20 min
        "ks_rows_per_trigger": 50_000, "ks_in_partitions": 8, "ks_partitions": [4, 200], "ks_batches": 10,
        "ks_warmup_batches": 3, "ks_rounds": 5,
        # real-time mode: 3 writers x 5 rounds of 10 s warm-up + 20 s measured (5 s epochs): about 10 min
        "rt_rows_per_s": 1_000, "rt_warmup_s": 10, "rt_measure_s": 20, "rt_rounds": 5,
        # both sinks thread by thread (bench/threads.py): 3 writers x 5 rounds of 2,000,000 rows, JFR: about 5 min
        "th_rows": 2_000_000, "th_rounds": 5,
    },
}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="tiny sizes, 1-3 rounds each (a smoke test)")
    ap.add_argument("--only", default=",".join(SECTIONS), help=f"comma-separated subset of {','.join(SECTIONS)}")
    ap.add_argument("--cores", type=int, default=os.cpu_count() or 2, help="Spark local[N] (default: all cores)")
    ap.add_argument("--partitions", type=int, default=None, help="Spark partitions for every writer (default: cores)")
    ap.add_argument("--topic-partitions", type=int, default=4)
    ap.add_argument("--driver-memory", default="6g")
    ap.add_argument("--writers", default=None, help="comma-separated writers to run (default: each section's own)")
    ap.add_argument("--rows", type=int, default=None, help="override the throughput row count")
    ap.add_argument("--rounds", type=int, default=None, help="override the runs per writer")
    ap.add_argument("--out-dir", default=os.path.join(REPO, "bench", "results"))
    ap.add_argument("--scaling-partitions", default=None, help="scaling section: partition counts (default 4,16,64,200)")
    ap.add_argument("--no-cluster", action="store_true", help="scaling section: skip the local-cluster run")
    ap.add_argument("--no-render", action="store_true",
                    help="do not write docs/PERFORMANCE.md, docs/performance.png, docs/performance-scaling.png")
    ap.add_argument("--docs-dir", default=None, help="render into this directory instead of docs/")
    ap.add_argument("--keep-tmp", action="store_true", help="keep the scratch directory (WALs, logs)")
    ap.add_argument("--merge-into", default=None,
                    help="a results JSON whose sections this run measures again: they replace its own, the file "
                         "names the run they came from (meta.merged), its targets are evaluated again")
    args = ap.parse_args()
    args.partitions = args.partitions or args.cores
    want = {s.strip() for s in args.only.split(",") if s.strip()}
    unknown = want - set(SECTIONS)
    if unknown:
        ap.error(f"unknown sections: {sorted(unknown)}")
    mode = "quick" if args.quick else "full"
    p = dict(MODES[mode])
    if args.rows:
        p["tp_rows"] = {str(s): args.rows for s in p["sizes"]}
    if args.rounds:
        p["tp_rounds"] = args.rounds
    if args.scaling_partitions:
        p["scale_partitions"] = [int(x) for x in args.scaling_partitions.split(",") if x.strip()]

    stamp = time.strftime("%Y%m%dT%H%M%S")
    scratch = os.path.join(args.out_dir, "tmp", stamp)
    os.makedirs(scratch, exist_ok=True)
    started = time.monotonic()
    results: dict[str, Any] = {
        "meta": {"timestamp": stamp, "mode": mode, "sections": sorted(want), "commit": common.git_commit(),
                 "machine": common.machine_facts(), "params": p},
        "settings": {"partitions": args.partitions, "cores": args.cores, "topic_partitions": args.topic_partitions,
                     "value_sizes": p["sizes"]},
    }
    log(f"mode={mode} sections={','.join(sorted(want))} scratch={scratch}")
    brokers = Brokers(scratch)
    try:
        broker = brokers.fresh("settings")
        results["settings"]["producer_conf"] = {
            k: v for k, v in common.check_same_producer_conf(broker.bootstrap).items() if k != "bootstrap.servers"}
        results["settings"]["broker"] = (f"{results['meta']['machine']['broker']}, log on the local disk, "
                                         "127.0.0.1, a fresh one per section")
        keep = ("num.network.threads", "num.io.threads", "log.segment.bytes", "transaction.state.log.num.partitions",
                "offsets.topic.num.partitions", "log.segment.delete.delay.ms")
        props = broker.server_properties()
        results["settings"]["broker_properties"] = {k: props[k] for k in keep if k in props}
        if want & SPARK_SECTIONS:
            try:
                section_spark(results, p, brokers, scratch, want, args)
            except Exception as exc:  # noqa: BLE001 - e.g. Spark failed to start
                traceback.print_exc()
                for s in SPARK_SECTIONS:
                    if s in want and s not in results:
                        results[s] = {"error": f"{type(exc).__name__}: {exc}"}
        if "scaling" in want and isinstance(results.get("scaling"), dict) and "error" not in results["scaling"]:
            sc = results["scaling"]
            sc.update(value_bytes=p["scale_value_bytes"], rows=p["scale_rows"], rows_per_batch=p["scale_rows_per_s"],
                      rows_per_s=p["scale_rows_per_s"], partitions=p["scale_partitions"],
                      batches=p["scale_duration_s"], warmup_batches=p["scale_warmup_batches"])
            if args.no_cluster:
                sc["cluster"] = None
            else:  # after this process's SparkSession stopped: the cluster app has the machine to itself
                bootstrap = brokers.fresh("scaling-cluster").bootstrap
                sc["cluster"] = guarded(lambda: scaling_cluster(p, bootstrap, scratch, args))
            from bench.spark_scaling import scaling_rows

            sc["summary"] = [r for pt in (sc["local"].get("points", []) if "error" not in sc["local"] else [])
                             for r in scaling_rows(pt, sc["local"]["master"])]
            if isinstance(sc.get("cluster"), dict) and "error" not in sc["cluster"]:
                sc["summary"] += scaling_rows(sc["cluster"], sc["cluster"]["master"])
        if "formats" in want:  # its own Spark app: after this process's SparkSession stopped
            bootstrap = brokers.fresh("formats").bootstrap
            results["formats"] = guarded(lambda: run_child(
                "formats.py", {"bootstrap": bootstrap, "rows": p["formats_rows"], "rounds": p["formats_rounds"],
                               "partitions": args.partitions, "topic_partitions": args.topic_partitions},
                3600, scratch, echo=True))
        if "wal" in want:
            bootstrap = brokers.fresh("wal").bootstrap
            results["wal"] = guarded(lambda: section_wal(p, bootstrap, scratch, args.topic_partitions))
        if "memory" in want:
            bootstrap = brokers.fresh("memory").bootstrap
            results["memory"] = guarded(lambda: section_memory(p, bootstrap, scratch, args.topic_partitions))
        if "recovery" in want:
            broker = brokers.fresh("recovery")
            results["recovery"] = guarded(lambda: section_recovery(p, broker, scratch, args.topic_partitions))
        if "profile" in want:
            bootstrap = brokers.fresh("profile").bootstrap
            results["profile"] = guarded(lambda: section_profile(p, bootstrap, scratch, args.topic_partitions))
    finally:
        brokers.stop()
    results["meta"]["brokers"] = brokers.used
    results["meta"]["elapsed_s"] = round(time.monotonic() - started, 1)
    results["meta"]["loadavg_end"] = list(os.getloadavg())

    os.makedirs(args.out_dir, exist_ok=True)
    path = os.path.join(args.out_dir, f"{stamp}.json")

    def save() -> None:
        for out in (path, os.path.join(args.out_dir, "latest.json")):
            with open(out, "w") as f:
                json.dump(results, f, indent=1, default=str)
                f.write("\n")

    base = None
    if args.merge_into:  # read before the first save: the file merged into may be latest.json itself
        with open(args.merge_into) as f:
            base = json.load(f)
    save()  # the measurements first: nothing below can lose them
    from bench import render

    if base is not None:  # this run's sections replace the same sections of an earlier run's file
        for section in want:  # a section's results key is its name in Python's spelling (kafka-source: kafka_source)
            key = section.replace("-", "_")
            base[key] = results.get(key)
        base["meta"].setdefault("merged", []).append(
            {"sections": sorted(want), "timestamp": stamp, "commit": results["meta"]["commit"], "params": p,
             "brokers": brokers.used, "elapsed_s": results["meta"]["elapsed_s"], "file": os.path.basename(path)})
        results, path = base, args.merge_into
        save()

    results["targets"] = render.evaluate_targets(results)
    save()
    log(f"results: {path} (and latest.json), {results['meta']['elapsed_s']}s")
    for t in results["targets"]:
        log(f"target {t['status']:>12}: {t['name']}: {t['measured_text']}")
    if not args.no_render:
        if args.docs_dir:
            os.makedirs(args.docs_dir, exist_ok=True)
            render.render(results, docs_dir=args.docs_dir)
        else:
            render.render(results)
    if not args.keep_tmp:
        shutil.rmtree(scratch, ignore_errors=True)
        try:
            os.rmdir(os.path.join(args.out_dir, "tmp"))
        except OSError:
            pass
    failed = [s for s in SECTIONS if isinstance(results.get(s), dict) and "error" in results[s]]
    for e in section_scaling_errors(results.get("scaling")):
        log(f"scaling failed: {e}")
        if "scaling" not in failed:
            failed.append("scaling")
    if failed:
        log(f"FAILED sections: {', '.join(failed)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
