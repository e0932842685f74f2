"""Why the sink's per-record cost misses its targets against the flush-writer and the Python engine.

Computed from the same results document as bench/analysis.py: wall time and CPU per record of each
writer, Spark's floor (the no-op writer), the id header's share (``flush-writer-id``), the WAL's own
cost and the produce-cost figures of section 4, and how many cores a write kept busy.
"""

from __future__ import annotations

from typing import Any

from bench.against_spark import _cores, _cpu, _us
from bench.targets import FLUSH, FLUSH_ID, NOOP, SYNC, SYNC_PY, tp_row


def cores_busy(row: dict[str, Any] | None) -> float | None:
    """Average cores kept busy by every process of the run while this writer wrote (CPU s ÷ wall s)."""
    if not row or row.get("cpu_s_per_million") is None or not row.get("median_s"):
        return None
    wall = row.get("durable_median_s") or row["median_s"]  # async: CPU is counted until durable
    return row["cpu_s_per_million"] * row["rows"] / 1e6 / wall


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
