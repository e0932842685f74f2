"""The throughput section's summary rows: per writer and value size, medians with their spread over the rounds.

Every figure keeps its rounds' spread (bench/rounds.py): time, rows/s, CPU per
record (the process tree and the whole machine), and the ratios to raw and to
the flush-writer taken round by round. Also the request-level figures the
broker counted (bench/broker_watch.py), median over the rounds.
"""

from __future__ import annotations

import statistics
from typing import Any

from .rounds import CPU, MACHINE_CPU, SPEED, paired, per_round, spread
from .spark_bench import ASYNC, FLUSH, LABELS, RAW

__all__ = ["summarize_throughput"]

REQUEST_KEYS = ("requests", "entries", "records", "requests_per_s", "records_per_request", "partitions_per_request",
                "records_per_entry")


def _median(xs: list[float]) -> float | None:
    return statistics.median(xs) if xs else None


def _cpu_per_million(rs: list[dict[str, Any]]) -> float | None:
    """Median CPU seconds (all processes) per million rows of these runs."""
    return _median([r["cpu_s"] / r["rows"] * 1e6 for r in rs if r.get("cpu_s") is not None])


def _cpu_split_per_million(rs: list[dict[str, Any]]) -> dict[str, float] | None:
    """Per kind of process (Spark's JVM, Python, broker): median CPU seconds per million rows of these runs."""
    splits = [(r["cpu_split"], r["rows"]) for r in rs if r.get("cpu_split")]
    if not splits:
        return None
    return {k: round(statistics.median([sp[k] / rows * 1e6 for sp, rows in splits]), 3) for k in splits[0][0]}


def _machine(rs: list[dict[str, Any]], key: str) -> float | None:
    """Median whole-machine CPU seconds (``busy``, ``kernel`` or ``iowait``) per million rows of these runs."""
    return _median([r["machine_cpu"][key] / r["rows"] * 1e6 for r in rs
                    if (r.get("machine_cpu") or {}).get(key) is not None])


def _million(sp: dict[str, Any] | None) -> dict[str, Any] | None:
    """A spread of per-record seconds as seconds per million records."""
    return None if sp is None else {k: (v * 1e6 if k != "n" else v) for k, v in sp.items()}


def _requests(rs: list[dict[str, Any]]) -> dict[str, float] | None:
    """The broker's request-level figures of these runs: the median of each over the runs that have them."""
    figs = [r["requests"] for r in rs if r.get("requests")]
    if not figs:
        return None
    return {k: statistics.median([f[k] for f in figs]) for k in REQUEST_KEYS if all(k in f for f in figs)}


def summarize_throughput(runs: list[dict[str, Any]], writers: tuple[str, ...], sizes: list[int]) -> list[dict[str, Any]]:
    """One row per writer and value size (see the module's docstring)."""
    out = []
    for size in sizes:
        med = {w: m for w in writers
               if (m := _median([r["seconds"] for r in runs if r["writer"] == w and r["value_bytes"] == size]))}
        for w in writers:
            rs = [r for r in runs if r["writer"] == w and r["value_bytes"] == size]
            if not rs:
                continue
            rows, payload = rs[0]["rows"], rs[0]["payload_bytes"]
            m = med[w]
            row: dict[str, Any] = {
                "writer": w, "rows": rows, "label": LABELS[w], "value_bytes": size, "runs": len(rs), "median_s": m,
                "min_s": min(r["seconds"] for r in rs), "max_s": max(r["seconds"] for r in rs),
                "rows_per_s": rows / m, "mb_per_s": payload / m / 1e6,
                "rows_per_s_spread": spread(list(per_round(runs, w, size, SPEED).values())),
                "vs_raw": (med[RAW] / m) if RAW in med else None,
                "vs_flush": (med[FLUSH] / m) if FLUSH in med else None,
                "vs_raw_spread": spread(paired(runs, w, RAW, size)) if RAW in med else None,
                "vs_flush_spread": spread(paired(runs, w, FLUSH, size)) if FLUSH in med else None,
                "cpu_s_per_million": _cpu_per_million(rs),
                "cpu_spread": _million(spread(list(per_round(runs, w, size, CPU).values()))),
                "cpu_split_per_million": _cpu_split_per_million(rs),
                "machine_cpu_s_per_million": _machine(rs, "busy"),
                "machine_cpu_spread": _million(spread(list(per_round(runs, w, size, MACHINE_CPU).values()))),
                "machine_kernel_s_per_million": _machine(rs, "kernel"),
                "iowait_s_per_million": _machine(rs, "iowait"),
                "requests": _requests(rs),
                "tasks": rs[0]["report"].get("tasks"),
                "workers": max((r["report"].get("workers") or 0) for r in rs) or None,
            }
            flush_cpu = _cpu_per_million([r for r in runs if r["writer"] == FLUSH and r["value_bytes"] == size])
            row["cpu_vs_flush"] = (row["cpu_s_per_million"] / flush_cpu
                                   if row["cpu_s_per_million"] is not None and flush_cpu else None)
            if w == ASYNC:
                dm = _median([r["durable_seconds"] for r in rs if r["durable_seconds"] is not None])
                row["durable_median_s"] = dm
                row["durable_rows_per_s"] = rows / dm if dm else None
                row["durable_vs_raw"] = (med[RAW] / dm) if (RAW in med and dm) else None
                row["durable_vs_flush"] = (med[FLUSH] / dm) if (FLUSH in med and dm) else None
                row["acked_at_task_end"] = _median([r["report"]["acked"] / r["rows"] for r in rs
                                                    if r["report"].get("acked") is not None])
            _read_back(row, rs)
            out.append(row)
    return out


def _read_back(row: dict[str, Any], rs: list[dict[str, Any]]) -> None:
    """``read_back_ok`` (and the text of a shortfall) from the runs that were read back."""
    checks = [r for r in rs if "read_back" in r]
    if not checks:
        return
    row["read_back_ok"] = all(r["read_back_ok"] for r in checks)
    bad = [r for r in checks if not r["read_back_ok"]]
    if bad:
        row["read_back_text"] = "; ".join(
            f"{r['read_back']:,} of {r['rows']:,} read back"
            + (f", {r['read_back_again']:,} on a second read" if "read_back_again" in r else "")
            + (f", {r['read_back_uncommitted']:,} read_uncommitted" if "read_back_uncommitted" in r else "")
            for r in bad)
