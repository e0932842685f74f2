"""The scaling section of the Spark benchmarks: throughput and micro-batch latency at one partition count.

:func:`scaling_point` measures one point (in this process's SparkSession, or
in bench/cluster.py's local-cluster app); :func:`scaling_rows` makes its
summary rows.
"""

from __future__ import annotations

import time
from typing import Any

from .spark_bench import LABELS, SCALING_LAT_WRITERS, SCALING_TP_WRITERS
from .spark_latency import latency
from .spark_throughput import throughput


def scaling_point(spark: Any, bootstrap: str, *, partitions: int, rows: int, value_bytes: int, rounds: int,
                  rows_per_s: int, duration_s: float, warmup_batches: int, topic_partitions: int, scratch: str,
                  verify: bool, tp_writers: tuple[str, ...] = SCALING_TP_WRITERS,
                  lat_writers: tuple[str, ...] = SCALING_LAT_WRITERS, max_s: float | None = None,
                  cpu_root: int | None = None, tag: str = "scaling", warm_rows: int | None = None) -> dict[str, Any]:
    """Throughput (the same cached rows) and micro-batch latency (the same rows per batch) at ``partitions``.

    Latency: a ``rate-micro-batch`` source, ``rows_per_s`` rows in every
    batch, 1 s trigger; ``duration_s`` batches measured (or those within ``max_s``).

    A failure of one half is recorded in it (``{"error": ...}``) and does not
    stop the other.
    """
    out: dict[str, Any] = {"partitions": partitions}
    t = time.monotonic()
    try:
        out["throughput"] = throughput(
            spark, bootstrap, rows_by_size={value_bytes: rows}, partitions=partitions,
            topic_partitions=topic_partitions, rounds=rounds, writers=tp_writers, scratch=scratch, verify=verify,
            cpu_root=cpu_root, tag=f"{tag} {partitions}p throughput", warm_rows=warm_rows)
    except Exception as exc:  # noqa: BLE001 - recorded, and the run fails (bench/run.py)
        import traceback

        traceback.print_exc()
        out["throughput"] = {"error": f"{type(exc).__name__}: {exc}"}
    try:
        out["latency"] = latency(
            spark, bootstrap, rows_per_s=rows_per_s, sizes=[value_bytes], partitions=partitions,
            topic_partitions=topic_partitions, duration_s=duration_s, warmup_batches=warmup_batches,
            writers=lat_writers, scratch=scratch, tag=f"{tag} {partitions}p latency", source="rate-micro-batch",
            max_s=max_s)
    except Exception as exc:  # noqa: BLE001
        import traceback

        traceback.print_exc()
        out["latency"] = {"error": f"{type(exc).__name__}: {exc}"}
    out["seconds"] = time.monotonic() - t
    return out


def scaling_rows(point: dict[str, Any], setting: str) -> list[dict[str, Any]]:
    """One summary row per writer of a scaling point: throughput, CPU and micro-batch latency side by side."""
    tp, lat = point.get("throughput") or {}, point.get("latency") or {}
    by: dict[str, dict[str, Any]] = {}
    for r in tp.get("summary", []) if "error" not in tp else []:
        by.setdefault(r["writer"], {}).update(
            rows_per_s=r["rows_per_s"], median_s=r["median_s"], cpu_s_per_million=r.get("cpu_s_per_million"),
            tp_vs_flush=r.get("vs_flush"), tp_workers=r.get("workers"), tp_rows=r["rows"], tp_runs=r["runs"],
            read_back_ok=r.get("read_back_ok"))
    for r in lat.get("results", []) if "error" not in lat else []:
        sb = r.get("sink_batches") or {}
        by.setdefault(r["writer"], {}).update(
            p50_ms=r["add_batch_ms"]["p50"], p95_ms=r["add_batch_ms"]["p95"], p99_ms=r["add_batch_ms"]["p99"],
            trigger_p50_ms=r["trigger_ms"]["p50"], kept_up=r["kept_up"], batches=r["batches"],
            rows_per_batch=r["rows_per_batch_mean"], task_s_p50=sb.get("task_s_p50"),
            task_s_busy_p50=sb.get("task_s_busy_p50"),
            task_s_sum_p50=sb.get("task_s_sum_p50"), sink_batch_s_p50=sb.get("batch_s_p50"),
            lat_workers=sb.get("workers"))
    order = list(SCALING_LAT_WRITERS) + [w for w in by if w not in SCALING_LAT_WRITERS]
    return [{"setting": setting, "partitions": point["partitions"], "writer": w, "label": LABELS.get(w, w), **by[w]}
            for w in order if w in by]
