"""The kafka-source section's figures (bench/kafka_source.py): medians over rounds, and its targets.

Pure: reads the section's results, imports no Spark.
"""

from __future__ import annotations

from typing import Any

from . import common
from .spark_bench import EXACTLY, SPARK_KAFKA

__all__ = ["summarize", "ks_targets"]


def _spread(xs: list[float]) -> dict[str, float | None]:
    return {"median": common.median(xs), "min": min(xs) if xs else None, "max": max(xs) if xs else None}


def summarize(rounds: list[dict[str, Any]], partitions: list[int], writers: tuple[str, ...]) -> list[dict[str, Any]]:
    """Step 3: per (partition count, writer), medians over rounds with their spread; exactly-once ÷ Spark's sink."""
    out = []
    for n in partitions:
        for w in writers:
            got = [r["results"][f"{n}:{w}"] for r in rounds if f"{n}:{w}" in r["results"]]
            p50 = [g["trigger_ms"]["p50"] for g in got if g["trigger_ms"]["p50"] is not None]
            p95 = [g["trigger_ms"]["p95"] for g in got if g["trigger_ms"]["p95"] is not None]
            add50 = [g["add_batch_ms"]["p50"] for g in got if g["add_batch_ms"]["p50"] is not None]
            row = {"partitions": n, "writer": w, "rounds": len(got), "trigger_p50_ms": _spread(p50),
                   "trigger_p95_ms": _spread(p95), "add_batch_p50_ms": _spread(add50),
                   "kept_up_rounds": sum(bool(g["kept_up"]) for g in got)}
            row["failed_rounds"] = sum(f"{n}:{w}" in r.get("errors", {}) for r in rounds)
            if w != SPARK_KAFKA:
                ratios = []
                for r in rounds:  # within each round: both writers ran in it, one after the other
                    a, b = (r["results"].get(f"{n}:{x}", {}).get("trigger_ms", {}).get("p50") for x in (w, SPARK_KAFKA))
                    if a is not None and b:
                        ratios.append(a / b)
                row["p50_vs_spark_kafka"] = _spread(ratios)
            out.append(row)
    return out


def ks_targets(section: dict[str, Any] | None) -> list[tuple[str, str, float | None, str, bool | None, str]]:
    """The section's targets, as ``bench/targets.py``'s ``add`` takes them: (name, goal, measured, text, met, note).

    Per partition count: exactly-once's trigger p50 over Spark's own sink's
    (the median of the ratios taken within each round, ``<= 1.5``), and
    exactly-once's p95 within the 1 s trigger in each round where Spark's
    sink kept up (the worst of those rounds; none: no goal, not judged). A
    round where either writer failed leaves the target not judged.
    """
    if not section or "error" in section or not section.get("summary"):
        return []
    rows = {(r["partitions"], r["writer"]): r for r in section["summary"]}
    src = f"Spark's Kafka source, {section['rows_per_trigger']:,} rows per 1 s trigger"
    out: list[tuple[str, str, float | None, str, bool | None, str]] = []
    for n in section["partitions"]:
        ex, sk = rows.get((n, EXACTLY)), rows.get((n, SPARK_KAFKA))
        v = (ex or {}).get("p50_vs_spark_kafka") or {}
        m = v.get("median")
        text, rounds = "n/a", len(section["rounds"])
        got = sum(1 for r in section["rounds"] if f"{n}:{EXACTLY}" in r["results"] and f"{n}:{SPARK_KAFKA}" in
                  r["results"])
        if m is not None and ex and sk:
            text = (f"{m:.2f} (rounds {v['min']:.2f}–{v['max']:.2f}, {got} of {rounds} rounds; trigger p50 medians "
                    f"{ex['trigger_p50_ms']['median']:.0f} ms vs {sk['trigger_p50_ms']['median']:.0f} ms)")
        out.append((f"exactly-once micro-batch p50 ÷ Spark's own Kafka sink ({src}, {n} Spark partitions)", "<= 1.50",
                    m, text, None if m is None or got < rounds else m <= 1.5,
                    "" if got == rounds else f"{rounds - got} rounds failed or missing: not judged"))
        # p95 judged in each round where Spark's own sink kept up (its p95 within the trigger); none: no goal
        pairs = [(r["results"][f"{n}:{EXACTLY}"], r["results"][f"{n}:{SPARK_KAFKA}"]) for r in section["rounds"]
                 if f"{n}:{EXACTLY}" in r["results"] and f"{n}:{SPARK_KAFKA}" in r["results"]]
        judged = [e["trigger_ms"]["p95"] for e, k in pairs if k["kept_up"] and e["trigger_ms"]["p95"] is not None]
        worst = max(judged) if judged else None
        missing = len(section["rounds"]) - len(pairs)
        text = (f"worst {worst:.0f} ms over the {len(judged)} rounds where Spark's sink kept up"
                if worst is not None else f"Spark's sink kept up in none of {len(pairs)} rounds")
        if ex:
            text += (f"; exactly-once p95 median {ex['trigger_p95_ms']['median']:.0f} ms, kept up in "
                     f"{ex['kept_up_rounds']} of {ex['rounds']} rounds")
        out.append((f"exactly-once p95 within the 1 s trigger wherever Spark's sink keeps up ({src}, {n} Spark "
                     "partitions)", "<= 1000 ms", worst, text + (f"; {missing} rounds failed or missing" if missing else ""),
                     None if worst is None or missing else worst <= 1000.0,
                     "" if judged else "Spark's own sink did not keep up in any round: no goal"))
    return out
