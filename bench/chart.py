"""The benchmark chart, docs/performance.png: throughput and latency per writer (matplotlib)."""

from __future__ import annotations

import os
import sys
from typing import Any

from bench.targets import ASYNC, EXACTLY, FLUSH, RAW, SYNC, _ok
from bench.targets import tp_row as _tp

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PNG = os.path.join(REPO, "docs", "performance.png")
LABELS = {RAW: "raw (ceiling)", FLUSH: "flush-writer", SYNC: "sink sync", ASYNC: "sink async",
          EXACTLY: "sink exactly-once"}

__all__ = ["chart"]


def chart(results: dict[str, Any], path: str = PNG) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.ticker import FuncFormatter
    except ImportError:
        print("[render] matplotlib not installed: no chart", file=sys.stderr)
        return False
    tp, lat = results.get("throughput"), results.get("latency")
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(13, 4.8))
    writers = [RAW, FLUSH, SYNC, ASYNC, EXACTLY]
    colors = {RAW: "#888888", FLUSH: "#4c72b0", SYNC: "#dd8452", ASYNC: "#55a868", EXACTLY: "#c44e52"}
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


