"""The benchmark charts (matplotlib).

* docs/performance.png: throughput and latency per writer (:func:`chart`);
* docs/performance-scaling.png: throughput and micro-batch p50 against Spark
  partitions, and on local-cluster (:func:`scaling_chart`).
"""

from __future__ import annotations

import os
import sys
from typing import Any

from bench.targets import (
    ASYNC,
    EXACTLY,
    FLUSH,
    NOOP,
    RAW,
    SYNC,
    SYNC_PY,
    _ok,
    scale_row,
)
from bench.targets import tp_row as _tp

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PNG = os.path.join(REPO, "docs", "performance.png")
SCALING_PNG = os.path.join(REPO, "docs", "performance-scaling.png")
LABELS = {NOOP: "no-op", RAW: "raw (ceiling)", FLUSH: "flush-writer", SYNC: "sink sync (native)",
          SYNC_PY: "sink sync (Python engine)", ASYNC: "sink async", EXACTLY: "sink exactly-once",
          "spark-kafka": "Spark's Kafka sink",
          "spark-kafka-alike": "Spark's Kafka sink, batching as librdkafka's",
          "sink-exactly-once-no-resplit": "sink exactly-once, no re-split",
          "flush-writer-id": "flush-writer + rks-id header"}
COLORS = {NOOP: "#bbbbbb", RAW: "#888888", FLUSH: "#4c72b0", SYNC: "#dd8452", SYNC_PY: "#937860",
          ASYNC: "#55a868", EXACTLY: "#c44e52", "spark-kafka": "#8172b3", "spark-kafka-alike": "#b39ddb",
          "sink-exactly-once-no-resplit": "#da8bc3",
          "flush-writer-id": "#64b5cd"}

__all__ = ["chart", "scaling_chart"]


def _pyplot(what: str) -> tuple[Any, Any] | None:
    """(pyplot, FuncFormatter) on the Agg backend, or None (said on stderr) without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.ticker import FuncFormatter
    except ImportError:
        print(f"[render] matplotlib not installed: no {what}", file=sys.stderr)
        return None
    return plt, FuncFormatter


def chart(results: dict[str, Any], path: str = PNG) -> bool:
    mpl = _pyplot("chart")
    if mpl is None:
        return False
    plt, FuncFormatter = mpl
    tp, lat = results.get("throughput"), results.get("latency")
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(13, 4.8))
    writers = [RAW, FLUSH, "spark-kafka", "spark-kafka-alike", SYNC, SYNC_PY, ASYNC, EXACTLY]
    colors = COLORS
    if _ok(tp):
        sizes = tp["sizes"]
        width = 0.8 / (len(writers) + 1)
        for i, wr in enumerate(writers + ["durable"]):
            xs, ys = [], []
            for j, size in enumerate(sizes):
                r = _tp(results, ASYNC if wr == "durable" else wr, size)
                if r is None:
                    continue
                xs.append(j + (i - len(writers) / 2) * width)
                ys.append((r.get("durable_rows_per_s") if wr == "durable" else r["rows_per_s"]) or 0)
            if wr == "durable":
                ax1.bar(xs, ys, width, label="sink async, to durable", color="white", edgecolor=colors[ASYNC],
                        hatch="//")
            else:
                ax1.bar(xs, ys, width, label=LABELS[wr], color=colors[wr])
        ax1.set_xticks(range(len(sizes)), [f"{s} B values" for s in sizes])
        ax1.set_ylabel("rows/s (median)")
        ax1.yaxis.set_major_formatter(FuncFormatter(lambda x, _pos: f"{x:,.0f}"))
        ax1.set_title(f"Batch write, {tp['partitions']} partitions, "
                      + ", ".join(f"{int(n):,} rows of {s} B" for s, n in tp["rows_by_size"].items()), fontsize=10)
        ax1.legend(fontsize=8)
        ax1.grid(axis="y", alpha=0.3)
    else:
        ax1.text(0.5, 0.5, "throughput not measured", ha="center")
    if _ok(lat):
        rs = [r for r in lat["results"] if r["value_bytes"] == lat["sizes"][0]]
        qs = ["p50", "p95", "p99"]
        width = 0.8 / len(qs)
        for k, q in enumerate(qs):
            ax2.bar([i + (k - 1) * width for i in range(len(rs))], [r["add_batch_ms"][q] or 0 for r in rs], width,
                    label=f"addBatch {q}", alpha=[1.0, 0.65, 0.35][k],
                    color=[colors.get(r["writer"], "#4c72b0") for r in rs], edgecolor="black", linewidth=0.4)
        ax2.set_xticks(range(len(rs)), [LABELS.get(r["writer"], r["writer"]) for r in rs], fontsize=8)
        ax2.set_ylabel("batch duration, ms")
        ax2.set_title(f"Micro-batch duration at {lat['rows_per_s']:,} rows/s, 1 s trigger")
        ax2.set_xlabel("bars per writer: addBatch p50, p95, p99 (lighter)", fontsize=8)
        ax2.grid(axis="y", alpha=0.3)
    else:
        ax2.text(0.5, 0.5, "latency not measured", ha="center")
    meta = results["meta"]
    fig.suptitle(f"spark_recoverable_sink benchmarks — {meta['mode']} mode, {meta['timestamp']}"
                 + (" (quick: not a measurement)" if meta["mode"] == "quick" else ""), fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def scaling_chart(results: dict[str, Any], path: str = SCALING_PNG) -> bool:
    """Throughput and micro-batch p50 against Spark partitions (log scale), local-cluster as separate markers."""
    mpl = _pyplot("scaling chart")
    if mpl is None:
        return False
    plt, FuncFormatter = mpl
    sc = results.get("scaling")
    if not _ok(sc):
        return False
    parts = list(sc.get("partitions") or [])
    cl = sc.get("cluster") if _ok(sc.get("cluster")) else None
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(13, 4.8))
    xs_cluster = len(parts)  # the local-cluster point sits right of the local ones
    for ax, key, title, ylabel in (
            (ax1, "rows_per_s", f"Batch write, {sc.get('rows', 0):,} rows of {sc.get('value_bytes')} B",
             "rows/s (median)"),
            (ax2, "p50_ms", (f"Micro-batch addBatch p50, {sc.get('rows_per_batch', sc.get('rows_per_s', 0)):,} "
                             "rows per batch, 1 s trigger"),
             "ms")):
        for wr in (NOOP, FLUSH, SYNC, EXACTLY):
            ys = [(scale_row(results, wr, n) or {}).get(key) for n in parts]
            if not any(y is not None for y in ys):
                continue
            pts = [(i, y) for i, y in enumerate(ys) if y is not None]
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", color=COLORS[wr], label=LABELS[wr])
            if cl is not None:
                c = (scale_row(results, wr, cluster=True) or {}).get(key)
                if c is not None:
                    ax.plot([xs_cluster], [c], marker="D", markersize=8, markerfacecolor="white",
                            markeredgecolor=COLORS[wr], linestyle="none")
        ticks = [f"{n} partitions" for n in parts]
        if cl is not None:
            ticks.append(f"local-cluster\n{cl.get('partitions')} partitions")
        ax.set_xticks(range(len(ticks)), ticks, fontsize=8)
        ax.set_title(title, fontsize=10)
        ax.set_ylabel(ylabel)
        ax.set_ylim(bottom=0)
        ax.yaxis.set_major_formatter(FuncFormatter(lambda x, _pos: f"{x:,.0f}"))
        ax.grid(axis="y", alpha=0.3)
        ax.legend(fontsize=8)
    loc = sc.get("local") or {}
    meta = results["meta"]
    fig.suptitle(f"How cost grows with Spark partitions ({loc.get('master')}; hollow diamonds: "
                 f"{(cl or {}).get('master', 'local-cluster not run')}) — {meta['mode']} mode, {meta['timestamp']}"
                 + (" (quick: not a measurement)" if meta["mode"] == "quick" else ""), fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True
