"""docs/PERFORMANCE.md's section 9: a Kafka → Kafka copy through Spark's Kafka source (bench/kafka_source.py).

Pure: reads the section's results (and its summary, bench/analysis_ks.py), imports no Spark.
"""

from __future__ import annotations

from typing import Any

from bench.render_md import LABELS, _err, _f, _ok, _table

__all__ = ["kafka_source_md", "realtime_md"]


def _spread(s: dict[str, Any] | None, fmt: str = "{:,.0f}") -> str:
    """``median (min–max)`` of a figure over rounds."""
    if not s or s.get("median") is None:
        return "–"
    return f"{_f(s['median'], fmt)} ({_f(s['min'], fmt)}–{_f(s['max'], fmt)})"


def kafka_source_md(w: Any, results: dict[str, Any]) -> None:
    """Section 9: per Spark partition count and writer, trigger p50 / p95 over rounds, and ÷ Spark's own sink."""
    w("## 9. Kafka → Kafka micro-batches (Spark's Kafka source)\n")
    ks = results.get("kafka_source")
    if not _ok(ks):
        w(_err(ks))
        return
    w(f"A copy as users write it: Spark's Kafka source over a topic of {ks['in_partitions']} partitions "
      f"({ks['value_bytes']} B values), `maxOffsetsPerTrigger` {ks['rows_per_trigger']:,}, a "
      f"{ks['trigger_s']:.0f} s trigger, `repartition(N)` to N Spark partitions, then each writer's "
      f"`foreachBatch`. One query per writer and N, {ks['warmup_batches']} warm-up batches not counted, then "
      f"{ks['batches']} measured; the writers' order rotates from round to round ({len(ks['rounds'])} rounds). "
      "Figures are the median over rounds of each query's trigger p50 / p95 (`triggerExecution`), with the "
      "rounds' spread; the ratio to Spark's own sink is taken within each round (both queries ran in it, one after "
      "the other), then its median.\n")
    rows = []
    for r in ks.get("summary") or []:
        rows.append([str(r["partitions"]), LABELS.get(r["writer"], r["writer"]), str(r["rounds"]),
                     _spread(r["trigger_p50_ms"]), _spread(r["trigger_p95_ms"]), _spread(r["add_batch_p50_ms"]),
                     f"{r['kept_up_rounds']} of {r['rounds']}", _spread(r.get("p50_vs_spark_kafka"), "{:.2f}")])
    w(_table(["Spark partitions", "writer", "rounds", "trigger p50 ms", "trigger p95 ms", "addBatch p50 ms",
              "kept up", "p50 ÷ Spark's sink"], rows) + "\n")
    failed = {k: v for r in ks["rounds"] for k, v in (r.get("errors") or {}).items()}
    if failed:
        w("Failed queries (partitions:writer): " + "; ".join(f"`{k}`: {v}" for k, v in sorted(failed.items())) + "\n")
    w("\"Kept up\": the query's trigger p95 within the 1 s trigger. With 10 measured batches the p95 is about the "
      "worst batch: one slow batch in a query is enough to miss it.\n")


def realtime_md(w: Any, results: dict[str, Any]) -> None:
    """Section 9's real-time part: end-to-end latency p50 / p95 per writer over rounds, and the sink ÷ Spark's sink."""
    from bench.kafka_source import RT_LABELS

    rt = results.get("realtime")
    if rt is None:
        return
    w("### Real-time mode (`trigger(realTime=...)`)\n")
    if not _ok(rt):
        w(_err(rt))
        return
    w(f"The same copy in Spark's real-time mode: `trigger(realTime=\"{rt['trigger']}\")`, `outputMode(\"update\")`, "
      f"an input topic of {rt['partitions']} partitions fed at {rt['rows_per_s']:,} records/s ({rt['value_bytes']} B "
      "values carrying their send time), each writer's query reading it from its end. A record's latency is its send "
      "time to the moment a consumer of the output read it (for the floor writer: to its `process` call). "
      f"{rt['warmup_s']:.0f} s of warm-up not counted, then {rt['measure_s']:.0f} s measured; the writers' order "
      f"rotates from round to round ({len(rt['rounds'])} rounds). Figures are the median over rounds of each "
      "query's p50 / p95, with the rounds' spread.\n")
    rows = [[RT_LABELS.get(wr, wr), _spread(s.get("p50"), "{:,.1f}"), _spread(s.get("p95"), "{:,.1f}")]
            for wr, s in (rt.get("summary") or {}).items()]
    w(_table(["writer", "p50 ms", "p95 ms"], rows) + "\n")
    w(f"The sink's p50 ÷ Spark's sink's, round by round: {_spread(rt.get('sink_over_spark_p50'), '{:.2f}')}; "
      f"÷ the floor's: {_spread(rt.get('sink_over_floor_p50'), '{:.2f}')}.\n")
    failed = {f"{r['round']}:{k}": v for r in rt["rounds"] for k, v in (r.get("errors") or {}).items()}
    if failed:
        w("Failed queries (round:writer): " + "; ".join(f"`{k}`: {v}" for k, v in sorted(failed.items())) + "\n")
