"""The Spark sections of ``bench/run.py``: throughput, latency and scaling, and the scaling section's errors.

Throughput, latency and the scaling section's local points run in this
process's SparkSession (bench/spark_throughput.py, bench/spark_latency.py,
bench/spark_scaling.py); the scaling section's local-cluster point in a
child process (bench/cluster.py).
"""

from __future__ import annotations

import argparse
import os
import time
from typing import Any

from bench.run_brokers import Brokers
from bench.run_children import run_child
from bench.run_sections import guarded
from bench.spark_bench import log


def section_spark(results: dict[str, Any], p: dict[str, Any], brokers: "Brokers", scratch: str,
                  want: set[str], args: argparse.Namespace) -> None:
    from bench import spark_bench as sb
    from bench.spark_latency import latency
    from bench.spark_throughput import throughput

    t = time.monotonic()
    spark = sb.build_spark(args.cores, args.partitions, args.driver_memory)
    log(f"SparkSession up in {time.monotonic() - t:.1f}s")
    results["settings"]["spark"] = sb.spark_settings(spark)
    try:
        if "throughput" in want:
            bootstrap = brokers.fresh("throughput").bootstrap
            results["throughput"] = guarded(lambda: throughput(
                spark, bootstrap, rows_by_size={s: p["tp_rows"][str(s)] for s in p["sizes"]}, partitions=args.partitions,
                topic_partitions=args.topic_partitions, rounds=p["tp_rounds"], writers=_only(sb.WRITERS, args),
                scratch=scratch, verify=p["verify"], warm_rows=p.get("tp_warm_rows"), jmx_url=brokers.jmx_url))
        if "latency" in want:
            bootstrap = brokers.fresh("latency").bootstrap
            results["latency"] = guarded(lambda: latency(
                spark, bootstrap, rows_per_s=p["lat_rows_per_s"], sizes=p["lat_sizes"], partitions=args.partitions,
                topic_partitions=args.topic_partitions, duration_s=p["lat_duration_s"],
                warmup_batches=p["lat_warmup_batches"], writers=_only(sb.LATENCY_WRITERS, args), scratch=scratch))
        if "kafka-source" in want:
            from bench.kafka_source import KS_WRITERS, kafka_source_latency

            bootstrap = brokers.fresh("kafka-source").bootstrap
            results["kafka_source"] = guarded(lambda: kafka_source_latency(
                spark, bootstrap, rows_per_trigger=p["ks_rows_per_trigger"], in_partitions=p["ks_in_partitions"],
                partitions=p["ks_partitions"], value_bytes=100, batches=p["ks_batches"],
                warmup_batches=p["ks_warmup_batches"], rounds=p["ks_rounds"], topic_partitions=args.topic_partitions,
                scratch=scratch, writers=_only(KS_WRITERS, args)))
        if "realtime" in want:
            from bench.kafka_source import RT_WRITERS, realtime_latency

            bootstrap = brokers.fresh("realtime").bootstrap
            results["realtime"] = guarded(lambda: realtime_latency(
                spark, bootstrap, rows_per_s=p["rt_rows_per_s"], partitions=min(2, args.cores), value_bytes=100,
                warmup_s=p["rt_warmup_s"], measure_s=p["rt_measure_s"], rounds=p["rt_rounds"], scratch=scratch,
                writers=_only(RT_WRITERS, args)))
        if "threads" in want:
            from bench.threads import WRITERS as TH_WRITERS, measure

            bootstrap = brokers.fresh("threads").bootstrap
            results["threads"] = guarded(lambda: measure(
                spark, bootstrap, list(_only(TH_WRITERS, args)), p["th_rows"], 100, p["th_rounds"], scratch, jfr=True,
                partitions=args.partitions, topic_partitions=args.topic_partitions))
        if "scaling" in want:
            bootstrap = brokers.fresh("scaling").bootstrap
            results["scaling"] = {"local": guarded(lambda: scaling_local(spark, p, bootstrap, scratch, args))}
    finally:
        spark.stop()


def _scale_kw(p: dict[str, Any], prefix: str, args: argparse.Namespace, scratch: str) -> dict[str, Any]:
    return {"rows": p[f"{prefix}_rows"], "value_bytes": p["scale_value_bytes"], "rounds": p[f"{prefix}_rounds"],
            "rows_per_s": p["scale_rows_per_s"], "duration_s": p[f"{prefix}_duration_s"],
            "warmup_batches": p[f"{prefix}_warmup_batches"], "max_s": p[f"{prefix}_max_s"],
            "topic_partitions": args.topic_partitions, "scratch": scratch, "verify": p["scale_verify"],
            "tp_writers": _only(tuple(p["scale_tp_writers"]), args), "warm_rows": p.get(f"{prefix}_warm_rows"),
            "lat_writers": _only(tuple(p["scale_lat_writers"]), args)}


def _only(writers: tuple[str, ...], args: argparse.Namespace) -> tuple[str, ...]:
    """``writers`` restricted to ``--writers`` (all of them without it)."""
    if not args.writers:
        return writers
    keep = {w.strip() for w in args.writers.split(",")}
    return tuple(w for w in writers if w in keep)


def scaling_local(spark: Any, p: dict[str, Any], bootstrap: str, scratch: str,
                  args: argparse.Namespace) -> dict[str, Any]:
    """The scaling section's points in this run's SparkSession: one per partition count."""
    from bench.spark_scaling import scaling_point

    master = spark.sparkContext.master
    points = []
    for n in p["scale_partitions"]:
        log(f"scaling: {n} partitions on {master}")
        points.append(scaling_point(spark, bootstrap, partitions=n, **_scale_kw(p, "scale", args, scratch)))
    return {"master": master, "cores": args.cores, "points": points, "eo_max_lanes_per_worker": _max_lanes(),
            "eo_lanes": _eo_lanes(args.partitions or args.cores)}


def _eo_lanes(cores: int) -> int | None:
    """The lanes exactly-once re-splits every batch into (``exactly_once_lanes``, the package's default; its
    ``"auto"``, ``None``, is the session's default parallelism: ``--partitions``, else ``--cores``, here)."""
    try:
        import dataclasses

        from spark_recoverable_sink.config import SinkConfig

        default = next(f.default for f in dataclasses.fields(SinkConfig) if f.name == "exactly_once_lanes")
        return cores if default is None else default
    except Exception:  # noqa: BLE001 - only an explanatory figure
        return None


def _max_lanes() -> int | None:
    """How many exactly-once lanes a worker process keeps open (the package's default)."""
    try:
        import inspect

        from spark_recoverable_sink.delivery.exactly_once.lane import LanePool

        return inspect.signature(LanePool.__init__).parameters["max_lanes"].default
    except Exception:  # noqa: BLE001 - only an explanatory figure
        return None


def scaling_cluster(p: dict[str, Any], bootstrap: str, scratch: str, args: argparse.Namespace) -> dict[str, Any]:
    """The scaling section's local-cluster point: its own Spark app in a child process (bench/cluster.py)."""
    a = {"bootstrap": bootstrap, "master": p["cluster_master"], "partitions": p["cluster_partitions"],
         **_scale_kw(p, "cluster", args, os.path.join(scratch, "cluster")), "cpu_root": os.getpid()}
    a["tp_writers"], a["lat_writers"] = list(a["tp_writers"]), list(a["lat_writers"])
    os.makedirs(a["scratch"], exist_ok=True)
    log(f"scaling: {a['master']}, {a['partitions']} partitions (bench/cluster.py)")
    return run_child("cluster.py", a, 3600, scratch, echo=True)


def section_scaling_errors(sc: Any) -> list[str]:
    """Every failure inside the scaling section (a point's throughput or latency, the cluster run)."""
    if not isinstance(sc, dict):
        return []
    errs = []
    for where in ("local", "cluster"):
        part = sc.get(where)
        if not isinstance(part, dict):
            continue
        if "error" in part:
            errs.append(f"{where}: {part['error']}")
            continue
        for pt in part.get("points", [part]) if where == "local" else [part]:
            for half in ("throughput", "latency"):
                if isinstance(pt.get(half), dict) and "error" in pt[half]:
                    errs.append(f"{where} {pt.get('partitions')} partitions {half}: {pt[half]['error']}")
    return errs
