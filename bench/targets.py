"""The performance targets, evaluated on a results document: each one measured figure, a goal, and its status.

Three groups: at-least-once at Spark's pace (:data:`PACE`), against Spark's
own Kafka sink (:data:`VERSUS_SPARK`) and the native delivery engine's
(:data:`NATIVE`). A status is met, missed or not measured. Ratios compare
writers measured side by side in the same run. A throughput ratio is taken
round by round (bench/rounds.py): the figure is the median of the rounds'
ratios, the target is met only if the goal holds at that median, and the
text gives the rounds' range and how many of them meet the goal (``rounds``
in the target: median, min, max, n, agree, straddles).

Pure: reads a results document (bench/run.py writes them), wherever it is read.
"""

from __future__ import annotations

from typing import Any

from bench.rounds import CPU, SPEED, paired, verdict

__all__ = ["evaluate_targets", "tp_row", "ks_targets", "rounds_text", "PACE", "VERSUS_SPARK", "NATIVE", "GROUPS"]

FLUSH, SPARK_KAFKA, SYNC, EXACTLY = "flush-writer", "spark-kafka", "sink-sync", "sink-exactly-once"
PACE = "at-least-once at Spark's pace"
VERSUS_SPARK = "against Spark's own Kafka sink"
NATIVE = "native delivery engine"
GROUPS = (PACE, VERSUS_SPARK, NATIVE)

#: The throughput targets: (group, name, goal, a, b, size, figure): ``a``'s figure ÷ ``b``'s, round by round.
RATIOS = [
    (PACE, "sink sync ÷ Spark's Kafka sink, throughput (100 B)", ">= 1.00", SYNC, SPARK_KAFKA, 100, SPEED),
    (PACE, "sink sync ÷ Spark's Kafka sink, throughput (1024 B)", ">= 1.10", SYNC, SPARK_KAFKA, 1024, SPEED),
    (PACE, "CPU per record, sink sync ÷ Spark's Kafka sink (100 B, all processes)", "<= 1.00", SYNC, SPARK_KAFKA,
     100, CPU),
    (VERSUS_SPARK, "sink sync ÷ Spark's Kafka sink, throughput (100 B)", ">= 1.10", SYNC, SPARK_KAFKA, 100, SPEED),
    (VERSUS_SPARK, "CPU per record, sink sync ÷ Spark's Kafka sink (100 B, all processes)", "<= 0.90", SYNC,
     SPARK_KAFKA, 100, CPU),
    (VERSUS_SPARK, "CPU per record, sink sync ÷ Spark's Kafka sink (1024 B, all processes)", "<= 0.90", SYNC,
     SPARK_KAFKA, 1024, CPU),
    (NATIVE, "sink sync (WAL, id header) ÷ flush-writer (no WAL, no header), throughput (100 B)", ">= 1.00", SYNC,
     FLUSH, 100, SPEED),
    (NATIVE, "sink sync (WAL, id header) ÷ flush-writer (no WAL, no header), throughput (1024 B)", ">= 1.00", SYNC,
     FLUSH, 1024, SPEED),
    (NATIVE, "CPU per record, sink sync ÷ flush-writer (100 B, all processes)", "<= 1.00", SYNC, FLUSH, 100, CPU),
    (NATIVE, "CPU per record, sink sync ÷ flush-writer (1024 B, all processes)", "<= 1.00", SYNC, FLUSH, 1024, CPU),
    (NATIVE, "exactly-once ÷ sink sync, throughput (100 B)", ">= 0.90", EXACTLY, SYNC, 100, SPEED),
    (NATIVE, "exactly-once ÷ sink sync, throughput (1024 B)", ">= 0.90", EXACTLY, SYNC, 1024, SPEED),
]


def _ok(section: Any) -> bool:
    return isinstance(section, dict) and "error" not in section


def tp_row(results: dict[str, Any], writer: str, size: int) -> dict[str, Any] | None:
    """The throughput summary row of ``writer`` at ``size`` bytes, if measured."""
    tp = results.get("throughput")
    if not _ok(tp):
        return None
    return next((r for r in tp["summary"] if r["writer"] == writer and r["value_bytes"] == size), None)


def _r(v: float, goal: float) -> str:
    """A ratio with 2 decimals, or 3 where 2 would print the goal itself (0.897 is not "0.90")."""
    return f"{v:.3f}" if f"{v:.2f}" == f"{goal:.2f}" and v != goal else f"{v:.2f}"


def rounds_text(v: dict[str, Any], goal: float) -> str:
    """``rounds 1.02–1.31, 4 of 5 meet the goal`` (one round: ``1 round``)."""
    if v["n"] < 2:
        return "1 round"
    return f"rounds {_r(v['min'], goal)}–{_r(v['max'], goal)}, {v['agree']} of {v['n']} meet the goal"


def _figure_text(row: dict[str, Any], kind: str) -> str:
    if kind == CPU:
        v = row.get("cpu_s_per_million")
        return "–" if v is None else f"{v:.2f} µs per record"
    return f"{row['rows_per_s']:,.0f} rows/s"


def _ratio(results: dict[str, Any], goal_text: str, a: str, b: str, size: int,
           kind: str) -> tuple[float | None, str, bool | None, dict[str, Any] | None]:
    """(measured, text, met, rounds) of ``a`` ÷ ``b``: the median of the per-round ratios, and their spread."""
    op, x = goal_text.split()
    goal = float(x)
    ra, rb = tp_row(results, a, size), tp_row(results, b, size)
    if not (ra and rb):
        return None, "n/a", None, None
    v = verdict(paired(results["throughput"]["runs"], a, b, size, kind),
                (lambda r: r >= goal) if op == ">=" else (lambda r: r <= goal))
    if v is None:
        return None, "n/a", None, None
    text = (f"{_r(v['median'], goal)} ({rounds_text(v, goal)}; medians {_figure_text(ra, kind)} vs "
            f"{_figure_text(rb, kind)})")
    return v["median"], text, v["met"], v


def ks_targets(section: dict[str, Any] | None) -> list[tuple[str, str, float | None, str, bool | None, str]]:
    """The kafka-source section's targets: (name, goal, measured, text, met, note) per partition count.

    Exactly-once's trigger p50 over Spark's own sink's (the median of the
    ratios taken within each round, ``<= 1.5``), and exactly-once's p95 within
    the 1 s trigger in each round where Spark's sink kept up (the worst of
    those rounds; none: no goal, not judged). A round where either writer
    failed leaves the target not judged.
    """
    if not _ok(section) or not section.get("summary"):  # type: ignore[union-attr]
        return []
    assert section is not None
    rows = {(r["partitions"], r["writer"]): r for r in section["summary"]}
    src = f"Spark's Kafka source, {section['rows_per_trigger']:,} rows per 1 s trigger"
    out: list[tuple[str, str, float | None, str, bool | None, str]] = []
    rounds = len(section["rounds"])
    for n in section["partitions"]:
        ex, sk = rows.get((n, EXACTLY)), rows.get((n, SPARK_KAFKA))
        v = (ex or {}).get("p50_vs_spark_kafka") or {}
        m = v.get("median")
        pairs = [(r["results"][f"{n}:{EXACTLY}"], r["results"][f"{n}:{SPARK_KAFKA}"]) for r in section["rounds"]
                 if f"{n}:{EXACTLY}" in r["results"] and f"{n}:{SPARK_KAFKA}" in r["results"]]
        text = "n/a"
        if m is not None and ex and sk:
            text = (f"{m:.2f} (rounds {v['min']:.2f}–{v['max']:.2f}, {len(pairs)} of {rounds} rounds; trigger p50 "
                    f"medians {ex['trigger_p50_ms']['median']:.0f} ms vs {sk['trigger_p50_ms']['median']:.0f} ms)")
        out.append((f"exactly-once micro-batch p50 ÷ Spark's own Kafka sink ({src}, {n} Spark partitions)", "<= 1.50",
                    m, text, None if m is None or len(pairs) < rounds else m <= 1.5,
                    "" if len(pairs) == rounds else f"{rounds - len(pairs)} rounds failed or missing: not judged"))
        judged = [e["trigger_ms"]["p95"] for e, k in pairs if k["kept_up"] and e["trigger_ms"]["p95"] is not None]
        worst = max(judged) if judged else None
        missing = rounds - len(pairs)
        text = (f"worst {worst:.0f} ms over the {len(judged)} rounds where Spark's sink kept up"
                if worst is not None else f"Spark's sink kept up in none of {len(pairs)} rounds")
        if ex:
            text += (f"; exactly-once p95 median {ex['trigger_p95_ms']['median']:.0f} ms, kept up in "
                     f"{ex['kept_up_rounds']} of {ex['rounds']} rounds")
        out.append((f"exactly-once p95 within the 1 s trigger wherever Spark's sink keeps up ({src}, {n} Spark "
                     "partitions)", "<= 1000 ms", worst, text + f"; {missing} rounds failed or missing" * bool(missing),
                     None if worst is None or missing else worst <= 1000.0,
                     "" if judged else "Spark's own sink did not keep up in any round: no goal"))
    return out


def _memory_target(mem: Any) -> tuple[str, str, float | None, str, bool | None, str]:
    """Python worker anonymous memory from the smallest to the largest partition of the memory section."""
    name = "Python worker anonymous memory (RssAnon) from 1M to 100M rows in one partition (100 B)"
    v = mem.get("anon_growth") if _ok(mem) else None
    if v is None or len(mem["runs"]) < 2:
        return name, "flat within 10 %", None, "n/a", None, ""
    r0, r1 = mem["runs"][0], mem["runs"][-1]
    sizes = f"{r0['rows']:,} -> {r1['rows']:,} rows"
    text = (f"{v * 100:+.1f} % ({r0['peak_anon_kib'] / 1024:.0f} -> {r1['peak_anon_kib'] / 1024:.0f} MiB RssAnon; "
            f"peak RSS {r0['peak_hwm_kib'] / 1024:.0f} -> {r1['peak_hwm_kib'] / 1024:.0f} MiB, {sizes})")
    note = f"quick mode measured {sizes}" if (r0["rows"], r1["rows"]) != (1_000_000, 100_000_000) else ""
    return name, "flat within 10 %", v, text, abs(v) <= 0.10, note


def evaluate_targets(results: dict[str, Any]) -> list[dict[str, Any]]:
    """Every target of the sections the run holds, in page order, each with its figure and its status."""
    out: list[dict[str, Any]] = []

    def add(group: str, name: str, goal: str, measured: float | None, text: str, ok: bool | None, note: str = "",
            rounds: dict[str, Any] | None = None) -> None:
        status = "not measured" if measured is None or ok is None else ("met" if ok else "missed")
        out.append({"name": name, "goal": goal, "measured": measured, "measured_text": text, "status": status,
                    "note": note, "group": group, **({"rounds": rounds} if rounds else {})})

    for group, name, goal, a, b, size, kind in RATIOS if "throughput" in results else ():
        measured, text, ok, rounds = _ratio(results, goal, a, b, size, kind)
        add(group, name, goal, measured, text, ok, rounds=rounds)
    if "memory" in results:
        add(VERSUS_SPARK, *_memory_target(results["memory"]))
    for target in ks_targets(results.get("kafka_source")):
        add(NATIVE, *target)
    return out
