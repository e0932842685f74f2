"""The kafka-source section's figures (bench/kafka_source.py): medians over rounds, and its targets.

Pure: reads the section's results, imports no Spark.
"""

from __future__ import annotations

from typing import Any

from . import common
from .spark_bench import EXACTLY, SPARK_KAFKA, SYNC

__all__ = ["summarize", "ks_targets", "explain_ks"]


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


def _measured(section: dict[str, Any], n: int, w: str) -> list[dict[str, float]]:
    """Every measured batch of the ``n``-partition query of ``w``, over the rounds: Spark's trigger and addBatch,
    and for the sink the seconds of its ``write()`` and tasks; ``hops``: tasks in another worker than their
    partition's (lane's) task of the batch before."""
    out = []
    for r in section["rounds"]:
        g = r["results"].get(f"{n}:{w}")
        if not g:
            continue
        phases = {int(k): v for k, v in (g.get("phases_each_ms") or {}).items()}
        sink = {int(k): v for k, v in (g.get("sink_each") or {}).items()}
        last: dict[int, int] = {}
        hops: dict[int, int] = {}
        for b in sorted(sink):  # warm-up batches included: a measured batch's hop is against the batch before
            hops[b] = sum(1 for part, pid, _rows, _s in sink[b]["tasks"] if last.get(part, pid) != pid)
            last.update({part: pid for part, pid, _rows, _s in sink[b]["tasks"]})
        for b in g.get("batch_ids") or []:
            ph = phases.get(b)
            if not ph or "triggerExecution" not in ph:
                continue
            row = {"trigger": ph["triggerExecution"], "add": ph.get("addBatch", 0.0)}
            if b in sink:
                tasks = sink[b]["tasks"]
                busy = [s for _p, _pid, rows, s in tasks if rows > 0]
                row.update({"sink": sink[b]["s"] * 1000, "tasks": len(tasks), "busy": len(busy),
                            "task": (common.median(busy) or 0.0) * 1000, "task_sum": sum(busy) * 1000,
                            "hops": hops.get(b, 0)})
            out.append(row)
    return out


def _med(rows: list[dict[str, float]], key: str) -> float:
    return common.median([r[key] for r in rows if key in r]) or 0.0


def explain_ks(results: dict[str, Any], name: str) -> str:
    """Why a missed target of the kafka-source section is missed, from the section's own figures ('' if none)."""
    section = results.get("kafka_source")
    if not section or not section.get("rounds") or "Spark's Kafka source" not in name:
        return ""
    n = next((p for p in section["partitions"] if f", {p} Spark partitions" in name), None)
    ex, sk = _measured(section, n, EXACTLY), _measured(section, n, SPARK_KAFKA)
    sy = _measured(section, n, SYNC)
    if n is None or not ex or not sk or "sink" not in ex[0]:
        return ""  # (a run from before the section recorded the sink's reports)
    cores = int((results.get("settings") or {}).get("cores") or 2)
    t_e, a_e, t_s, a_s = (_med(ex, "trigger"), _med(ex, "add"), _med(sk, "trigger"), _med(sk, "add"))
    text = (f"From this section's {len(ex)} measured batches of each query at {n} Spark partitions (medians): "
            f"Spark's sink's trigger {t_s:.0f} ms = its write job (addBatch) {a_s:.0f} + Spark's steps around it "
            f"(offsets, planning, the commit log) {t_s - a_s:.0f}; exactly-once's {t_e:.0f} = {a_e:.0f} + "
            f"{t_e - a_e:.0f}. ")
    lanes, busy, task, tsum, sink = (_med(ex, k) for k in ("tasks", "busy", "task", "task_sum", "sink"))
    text += (f"Exactly-once's `write()` took {sink:.0f} ms: {lanes:.0f} lane tasks ({busy:.0f} with records, "
             f"{task:.0f} ms each: produce, the transaction's commit with its marker), {tsum:.0f} ms of task time, "
             f"{tsum / cores:.0f} ms on {cores} cores; the other {sink - tsum / cores:.0f} ms are Spark's: the "
             "Kafka read and the repartition shuffle (Spark's sink runs them too, inside its "
             f"{a_s:.0f} ms), the lane shuffle, scheduling the lane stage and the driver's wait. ")
    text += (f"Between addBatch and `write()`, {a_e - sink:.0f} ms are outside the sink's own timing (Spark's call "
             "of the `foreachBatch` function, the sink's steps after its batch report)")
    if sy and "sink" in sy[0]:
        text += (f"; at-least-once sync, in the same rounds: trigger {_med(sy, 'trigger'):.0f} ms, addBatch "
                 f"{_med(sy, 'add'):.0f}, `write()` {_med(sy, 'sink'):.0f} (so {_med(sy, 'add') - _med(sy, 'sink'):.0f} "
                 f"outside it), {_med(sy, 'tasks'):.0f} tasks of {_med(sy, 'task'):.0f} ms")
    hopped, stayed = [r for r in ex if r.get("hops")], [r for r in ex if not r.get("hops")]
    text += (f". In {len(hopped)} of exactly-once's {len(ex)} batches a lane task ran in another Python worker than "
             "its lane's task the batch before (Spark gives a task whichever idle worker it finds first), so it built a "
             "new producer, ran `init_transactions` (fencing the lane's producer in the other worker), swept (a "
             "transaction over each partition of the topic and the marker topic, aborted) and read its marker")
    if hopped and stayed:
        text += (f": trigger p50 {_med(hopped, 'trigger'):.0f} ms with such a hop, {_med(stayed, 'trigger'):.0f} ms "
                 f"without ({_med(stayed, 'trigger') / t_s:.2f} × Spark's sink's), lane tasks "
                 f"{_med(hopped, 'task'):.0f} against {_med(stayed, 'task'):.0f} ms")
    text += ". "
    if "p95" in name:
        slow = [r for r in ex if r["trigger"] > 1000.0]
        fast = [r for r in ex if r["trigger"] <= 1000.0]
        text += (f"{len(slow)} of exactly-once's {len(ex)} batches took longer than the 1 s trigger (Spark's sink: "
                 f"{sum(r['trigger'] > 1000.0 for r in sk)} of {len(sk)}). ")
        if slow:
            text += (f"Those took {_med(slow, 'trigger'):.0f} ms (trigger p50), their `write()` {_med(slow, 'sink'):.0f} "
                     f"ms and lane tasks {_med(slow, 'task'):.0f} ms, against {_med(fast, 'trigger'):.0f}, "
                     f"{_med(fast, 'sink'):.0f} and {_med(fast, 'task'):.0f} ms for the others; "
                     f"{sum(1 for r in slow if r.get('hops'))} of the slow and "
                     f"{sum(1 for r in fast if r.get('hops'))} of the others had a lane task that moved to another "
                     "worker. ")
    else:
        goal = 1.5 * t_s
        text += (f"At 1.5 × Spark's sink, exactly-once's trigger would be at most {goal:.0f} ms: {t_e - goal:.0f} ms "
                 "less than it took.")
    return text.strip()
