"""Why the exactly-once targets are missed: its cost per task, per record and as Spark partitions grow.

Computed from the same results document as bench/analysis.py: exactly-once against sync in the batch
write (CPU by kind of process, with and without the re-split), the scaling section's per-task figures
(from the sink's own batch reports), the no-op writer's growth and the lanes the run recorded.

The design these paragraphs describe (spark_recoverable_sink/driver/split.py): a record's lane is
Spark's hash of its key (a JVM expression), the batch goes through Spark's shuffle into
``exactly_once_lanes`` partitions (a map stage of JVM tasks, coalesced to the cores), and each lane is a
Python task with one transaction. What that costs is read from the run's figures, never assumed.
"""

from __future__ import annotations

from typing import Any

from bench.against_spark import _cores, _median_run_split, _ms, _split_text
from bench.targets import (
    EXACTLY,
    EXACTLY_NO_RESPLIT,
    FLUSH,
    NOOP,
    SCALE_HI,
    SCALE_LO,
    SCALE_WIDE,
    SPARK_KAFKA,
    SYNC,
    SYNC_PART,
    scale_row,
    tp_row,
)


def _eo_extra(results: dict[str, Any], size: int) -> str:
    """Exactly-once against sync: time per task (one transaction each) in this run."""
    e, s = tp_row(results, EXACTLY, size), tp_row(results, SYNC, size)
    text = ""
    if e and s and e.get("tasks"):
        d = e["median_s"] - s["median_s"]
        text += (f" In the batch write exactly-once took {d:+.2f} s over sync for {e['tasks']} tasks (one transaction "
                 f"each) on {_cores(results)} cores.")
    lo_e, lo_s = scale_row(results, EXACTLY, SCALE_LO), scale_row(results, SYNC, SCALE_LO)
    if lo_e and lo_s and lo_e.get("task_s_p50") and lo_s.get("task_s_p50"):
        text += (f" In the scaling section at {SCALE_LO} partitions a task takes {lo_e['task_s_p50'] * 1000:.0f} ms "
                 f"(exactly-once) against {lo_s['task_s_p50'] * 1000:.0f} ms (sync), median over its micro-batches.")
    return text


def _eo_lanes(results: dict[str, Any]) -> int | None:
    """The lanes the run's exactly-once writer re-split batches into, as recorded (``None``: not recorded)."""
    return ((results.get("scaling") or {}).get("local") or {}).get("eo_lanes")


def _eo_wide(results: dict[str, Any]) -> str:
    """Why exactly-once did not keep up at the widest partition count, from the scaling figures."""
    w, h = scale_row(results, EXACTLY, SCALE_WIDE), scale_row(results, EXACTLY, SCALE_HI)
    k, kh = scale_row(results, SPARK_KAFKA, SCALE_WIDE), scale_row(results, SPARK_KAFKA, SCALE_HI)
    if not w:
        return ""
    text = (f"addBatch p50 / p95 of exactly-once: {_ms(w.get('p50_ms'))} / {_ms(w.get('p95_ms'))} ms at {SCALE_WIDE} "
            f"Spark partitions")
    if h:
        text += f", {_ms(h.get('p50_ms'))} / {_ms(h.get('p95_ms'))} ms at {SCALE_HI}"
    text += " (1 s trigger: a batch over it makes the next one late)"
    if k:
        text += (f"; Spark's Kafka sink {_ms(k.get('p50_ms'))} / {_ms(k.get('p95_ms'))} ms at {SCALE_WIDE}"
                 + (f", {_ms(kh.get('p50_ms'))} / {_ms(kh.get('p95_ms'))} ms at {SCALE_HI}" if kh else ""))
    text += ". "
    lanes = _eo_lanes(results)
    if lanes:
        text += (f"Its Python tasks do not multiply with the partitions: {lanes} lane tasks at any width, after a map "
                 "stage of JVM tasks (the hash of each key and the shuffle write). ")
    p50, p95 = w.get("p50_ms"), w.get("p95_ms")
    if p50 is not None and p95 is not None and p50 <= 1000 < p95:
        text += (f"Its p50 is within the trigger and its p95 is not: {p95 - p50:.0f} ms between them, the batches "
                 "that missed the trigger.")
    return text.strip()


def _eo_split(results: dict[str, Any], size: int) -> str:
    """Exactly-once's CPU per record by kind of process against sync's, and without the re-split."""
    text = ""
    se, ss = _median_run_split(results, EXACTLY, size), _median_run_split(results, SYNC, size)
    if se and ss:
        text += (f"Where it goes, µs per record (the median run of each): exactly-once {_split_text(se)}; sync "
                 f"{_split_text(ss)}. ")
    e, s, n = (tp_row(results, w, size) for w in (EXACTLY, SYNC, EXACTLY_NO_RESPLIT))
    if e and s and n and n.get("cpu_s_per_million") and e.get("cpu_s_per_million") and s.get("cpu_s_per_million"):
        text += (f"With `exactly_once_lanes=0` set (Spark's partitions as lanes, no shuffle) exactly-once made "
                 f"{n['rows_per_s']:,.0f} rows/s ({n['rows_per_s'] / s['rows_per_s']:.2f} × sync) at "
                 f"{n['cpu_s_per_million']:.2f} µs of CPU per record. The default (\"auto\") gives this write the "
                 f"same split (a `write()` of cached rows is never run again: a lane per Spark partition), so "
                 f"the two differ by the rounds' spread, not by a shuffle: "
                 f"{e['cpu_s_per_million'] - n['cpu_s_per_million']:+.2f} µs per record"
                 + _split_delta(results, size, EXACTLY, EXACTLY_NO_RESPLIT) + ". ")
        p = tp_row(results, SYNC_PART, size)
        if p and p.get("cpu_s_per_million") is not None:  # both without a re-split: the transactions' cost
            text += (f"Against sync without its own re-split (`record_ids=\"partition\"`, {p['cpu_s_per_million']:.2f} "
                     f"µs), exactly-once without the re-split spends {n['cpu_s_per_million'] - p['cpu_s_per_million']:+.2f}"
                     " µs per record: its transactions and marker reads. ")
        else:
            text += (f"Against sync ({s['cpu_s_per_million']:.2f} µs, which re-splits by key for its default record "
                     f"ids) it spends {n['cpu_s_per_million'] - s['cpu_s_per_million']:+.2f} µs per record. ")
    return text


def _split_delta(results: dict[str, Any], size: int, a: str, b: str) -> str:
    """`` (Spark's JVM +x, Python +y, the broker +z)``: ``a``'s CPU per record over ``b``'s by kind ('' if unknown)."""
    sa, sb = _median_run_split(results, a, size), _median_run_split(results, b, size)
    if not (sa and sb):
        return ""
    names = {"spark_jvm": "Spark's JVM", "python": "Python processes", "broker": "the broker"}
    return " (" + ", ".join(f"{names.get(k, k)} {sa.get(k, 0) - sb.get(k, 0):+.2f}" for k in names) + ")"


def _scaling(results: dict[str, Any]) -> str:
    sc = results.get("scaling") or {}
    parts = sc.get("partitions") or [SCALE_LO, 16, SCALE_HI]
    cores = _cores(results)
    rows = {w: [scale_row(results, w, n) for n in parts] for w in (NOOP, FLUSH, SYNC, EXACTLY)}

    def p50s(w: str) -> str:
        vals = [r.get("p50_ms") if r else None for r in rows[w]]
        txt = " / ".join("–" if v is None else f"{v:.0f}" for v in vals)
        return txt + (f" ms ({vals[-1] / vals[0]:.2f} ×)" if vals[0] and vals[-1] is not None else " ms")

    lo_e, hi_e = scale_row(results, EXACTLY, SCALE_LO), scale_row(results, EXACTLY, SCALE_HI)
    if not (lo_e and hi_e):
        return ""
    text = (f"addBatch p50 at {' / '.join(map(str, parts))} partitions with the same rows per batch: "
            + "; ".join(f"{w} {p50s(w)}" for w in (NOOP, FLUSH, SYNC, EXACTLY) if any(rows[w])) + ". ")
    lo_n, hi_n = scale_row(results, NOOP, SCALE_LO), scale_row(results, NOOP, SCALE_HI)
    if lo_n and hi_n and lo_n.get("p50_ms") is not None and hi_n.get("p50_ms") is not None:
        g = hi_n["p50_ms"] / lo_n["p50_ms"] if lo_n["p50_ms"] else None
        text += (f"A writer that writes nothing grows by {hi_n['p50_ms'] - lo_n['p50_ms']:+.0f} ms from {SCALE_LO} to "
                 f"{SCALE_HI} tasks per batch on {cores} cores: Spark's own cost per task (scheduling, a Python "
                 "worker round trip, Arrow framing). ")
        if g is not None and g > 2.0:
            text += (f"That floor alone grows {g:.2f} ×: on this machine no writer, however cheap, can stay within "
                     "2 × its 4-partition p50. ")
    lo_s, hi_s = scale_row(results, SYNC, SCALE_LO), scale_row(results, SYNC, SCALE_HI)
    if lo_s and hi_s and None not in (lo_s.get("p50_ms"), hi_s.get("p50_ms"), lo_e.get("p50_ms"), hi_e.get("p50_ms")):
        d_lo, d_hi = lo_e["p50_ms"] - lo_s["p50_ms"], hi_e["p50_ms"] - hi_s["p50_ms"]
        text += (f"Exactly-once over at-least-once sync: {d_lo:+.0f} ms at {SCALE_LO} partitions, {d_hi:+.0f} ms at "
                 f"{SCALE_HI}. ")
    lanes = _eo_lanes(results)
    if lanes == 0:
        text += "This run's exactly-once did not re-split its batches (`exactly_once_lanes=0`). "
    elif lanes:
        waves = -(-lanes // cores)
        text += (f"Exactly-once runs every batch as a map stage of JVM tasks (Spark's hash of each key, the shuffle "
                 f"write) and a stage of {lanes} Python lane tasks (`exactly_once_lanes`, whatever the Spark "
                 f"partitions), {waves} waves on {cores} cores; Spark's sink runs one stage of JVM tasks. ")
        if lo_n and hi_n and lo_n.get("p50_ms") is not None and hi_n.get("p50_ms") is not None:
            extra = -(-SCALE_HI // cores) - -(-SCALE_LO // cores)
            per_wave = (hi_n["p50_ms"] - lo_n["p50_ms"]) / extra
            text += (f"From the no-op writer's growth ({extra} more waves of Python tasks from {SCALE_LO} to "
                     f"{SCALE_HI} partitions), a wave of Python tasks costs Spark about {per_wave:.0f} ms here: "
                     f"about {waves * per_wave:.0f} ms for the lane waves before any of their work. ")
            busy = hi_e.get("task_s_busy_p50")
            if busy is not None and hi_e.get("p50_ms"):
                text += (f"A lane task with records took {busy * 1000:.0f} ms (p50, the sink's reports: begin, "
                         "produce, the marker offset, commit). ")
    if hi_e.get("task_s_p50") is not None and lo_e.get("task_s_p50") is not None:
        text += (f"Per task (the sink's own reports): {lo_e['task_s_p50'] * 1000:.0f} ms at {SCALE_LO} partitions, "
                 f"{hi_e['task_s_p50'] * 1000:.0f} ms at {SCALE_HI}")
        if hi_e.get("task_s_sum_p50") is not None and hi_e.get("p50_ms"):
            text += (f"; at {SCALE_HI} the tasks add up to {hi_e['task_s_sum_p50'] * 1000:.0f} ms per batch, "
                     f"{hi_e['task_s_sum_p50'] * 1000 / cores:.0f} ms on {cores} cores, of the {hi_e['p50_ms']:.0f} ms "
                     "p50 (the rest: the map stage and its shuffle, scheduling the tasks and the driver's wait for "
                     "the lanes)")
        text += ". "
    if hi_e.get("kept_up") is False:
        text += (f"At {SCALE_HI} partitions exactly-once's batches took longer than the 1 s trigger, so they ran back "
                 "to back (with the same rows each: the p50 is not inflated by larger batches).")
    return text.strip()
