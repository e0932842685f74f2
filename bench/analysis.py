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

from bench.against_spark import _median_run_split, _split_text
from bench.against_spark import explain as explain_vs_spark
from bench.analysis_cost import (  # the sink's cost per record against the flush-writer and the Python engine
    _cpu_split,
    _header_split,
    _native_vs_python,
    _sync_vs_flush,
    cores_busy,
)
from bench.analysis_eo import _eo_extra, _eo_split, _eo_wide, _scaling  # exactly-once
from bench.analysis_ks import explain_ks  # a Kafka → Kafka copy
from bench.targets import (
    ASYNC,
    EXACTLY,
    EXACTLY_NO_RESPLIT,
    FLUSH,
    FLUSH_ID,
    NOOP,
    SCALE_WIDE,
    SYNC,
    lat_row,
    tp_row,
)

__all__ = ["FLUSH_ID", "why_missed", "cores_busy"]


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
    elif name.startswith("exactly-once micro-batch p50") and "Spark's Kafka source" not in name:
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
        text = explain_ks(results, name) or explain_vs_spark(results, name) or _explain(results, name)
        if text:
            out.append((name, text))
    return out
