"""Why a target against Spark's own Kafka sink is missed, computed from the run's own figures.

Spark's sink writes from the executor's JVM; this sink's tasks run in Python
workers, so every row first crosses to Python as Arrow. The no-op writer (it
reads its rows in Python and writes nothing) measures that crossing; the raw
writer (confluent-kafka's produce loop, no WAL, no id header) the cheapest
Python route to Kafka. Each paragraph sets the sink and Spark's sink against
those two floors.
"""

from __future__ import annotations

from typing import Any

from bench.targets import (
    ASYNC,
    NOOP,
    RAW,
    SCALE_HI,
    SCALE_WIDE,
    SPARK_KAFKA,
    SPARK_KAFKA_ALIKE,
    SYNC,
    lat_row,
    scale_row,
    tp_row,
)

__all__ = ["explain"]


def _us(row: dict[str, Any]) -> float:
    return row["median_s"] / row["rows"] * 1e6


def _cpu(row: dict[str, Any] | None) -> float | None:
    return None if row is None else row.get("cpu_s_per_million")


def _busy(row: dict[str, Any]) -> float | None:
    c = _cpu(row)
    return None if c is None or not row.get("median_s") else c * row["rows"] / 1e6 / row["median_s"]


def _split(s: dict[str, Any], k: dict[str, Any]) -> str:
    """Where each sink's CPU goes per record, by kind of process (the median run of each kind)."""
    ss, sk = s.get("cpu_split_per_million"), k.get("cpu_split_per_million")
    if not (ss and sk):
        return ""

    def one(sp: dict[str, float]) -> str:
        return (f"Spark's JVM {sp.get('spark_jvm', 0):.2f}, Python processes {sp.get('python', 0):.2f}, "
                f"the broker {sp.get('broker', 0):.2f}")

    return (f"Where the CPU goes, µs per record: Spark's sink: {one(sk)} (its Kafka producer runs in Spark's JVM); "
            f"this sink: {one(ss)} (its producer, librdkafka, and the WAL run in the Python workers). ")


def _throughput(results: dict[str, Any], size: int, ref: str, cpu_goal: float | None = None) -> str:
    """Sink sync against Spark's sink (``ref``); ``cpu_goal``: the CPU ratio target instead of 1.10 × throughput."""
    s, k, n, r = (tp_row(results, w, size) for w in (SYNC, ref, NOOP, RAW))
    if not (s and k):
        return ""
    text = f"Wall time per record: Spark's Kafka sink {_us(k):.2f} µs, sink sync {_us(s):.2f} µs. "
    bs, bk = _busy(s), _busy(k)
    if bs is not None and bk is not None:
        text += (f"Cores busy (CPU seconds of every process ÷ wall time): sink {bs:.2f}, Spark's sink {bk:.2f}. ")
    cs, ck = _cpu(s), _cpu(k)
    if cs is not None and ck:
        text += (f"CPU per record, all processes (JVMs, Python workers, librdkafka's threads, the broker): Spark's "
                 f"sink {ck:.2f} µs, sink {cs:.2f} µs. ")
    text += _split(s, k)
    if n and _cpu(n) is not None:
        text += (f"A Python writer that writes nothing spends {_cpu(n):.2f} µs CPU ({_us(n):.2f} µs wall) per record "
                 "moving the rows from the JVM to a Python worker as Arrow and back: a cost Spark's sink, writing "
                 "from the JVM, does not pay. ")
    if r and _cpu(r) is not None:
        text += (f"The raw confluent-kafka produce loop (no WAL, no id header) spends {_cpu(r):.2f} µs CPU "
                 f"({_us(r):.2f} µs wall): ")
        if ck:
            text += f"{_cpu(r) / ck:.2f} × Spark's sink before any of the sink's own work. "  # type: ignore[operator]
    if ck and cs is not None:
        limit = ck * cpu_goal if cpu_goal is not None else ck / 1.1
        what = f"{cpu_goal:.2f} × Spark's CPU" if cpu_goal is not None else "1.10 × Spark's throughput on CPU-bound cores"
        text += f"At {what} the sink would have to spend at most {limit:.2f} µs per record"
        text += (f": {cs - limit:.2f} µs less than it does" if cs > limit else
                 f", which it does ({cs:.2f} µs): what is missing is wall time, not CPU")
        if r and _cpu(r) is not None:
            text += f"; the raw loop alone is {_cpu(r) - limit:+.2f} µs from that"  # type: ignore[operator]
        text += ". "
    if ref == SPARK_KAFKA:
        a = tp_row(results, SPARK_KAFKA_ALIKE, size)
        if a:
            text += (f"With its batching set as librdkafka's, Spark's sink made {a['rows_per_s']:,.0f} rows/s "
                     f"(against {k['rows_per_s']:,.0f} with its defaults).")
    return text.strip()


def _cpu_ratio(results: dict[str, Any], size: int) -> str:
    return _throughput(results, size, SPARK_KAFKA, cpu_goal=0.9)


def _async_p50(results: dict[str, Any]) -> str:
    a, k, n = (lat_row(results, w) for w in (ASYNC, SPARK_KAFKA, NOOP))
    if not (a and k):
        return ""
    pa, pk = a["add_batch_ms"]["p50"], k["add_batch_ms"]["p50"]
    text = f"addBatch p50: sink async {pa:.0f} ms, Spark's Kafka sink {pk:.0f} ms. "
    if n and n["add_batch_ms"]["p50"] is not None:
        pn = n["add_batch_ms"]["p50"]
        text += (f"A Python writer that writes nothing takes {pn:.0f} ms ({pn / pk:.2f} × Spark's sink): the Python "
                 f"workers' part of a batch (a task per partition sent to a worker, the rows as Arrow). Above it, the "
                 f"sink adds {pa - pn:+.0f} ms (WAL write, produce; the acks come after the batch).")
    return text.strip()


def _scale_p50(results: dict[str, Any], partitions: int) -> str:
    s, k, n = (scale_row(results, w, partitions) for w in (SYNC, SPARK_KAFKA, "noop"))
    if not (s and k):
        return ""
    text = (f"At {partitions} Spark partitions, addBatch p50 / p95: sink sync {s['p50_ms']:.0f} / {s['p95_ms']:.0f} "
            f"ms, Spark's Kafka sink {k['p50_ms']:.0f} / {k['p95_ms']:.0f} ms")
    if n and n.get("p50_ms") is not None:
        text += (f", a Python writer that writes nothing {n['p50_ms']:.0f} / {n['p95_ms']:.0f} ms (Spark runs one "
                 "Python task per partition for it; the sink coalesces the batch to one task per core)")
    text += ". "
    if s.get("task_s_p50") is not None:
        text += f"The sink's tasks: p50 {s['task_s_p50'] * 1000:.0f} ms each. "
    return text.strip()


def _memory(results: dict[str, Any]) -> str:
    runs = (results.get("memory") or {}).get("runs") or []
    if len(runs) < 2:
        return ""
    return "Peak RssAnon per run: " + ", ".join(
        f"{r['rows']:,} rows {r['peak_anon_kib'] / 1024:.0f} MiB" for r in runs) + "."


def explain(results: dict[str, Any], name: str) -> str:
    """The paragraph for the missed target ``name`` of the group against Spark's sink ('' if not one of them)."""
    size = 1024 if "1024 B" in name else 100
    if name.startswith("sink sync (WAL, id header) ÷ Spark's Kafka sink"):
        return _throughput(results, size, SPARK_KAFKA_ALIKE if "alike" in name else SPARK_KAFKA)
    if name.startswith("CPU seconds per record, sink sync ÷ Spark's Kafka sink"):
        return _cpu_ratio(results, size)
    if name.startswith("sink async micro-batch p50 ÷ Spark's Kafka sink"):
        return _async_p50(results)
    if name.startswith("at-least-once micro-batch p50 ÷ Spark's Kafka sink"):
        return _scale_p50(results, SCALE_HI)
    if name.startswith(f"at {SCALE_WIDE} Spark partitions"):
        return _scale_p50(results, SCALE_WIDE)
    if name.startswith("Python worker anonymous memory"):
        return _memory(results)
    return ""
