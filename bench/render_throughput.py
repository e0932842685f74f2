"""Section 1 of docs/PERFORMANCE.md: batch-write throughput, every figure with its spread over the rounds.

Then, from the same runs: what the broker received from each writer (requests,
records and partitions per request: bench/broker_watch.py), how each writer
ends a task and what that ending costs (raw ending with ``flush()`` against
raw ending by polling, as the sink does), and what the default
``record_ids="content"`` costs against ``"partition"``.
"""

from __future__ import annotations

from typing import Any

from bench.against_spark import requests_sentence
from bench.analysis_cost import cores_busy
from bench.render_md import ASYNC, LABELS, _engines_text, _err, _f, _ok, _table
from bench.rounds import CPU, SPEED, paired, spread, spread_text
from bench.targets import tp_row as _tp

__all__ = ["throughput_md"]

RAW, RAW_POLL, FLUSH, SYNC, SYNC_PART = "raw", "raw-poll", "flush-writer", "sink-sync", "sink-sync-partition-ids"
SPARK_KAFKA, SPARK_KAFKA_ALIKE = "spark-kafka", "spark-kafka-alike"


def _sp(r: dict[str, Any], key: str, fallback: str, fmt: str = "{:.2f}") -> str:
    """A figure with its rounds' range (``key``: a spread), or the bare ``fallback`` figure of an older file."""
    sp = r.get(key)
    return spread_text(sp, fmt, rounds=False) if sp else _f(r.get(fallback), fmt)


def throughput_md(w: Any, results: dict[str, Any]) -> None:
    """Section 1: per value size, the writers' table; then requests, the end of a task, record ids."""
    w("## 1. Batch-write throughput\n")
    tp = results.get("throughput")
    if not _ok(tp):
        w(_err(tp))
        return
    warm = {r["writer"] for r in tp.get("warmup") or []}
    w("`spark.range(N)` → `key` (the number as text), `value` (the number left-padded to the value size), "
      f"binary, cached and counted before timing; {tp['partitions']} partitions. "
      + (f"First an untimed warm-up round: each of the {len(warm)} writers writes "
         f"{tp['warmup'][0]['rows']:,} cached rows once (the broker's first writes, each writer's first job). "
         if warm else "") +
      f"Then {tp['rounds']} timed rounds, interleaved (round k of every writer before round k+1), the writers' "
      "order rotated by k × writers ÷ rounds places each round; every timed write is preceded by an untimed task "
      "that connects its producer. Time = the Spark job, driver to driver. Each figure is the median over the "
      "rounds with the rounds' range in brackets; \"× raw\" and \"× flush-writer\" are taken round by round.\n")
    for size in tp["sizes"]:
        n = tp["rows_by_size"][str(size)]
        c = tp.get("cache", {}).get(str(size)) or tp.get("cache", {}).get(size) or {}
        w(f"### {size} B values, {n:,} rows\n")
        if c.get("disk_bytes"):
            w(f"**{c['disk_bytes'] / 2**20:.0f} MiB of the cached data spilled to disk.**\n")
        w(_table(["writer", "median s", "rows/s", "MB/s", "× raw", "× flush-writer", "CPU µs/record, run's processes",
                  "CPU µs/record, whole machine", "cores busy", "all rows read back"],
                 _rows(tp, size)) + "\n")
    eng = _engines_text(tp.get("engines"))
    if eng:
        w(eng + "\n")
    w("\"CPU µs/record, run's processes\" = user + system seconds of every process of the run (Spark's JVM, the "
      "Python workers with librdkafka's threads, the broker) per record; \"whole machine\" = the machine's busy "
      "time from `/proc/stat` over the same window, which also holds the kernel's work for the run outside those "
      "processes (page-cache writeback of the WAL's and the broker's files, interrupts) and anything else the "
      "machine ran then. \"Cores busy\" = the run's CPU seconds ÷ the write's wall time: near the machine's core "
      "count the write is CPU-bound. \"flush-writer + rks-id header\" is the flush-writer sending the sink's id "
      "header, built the same way: the header's cost on its own.\n")
    w("\"All rows read back\": the first timed run of each writer was counted by consuming the topic from the "
      "beginning (at-least-once writers may add duplicates, never fewer rows). Every writer checks its own "
      "delivery (raw: nothing left unsent; flush-writer: no delivery error; sink: every record acked), so a "
      "shortfall with a clean writer points at the broker or the read, and is shown as it is, with a second count.\n")
    _requests_md(w, results, tp)
    _task_end_md(w, results, tp)
    _record_ids_md(w, results, tp)


def _rows(tp: dict[str, Any], size: int) -> list[list[str]]:
    rows = []
    for r in [x for x in tp["summary"] if x["value_bytes"] == size]:
        rows.append([LABELS.get(r["writer"], r["writer"]),
                     f"{_f(r['median_s'], '{:.2f}')} ({_f(r['min_s'], '{:.2f}')}–{_f(r['max_s'], '{:.2f}')})",
                     _sp(r, "rows_per_s_spread", "rows_per_s", "{:,.0f}"), _f(r["mb_per_s"], "{:.1f}"),
                     _sp(r, "vs_raw_spread", "vs_raw"), _sp(r, "vs_flush_spread", "vs_flush"),
                     _sp(r, "cpu_spread", "cpu_s_per_million"),
                     _sp(r, "machine_cpu_spread", "machine_cpu_s_per_million"), _f(cores_busy(r), "{:.2f}"),
                     {True: "yes", False: f"**NO: {r.get('read_back_text') or 'fewer read back than written'}**"}.get(
                         r.get("read_back_ok"), "–")])
        if r["writer"] == ASYNC and r.get("acked_at_task_end") is not None:
            rows[-1][0] += f" ({r['acked_at_task_end'] * 100:.0f} % acked when the write returned)"
        if r["writer"] == ASYNC and r.get("durable_median_s"):
            rows.append(["↳ sink async, time to durable in Kafka", _f(r["durable_median_s"], "{:.2f}"),
                         _f(r["durable_rows_per_s"]), _f(r["durable_rows_per_s"] * r["mb_per_s"] / r["rows_per_s"],
                                                          "{:.1f}"),
                         _f(r.get("durable_vs_raw"), "{:.2f}"), _f(r.get("durable_vs_flush"), "{:.2f}"),
                         "", "", "", ""])
    return rows


def _requests_md(w: Any, results: dict[str, Any], tp: dict[str, Any]) -> None:
    """What the broker received from each writer: its own counters over each timed write (JMX)."""
    w("### What the broker received\n")
    err = (tp.get("broker_counters") or {}).get("error")
    rows = [[LABELS.get(r["writer"], r["writer"]), f"{r['value_bytes']}", _f(q["requests_per_s"]),
             _f(q["records_per_request"]), _f(q["partitions_per_request"], "{:.2f}"), _f(q["records_per_entry"])]
            for r in tp["summary"] if (q := r.get("requests"))]
    if not rows:
        w("Not measured in this run" + (f" (the broker's JMX could not be read: `{err}`)" if err else "") + ".\n")
        return
    w("The broker's own counters (JMX, read before and after each timed write: `RequestsPerSec` of Produce, and "
      "the topic's `TotalProduceRequestsPerSec`, one per partition a request carries, and `MessagesInPerSec`), "
      "medians over the rounds. The counters count every ProduceRequest the broker got in the window: "
      "exactly-once's marker records are among them.\n")
    w(_table(["writer", "value B", "ProduceRequests/s", "records per request", "partitions per request",
              "records per partition"], rows) + "\n")
    text = " ".join(t for t in (requests_sentence(results, size) for size in tp["sizes"]) if t)
    if text:
        w(text + "\n")


def _task_end_md(w: Any, results: dict[str, Any], tp: dict[str, Any]) -> None:
    """How each writer ends a task, and what ending by polling instead of ``flush()`` costs (raw-poll ÷ raw)."""
    w("### The end of a task\n")
    w("How each writer waits for its last acks: raw, the flush-writer and Spark's Kafka sink call the producer's "
      "`flush()` (Spark's sink at the end of each task), during which librdkafka (and the Java client) sends what "
      "lingers at once. The sink's sync task polls until every record is acked (`Publisher.wait_finished`, "
      "`spark_recoverable_sink/delivery/publisher.py`, called by `AtLeastOnceTask.finish` in "
      "`task/at_least_once.py`), so its last batches wait their `linger.ms`. \"raw, ending by polling\" is the raw "
      "loop ending the sink's way (`poll(0.05)` until nothing is left); the two raw writers differ only there. A "
      "flush-equivalent for the sink would go in `Publisher.wait_finished`, before its polling loop: a producer "
      "flush bounded by the task's deadline; the package does not do it in this run.\n")
    runs = tp.get("runs") or []
    parts = []
    for size in tp["sizes"]:
        r, p = _tp(results, RAW, size), _tp(results, RAW_POLL, size)
        ratios = paired(runs, RAW_POLL, RAW, size)
        if not (r and p and ratios):
            continue
        d = spread([b["seconds"] - a["seconds"] for a in runs for b in runs if a["writer"] == RAW
                    and b["writer"] == RAW_POLL and a["value_bytes"] == b["value_bytes"] == size
                    and a.get("round") == b.get("round")])
        parts.append(f"at {size} B raw ending by polling made {spread_text(spread(ratios))} × raw's rows/s, "
                     f"{spread_text(d, '{:+.3f}')} s per write of {r.get('tasks') or '?'} tasks")
    if parts:
        w("Measured, round by round: " + "; ".join(parts) + ".\n")


def _record_ids_md(w: Any, results: dict[str, Any], tp: dict[str, Any]) -> None:
    """What the default ``record_ids="content"`` (ids by position in this write) costs against ``"partition"``."""
    runs = tp.get("runs") or []
    parts = []
    for size in tp["sizes"]:
        c, p = _tp(results, SYNC, size), _tp(results, SYNC_PART, size)
        speed, cpu = paired(runs, SYNC, SYNC_PART, size, SPEED), paired(runs, SYNC, SYNC_PART, size, CPU)
        if not (c and p and speed):
            continue
        text = f"at {size} B, content ÷ partition: {spread_text(spread(speed))} × the rows/s"
        if cpu and c.get("cpu_s_per_million") is not None and p.get("cpu_s_per_million") is not None:
            text += (f", {spread_text(spread(cpu))} × the CPU per record ({c['cpu_s_per_million']:.2f} against "
                     f"{p['cpu_s_per_million']:.2f} µs, medians)")
        parts.append(text)
    if not parts:
        return
    w("### Record ids: the default's cost\n")
    w("In this write (`write()` of cached rows, never run again) the default `record_ids=\"content\"` names "
      "records by their position in their Spark partition (no shuffle, nothing hashed per record); "
      "`record_ids=\"partition\"` names them by a fingerprint of their content and an occurrence count in the "
      "scope of their partition. Both sink sync, native engine, round by round: " + "; ".join(parts) + ".\n")
