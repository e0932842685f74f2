"""Why each missed target is missed, computed from the same results document.

Every sentence that carries a number takes it from the run being rendered:
the header-only baseline (``flush-writer-id``), the no-op writer (Spark's
floor, in throughput and latency), the Python-engine sink, CPU seconds per
writer, the WAL and produce-cost sections, the scaling section's per-task
figures (from the sink's own batch reports) and the memory split.
A target that is met, or not measured, gets no paragraph.
"""

from __future__ import annotations

import json
import os
from typing import Any

from bench.against_spark import _cores, _cpu, _median_run_split, _ms, _split_text, _us
from bench.against_spark import explain as explain_vs_spark
from bench.targets import (
    ASYNC,
    EXACTLY,
    EXACTLY_NO_RESPLIT,
    FLUSH,
    FLUSH_ID,
    NOOP,
    SCALE_HI,
    SCALE_LO,
    SCALE_WIDE,
    SPARK_KAFKA,
    SYNC,
    SYNC_PY,
    lat_row,
    scale_row,
    tp_row,
)

__all__ = ["FLUSH_ID", "why_missed", "cores_busy"]


def cores_busy(row: dict[str, Any] | None) -> float | None:
    """Average cores kept busy by every process of the run while this writer wrote (CPU s ÷ wall s)."""
    if not row or row.get("cpu_s_per_million") is None or not row.get("median_s"):
        return None
    wall = row.get("durable_median_s") or row["median_s"]  # async: CPU is counted until durable
    return row["cpu_s_per_million"] * row["rows"] / 1e6 / wall


#: A full run of the variant where an async task lends the poll lock from its first chunk.
OVERLAP_VARIANT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results",
                               "20261123T140440-async-overlap.json")


def _overlap_variant() -> str:
    """What the always-overlapping variant measured (its own run), or nothing if that file is gone."""
    try:
        with open(OVERLAP_VARIANT) as f:
            d = json.load(f)
    except (OSError, ValueError):
        return ""
    s, a = tp_row(d, SYNC, 100), tp_row(d, ASYNC, 100)
    la, lf, ln = (lat_row(d, w) for w in (ASYNC, FLUSH, NOOP))
    if not (s and a and a.get("durable_rows_per_s") and la and lf and ln):
        return ""
    p50 = {k: r["add_batch_ms"]["p50"] for k, r in (("a", la), ("f", lf), ("n", ln))}
    return (f" Measured variant (its own full run, {os.path.basename(OVERLAP_VARIANT)}): an async task lending the "
            f"poll lock to the poller from its first chunk reached {a['durable_rows_per_s'] / s['rows_per_s']:.2f} "
            f"here, but its micro-batch p50 was {p50['a'] / p50['f']:.2f} × the flush-writer's "
            f"({p50['a'] - p50['n']:+.0f} ms over the no-op writer): on a CPU-bound worker the poller slows the "
            "task it overlaps. So only a task still writing after 0.5 s lends the lock.")


def _produce_cost(results: dict[str, Any], size: int) -> dict[str, Any] | None:
    wal = results.get("wal")
    if not isinstance(wal, dict) or "error" in wal:
        return None
    return next((r for r in wal.get("produce_vs_sink", []) if r.get("value_bytes") == size), None)


def _header_split(results: dict[str, Any], size: int) -> str:
    """The sync gap split into the id header's part and the rest (WAL, ack tracking, prune)."""
    s, f, fi = tp_row(results, SYNC, size), tp_row(results, FLUSH, size), tp_row(results, FLUSH_ID, size)
    if not (s and f and fi):
        return ""
    rows = s["rows"]
    per = {k: r["median_s"] / rows * 1e6 for k, r in (("sink", s), ("flush", f), ("flush_id", fi))}
    text = (f"In Spark, per record: flush-writer {per['flush']:.2f} µs, the same writer sending the sink's "
            f"`rks-id` header {per['flush_id']:.2f} µs, the sink {per['sink']:.2f} µs. The header alone costs "
            f"{per['flush_id'] - per['flush']:+.2f} µs ({f['median_s'] / fi['median_s']:.2f} × the flush-writer's "
            f"speed); everything else the sink does (WAL write with fsync, ack tracking, prune, reports) costs "
            f"{per['sink'] - per['flush_id']:+.2f} µs (sink ÷ flush-writer-with-header = "
            f"{fi['median_s'] / s['median_s']:.2f}).")
    pc = _produce_cost(results, size)
    if pc and pc.get("produce_header_us") is not None:
        text += (f" Outside Spark (section 4) the same split reads: produce alone {pc['produce_alone_us']:.2f} µs, "
                 f"with the header {pc['produce_header_us']:.2f} µs, the sink path {pc['sink_us']:.2f} µs.")
        if pc.get("produce_no_report_us") is not None:
            text += (f" Without a delivery report per record the plain loop takes {pc['produce_no_report_us']:.2f} "
                     "µs: the reports, which the sink needs to know what is acked and the flush-writer keeps to "
                     f"catch errors, cost {pc['produce_alone_us'] - pc['produce_no_report_us']:+.2f} µs per record "
                     "in both.")
    return text




def _wal_us(results: dict[str, Any], size: int) -> float | None:
    """The WAL's own cost per record (section 4: chunked, fsync, write + ack + prune)."""
    wal = results.get("wal")
    if not isinstance(wal, dict) or "error" in wal:
        return None
    w = next((r for r in wal.get("wal_only", []) if r["design"] == "chunked" and r["value_bytes"] == size
              and r["fsync"]), None)
    return w and w.get("total_with_ack_us")


def _cpu_bound(results: dict[str, Any], *rows: dict[str, Any] | None) -> str:
    """'CPU-bound' sentence when every row's write kept most cores busy; '' otherwise."""
    cores = _cores(results)
    busy = [cores_busy(r) for r in rows]
    if any(b is None for b in busy):
        return ""
    figures = " and ".join(f"{b:.2f}" for b in busy)
    if all(b >= 0.8 * cores for b in busy):  # type: ignore[operator]
        return (f"These writes keep {figures} of the {cores} cores busy (CPU seconds of every process ÷ wall time): "
                "they are CPU-bound, so throughput follows CPU per record. ")
    return (f"These writes keep {figures} of the {cores} cores busy: not CPU-bound throughout, so part of the time "
            "goes to waiting (acks, fsync, scheduling). ")


def _floor(results: dict[str, Any], size: int, *pairs: tuple[str, dict[str, Any]]) -> str:
    """What a writer that writes nothing takes of each writer's time per record (Spark's part)."""
    n = tp_row(results, NOOP, size)
    if not n:
        return ""
    above = ", ".join(f"{name} {_us(r) - _us(n):.2f} µs" for name, r in pairs)
    return (f"A writer that writes nothing takes {_us(n):.2f} µs per record (Spark reading the cached rows and moving "
            f"them to Python as Arrow; the same for every writer); above that floor: {above}. ")


def _sync_vs_flush(results: dict[str, Any], size: int) -> str:
    """Sink sync (native) against the flush-writer without any header: where the sink's extra time goes."""
    s, f, fi, y = (tp_row(results, w, size) for w in (SYNC, FLUSH, FLUSH_ID, SYNC_PY))
    if not (s and f):
        return ""
    text = (f"Wall time per record: flush-writer {_us(f):.2f} µs, sink sync on the native engine {_us(s):.2f} µs "
            f"({_us(s) - _us(f):+.2f} µs). ")
    text += _floor(results, size, ("flush-writer", f), ("sink", s))
    text += _cpu_bound(results, s, f)
    if _cpu(s) is not None and _cpu(f):
        text += (f"CPU per record, all processes: flush-writer {_cpu(f):.2f} µs, sink {_cpu(s):.2f} µs "
                 f"({_cpu(s) / _cpu(f):.2f} ×). ")  # type: ignore[operator]
    if fi:
        text += (f"The id header alone, built per record in Python, costs the flush-writer {_us(fi) - _us(f):+.2f} µs "
                 f"({_us(fi):.2f} µs with it); the native engine formats it in C, but its bytes still pass through "
                 "librdkafka and the broker. ")
    w = _wal_us(results, size)
    if w is not None:
        text += f"The WAL's own work (section 4: write with fsync, ack counting, prune) is {w:.2f} µs per record. "
    if y:
        text += f"On the Python engine the same sink takes {_us(y):.2f} µs per record. "
    pc = _produce_cost(results, size)
    if pc and pc.get("produce_header_us") is not None:
        text += (f"Outside Spark (section 4): produce loop alone {pc['produce_alone_us']:.2f} µs, with the header "
                 f"{pc['produce_header_us']:.2f} µs, the whole sink path {pc['sink_us']:.2f} µs"
                 + (f" (Python engine {pc['sink_python_us']:.2f} µs)" if pc.get("sink_python_us") is not None else "")
                 + ".")
    return text.strip()


def _cpu_split(results: dict[str, Any], size: int) -> str:
    """The sink's CPU per record against the flush-writer's, split into the parts this run measured."""
    s, f, fi, y, n = (tp_row(results, w, size) for w in (SYNC, FLUSH, FLUSH_ID, SYNC_PY, NOOP))
    if not (s and f and _cpu(s) is not None and _cpu(f) is not None):
        return ""
    d = _cpu(s) - _cpu(f)  # type: ignore[operator]
    text = (f"CPU per record, all processes (Spark's JVM, the Python workers, librdkafka's threads, the broker): "
            f"flush-writer {_cpu(f):.2f} µs, sink sync on the native engine {_cpu(s):.2f} µs ({d:+.2f} µs). ")
    if n and _cpu(n) is not None:
        text += (f"A writer that writes nothing spends {_cpu(n):.2f} µs: the Kafka part is {_cpu(f) - _cpu(n):.2f} µs "
                 f"for the flush-writer, {_cpu(s) - _cpu(n):.2f} µs for the sink. ")  # type: ignore[operator]
    if fi and _cpu(fi) is not None:
        text += (f"The flush-writer sending the id header spends {_cpu(fi):.2f} µs ({_cpu(fi) - _cpu(f):+.2f} µs: the "
                 "header, paid in the Python worker, in librdkafka and in the broker, which stores its bytes). ")  # type: ignore[operator]
    w = _wal_us(results, size)
    if w is not None and d > 0:
        text += (f"The WAL's own work is {w:.2f} µs per record of one thread's wall time (fsync waits included, so at "
                 f"most that much CPU): up to {min(w / d, 1.0) * 100:.0f} % of the gap. ")
    if y and _cpu(y) is not None:
        text += f"The Python engine spends {_cpu(y):.2f} µs: the native engine saves {_cpu(y) - _cpu(s):.2f} µs per record."  # type: ignore[operator]
    return text.strip()


def _native_vs_python(results: dict[str, Any]) -> str:
    s, y, n = tp_row(results, SYNC, 100), tp_row(results, SYNC_PY, 100), tp_row(results, NOOP, 100)
    if not (s and y):
        return ""
    text = (f"Wall time per record: Python engine {_us(y):.2f} µs, native engine {_us(s):.2f} µs: the native engine "
            f"removes {_us(y) - _us(s):.2f} µs per record; 1.6 × would need {_us(y) / 1.6:.2f} µs. ")
    if n:
        text += (f"Of that, {_us(n):.2f} µs per record is Spark's floor (a writer that writes nothing), which no engine "
                 f"removes: a sink costing nothing above the floor would be {_us(y) / _us(n):.2f} × the Python engine. ")
    text += _cpu_bound(results, s, y)
    if _cpu(s) and _cpu(y):
        text += (f"CPU per record: Python engine {_cpu(y):.2f} µs, native {_cpu(s):.2f} µs (ratio {_cpu(y) / _cpu(s):.2f}; "  # type: ignore[operator]
                 f"throughput ratio {s['rows_per_s'] / y['rows_per_s']:.2f}). ")
    w = _wal_us(results, 100)
    if w is not None:
        text += f"Both engines pay the WAL's {w:.2f} µs per record (section 4) and the same broker work."
    return text.strip()


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


def _filled_lanes(results: dict[str, Any], lanes: int) -> int:
    """Lanes that can hold records: a lane is a destination partition's, so at most the topic's partitions."""
    tp = (results.get("settings") or {}).get("topic_partitions")
    return min(lanes, int(tp)) if tp else lanes


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
        text += (f"Exactly-once's lane tasks do not multiply with the partitions ({lanes} lanes at any width; the "
                 "lane pass before them runs at most one task per core): what misses the trigger is the tail "
                 f"(p95) of the same per-batch cost as in the explanation of the {SCALE_HI}-partition target.")
    return text.strip()


def _eo_split(results: dict[str, Any], size: int) -> str:
    """Exactly-once's CPU per record by kind of process against sync's, and without the re-split."""
    text = ""
    se, ss = _median_run_split(results, EXACTLY, size), _median_run_split(results, SYNC, size)
    if se and ss:
        text += (f"Where it goes, µs per record (the median run of each): exactly-once {_split_text(se)}; sync "
                 f"{_split_text(ss)}. ")
    e, s, n = (tp_row(results, w, size) for w in (EXACTLY, SYNC, EXACTLY_NO_RESPLIT))
    if e and s and n and n.get("cpu_s_per_million") and e.get("cpu_s_per_million"):
        text += (f"Without the re-split (`exactly_once_lanes=0`: Spark's partitions as lanes, no shuffle; a re-run "
                 f"of a Kafka-sourced batch would then be refused) exactly-once made {n['rows_per_s']:,.0f} rows/s "
                 f"({n['rows_per_s'] / s['rows_per_s']:.2f} × sync) at {n['cpu_s_per_million']:.2f} µs of CPU per "
                 f"record: the re-split (each row's lane computed in a Python Arrow UDF, then the whole batch through "
                 f"Spark's shuffle files) costs {e['cpu_s_per_million'] - n['cpu_s_per_million']:+.2f} µs per record "
                 "of the difference, the transactions the rest. ")
    return text


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
        filled = _filled_lanes(results, lanes)
        waves = -(-lanes // cores)
        text += (f"Exactly-once runs every batch as two Spark stages of Python tasks where Spark's sink runs one stage "
                 f"of JVM tasks: the lane pass (at most one task per core) and {lanes} lane tasks "
                 f"(`exactly_once_lanes`, whatever the Spark partitions), {waves} waves on {cores} cores. A lane is a "
                 f"destination partition's, so with the topic's partitions only {filled} of them hold records and "
                 "run a transaction; the others are empty tasks, which still cost Spark a Python round trip. ")
        if lo_n and hi_n and lo_n.get("p50_ms") is not None and hi_n.get("p50_ms") is not None:
            extra = -(-SCALE_HI // cores) - -(-SCALE_LO // cores)
            per_wave = (hi_n["p50_ms"] - lo_n["p50_ms"]) / extra
            text += (f"From the no-op writer's growth ({extra} more waves of Python tasks from {SCALE_LO} to "
                     f"{SCALE_HI} partitions), a wave of Python tasks costs Spark about {per_wave:.0f} ms here: "
                     f"about {waves * per_wave:.0f} ms for the lane waves before any of their work. ")
            busy = hi_e.get("task_s_busy_p50")
            if busy is not None and hi_e.get("p50_ms"):
                text += (f"A lane task that ran a transaction took {busy * 1000:.0f} ms (p50, the sink's reports: "
                         "begin, produce, the marker offset, commit). ")
    if hi_e.get("task_s_p50") is not None and lo_e.get("task_s_p50") is not None:
        text += (f"Per task (the sink's own reports): {lo_e['task_s_p50'] * 1000:.0f} ms at {SCALE_LO} partitions, "
                 f"{hi_e['task_s_p50'] * 1000:.0f} ms at {SCALE_HI}")
        if hi_e.get("task_s_sum_p50") is not None and hi_e.get("p50_ms"):
            text += (f"; at {SCALE_HI} the tasks add up to {hi_e['task_s_sum_p50'] * 1000:.0f} ms per batch, "
                     f"{hi_e['task_s_sum_p50'] * 1000 / cores:.0f} ms on {cores} cores, of the {hi_e['p50_ms']:.0f} ms "
                     "p50 (the rest: the lane pass, the shuffle, scheduling the tasks and the driver's wait for "
                     "the lanes)")
        text += ". "
    if hi_e.get("kept_up") is False:
        text += (f"At {SCALE_HI} partitions exactly-once's batches took longer than the 1 s trigger, so they ran back "
                 "to back (with the same rows each: the p50 is not inflated by larger batches).")
    return text.strip()


#: The task's occurrence counter (native/rks_hash.c): one 16-byte slot per distinct record of the partition,
#: a power-of-two table at most 70 % full, doubled when full (1024 slots at first).
OCC_SLOT_BYTES, OCC_LOAD, OCC_MIN_CAP = 16, 0.7, 1024


def occurrence_table(rows: int) -> tuple[float, float]:
    """MiB of the occurrence table after ``rows`` distinct records, and at the peak of its last doubling."""
    cap = OCC_MIN_CAP
    while (rows + 1) * 10 > cap * 7:
        cap *= 2
    full = cap * OCC_SLOT_BYTES / 2**20
    return full, full * 1.5 if cap > OCC_MIN_CAP else full


def _occurrence_peak(runs: list[dict[str, Any]]) -> str:
    r0, r1 = runs[0], runs[-1]
    (t0, k0), (t1, k1) = occurrence_table(r0["rows"]), occurrence_table(r1["rows"])
    g = (r1["peak_hwm_kib"] - r0["peak_hwm_kib"]) / 1024
    return (f"The peak grew by {g:.0f} MiB. Content ids (fingerprint + occurrence among equal records, "
            "the same in any row order) need, for the length of a task, a count per distinct record of its "
            "partition: the native counter is an open-addressing table of 16-byte slots, at most 70 % full, "
            f"doubled when full. Computed from those rules: for {r0['rows']:,} rows it is {t0:.0f} MiB ({k0:.0f} MiB while its last doubling "
            f"copies it), for {r1['rows']:,} rows {t1:.0f} MiB ({k1:.0f} MiB while doubling): {k1 - k0:.0f} MiB of "
            f"the {g:.0f} MiB. It is freed when the task ends; it grows with the rows of one partition "
            "(23 to 46 bytes per distinct record, up to 1.5 times that while doubling), not with their size, and "
            "is the price of ids that survive reordering (a partition's rows cannot be numbered by position). "
            "The rest of the growth: the WAL's map pages (below) and allocator slack.")


def _explain(results: dict[str, Any], name: str) -> str:
    """The paragraph for a missed target of the native-engine and earlier groups ('' if none)."""
    text = ""
    if name.startswith("sink sync (native engine, id header on) ÷ flush-writer"):
        text = _sync_vs_flush(results, 1024 if "1024" in name else 100)
    elif name.startswith("CPU seconds per record"):
        text = _cpu_split(results, 1024 if "1024" in name else 100)
    elif name.startswith("sink sync throughput, native ÷ Python"):
        text = _native_vs_python(results)
    elif name.startswith("exactly-once micro-batch p50"):
        text = _scaling(results)
    elif name.startswith(f"exactly-once at {SCALE_WIDE} Spark partitions"):
        text = _eo_wide(results)
    elif name.startswith("sink sync ÷ flush-writer throughput"):
        size = 1024 if "1024" in name else 100
        text = _header_split(results, size)
        f, fi = tp_row(results, FLUSH, size), tp_row(results, FLUSH_ID, size)
        if text and f and fi:
            goal = 0.95 if size == 1024 else 0.90
            text += (" The header is a per-record cost inside confluent-kafka (a dict, a bytes object and "
                     "their conversion into librdkafka headers, then more bytes on the wire and at the broker); "
                     "`produce_batch` would drop it in this client version.")
            if f["median_s"] / fi["median_s"] < goal:
                text += (f" With the header kept, as the target requires, the header alone is already below "
                         f"the {goal:.2f} goal: the rest of the sink would have to cost less than nothing.")
    elif name.startswith("sink async time-to-durable"):
        a, s = tp_row(results, ASYNC, 100), tp_row(results, SYNC, 100)
        cs = cores_busy(s)
        if a and s and cs is not None:
            text = (f"The sync write keeps {cs:.2f} of the machine's cores busy (CPU seconds of every process ÷ "
                    "wall time): the run is CPU-bound, so producing while the task writes the WAL can only hide "
                    f"I/O wait, not CPU. Async spends {a['cpu_s_per_million']:.2f} CPU s per million rows (until "
                    f"durable) against sync's {s['cpu_s_per_million']:.2f}: the records pass from the task thread "
                    "to the poller thread, which share one interpreter lock per worker. Its time to durable "
                    "also counts the prune after the last ack (the benchmark sees durability as an empty WAL)."
                    + _overlap_variant())
    elif name.startswith("sink async p50 micro-batch latency"):
        la, lf, ln = (lat_row(results, w) for w in (ASYNC, FLUSH, NOOP))
        if la and lf and ln:
            half = lf["add_batch_ms"]["p50"] * 0.5
            floor = ln["add_batch_ms"]["p50"]
            text = (f"Half the flush-writer's p50 is {half:.0f} ms, below the {floor:.0f} ms p50 of a writer "
                    "that writes nothing at all: the part of a batch Spark itself takes (scheduling the job, "
                    "moving the rows to Python as Arrow) is more than the ratio leaves. The second half of "
                    f"the target holds when the async p50 is within 20 ms of the no-op's ({la['add_batch_ms']['p50']:.0f} "
                    f"ms against {floor:.0f} ms in this run).")
    elif name.startswith("CPU seconds per million"):
        s, f, fi = tp_row(results, SYNC, 100), tp_row(results, FLUSH, 100), tp_row(results, FLUSH_ID, 100)
        if s and f and fi and fi.get("cpu_s_per_million"):
            text = (f"CPU per million rows: flush-writer {f['cpu_s_per_million']:.2f} s, with the `rks-id` "
                    f"header {fi['cpu_s_per_million']:.2f} s ({fi['cpu_s_per_million'] / f['cpu_s_per_million']:.2f} "
                    f"×), sink {s['cpu_s_per_million']:.2f} s ({s['cpu_s_per_million'] / fi['cpu_s_per_million']:.2f} "
                    "× the writer with the header). The header is paid in the Python worker, in librdkafka's "
                    "threads and in the broker (every record carries the header's bytes); the rest is the WAL "
                    "(Arrow IPC, CRC, fsync) and the ack tracking.")
    elif name.startswith("exactly-once ÷ sink sync"):
        size = 1024 if "1024" in name else 100
        e, s = tp_row(results, EXACTLY, size), tp_row(results, SYNC, size)
        ce, cs = cores_busy(e), cores_busy(s)
        if e and s and ce is not None and cs is not None:
            text = (f"Both writes are CPU-bound ({ce:.2f} and {cs:.2f} cores busy), so throughput follows CPU "
                    f"per record: exactly-once spends {e['cpu_s_per_million']:.2f} s per million rows against "
                    f"{s['cpu_s_per_million']:.2f} s (inverse ratio {s['cpu_s_per_million'] / e['cpu_s_per_million']:.2f}, "
                    f"measured throughput ratio {e['rows_per_s'] / s['rows_per_s']:.2f}). " + _eo_split(results, size)
                    + "What it adds per unit is one transaction (begin, the partitions added to it, the marker "
                    "offset, commit) on its lane's producer, and a read_committed marker read." + _eo_extra(results, size))
    elif name.startswith("exactly-once without the re-split"):
        size = 1024 if "1024" in name else 100
        n, s = tp_row(results, EXACTLY_NO_RESPLIT, size), tp_row(results, SYNC, size)
        sn, ss = _median_run_split(results, EXACTLY_NO_RESPLIT, size), _median_run_split(results, SYNC, size)
        if n and s and n.get("cpu_s_per_million") and s.get("cpu_s_per_million"):
            text = (f"Without the re-split exactly-once spends {n['cpu_s_per_million']:.2f} µs of CPU per record "
                    f"against sync's {s['cpu_s_per_million']:.2f} µs ({n['rows_per_s']:,.0f} against "
                    f"{s['rows_per_s']:,.0f} rows/s). ")
            if sn and ss:
                text += f"By kind of process: exactly-once {_split_text(sn)}; sync {_split_text(ss)}. "
            text += ("Its extra per task is one transaction on the lane's producer (begin, produce, the marker "
                     "offset, commit, each a broker round trip) and a read_committed marker read.")
            text += _eo_extra(results, size)
    elif name.startswith("worker peak memory"):
        mem = results.get("memory") or {}
        runs = mem.get("runs") or []
        if len(runs) >= 2 and runs[0].get("end_rss_parts_kib") and runs[-1].get("end_rss_parts_kib"):
            p0, p1 = runs[0]["end_rss_parts_kib"], runs[-1]["end_rss_parts_kib"]
            ga = (p1["RssAnon"] - p0["RssAnon"]) / p0["RssAnon"]
            text = _occurrence_peak(runs) + " "
            text += (f"After the task, the split of the resident set: anonymous memory (Python, Arrow, librdkafka) "
                    f"{p0['RssAnon'] / 1024:.0f} -> {p1['RssAnon'] / 1024:.0f} MiB ({ga * 100:+.1f} %), "
                    f"file-backed pages {p0['RssFile'] / 1024:.0f} -> {p1['RssFile'] / 1024:.0f} MiB. What "
                    "stays grows in the file-backed part, the pages of the WAL's LMDB map (page cache the kernel "
                    "can drop, not memory the worker allocated)")
            m0, m1 = runs[0].get("wal_map_used_kib"), runs[-1].get("wal_map_used_kib")
            if m0 and m1:
                text += f"; the part of the map ever used went from {m0 / 1024:.0f} to {m1 / 1024:.0f} MiB"
                if m1 > 1.1 * m0:
                    text += (" while only the chunks in flight were live: LMDB reuses freed pages for a "
                             "chunk's overflow pages only as contiguous runs, so a longer partition touches "
                             "more of the map")
            text += ". The records themselves are not kept in memory."
    return text


def why_missed(results: dict[str, Any]) -> list[tuple[str, str]]:
    """(target name, explanation) for every missed target of ``results['targets']``."""
    missed = {t["name"]: t for t in results.get("targets", []) if t["status"] == "missed"}
    out: list[tuple[str, str]] = []
    for name in missed:
        text = explain_vs_spark(results, name) or _explain(results, name)
        if text:
            out.append((name, text))
    return out
