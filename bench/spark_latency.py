"""The latency section of the Spark benchmarks: micro-batch durations of a streaming query, per writer.

The query at a fixed offered load (1 s trigger), the gate that ends the
measurement (:class:`_Gate`), the stop between triggers, and the summaries
of Spark's progress events and the sink's own batch reports.
"""

from __future__ import annotations

import os
import shutil
import time
import uuid
from typing import Any, Callable

from . import common
from .spark_bench import ASYNC, LABELS, kafka_columns, log
from .spark_target import make_target


def latency(spark: Any, bootstrap: str, *, rows_per_s: int, sizes: list[int], partitions: int, topic_partitions: int,
            duration_s: float, warmup_batches: int, writers: tuple[str, ...], scratch: str,
            tag: str = "latency", source: str = "rate", max_s: float | None = None) -> dict[str, Any]:
    """Batch durations of a streaming query at a fixed offered load (1 s trigger), per writer.

    ``source="rate"``: rows by the clock (``rows_per_s``), so a writer that
    falls behind gets larger batches; ``"rate-micro-batch"``: exactly
    ``rows_per_s`` rows in every batch whatever the batches take (the same
    rows per batch at any partition count). ``duration_s`` batches are
    measured after ``warmup_batches``, or as many as come within ``max_s``.
    When the measurement ends the query's later batches skip the writer
    (:class:`_Gate`), so the query goes idle and stops between triggers.
    """
    uid = uuid.uuid4().hex[:6]
    results = []
    engines: dict[str, Any] = {}
    for size in sizes:
        for writer in writers:
            name = f"bench-lat-{writer}-{size}-{uid}"
            topic = name
            common.create_topic(bootstrap, topic, topic_partitions)
            wal_dir = os.path.join(scratch, "wal")
            chk = os.path.join(scratch, "chk", name)
            tg = make_target(writer, bootstrap, topic, wal_dir, name)
            q = None
            try:
                if writer not in engines and tg.sink is not None:
                    engines[writer] = tg.engine_check(spark, partitions)
                tg.warm_up(spark, partitions, size)
                if source == "rate-micro-batch":
                    src = (spark.readStream.format("rate-micro-batch").option("rowsPerBatch", rows_per_s)
                           .option("numPartitions", partitions).load())
                else:
                    src = (spark.readStream.format("rate").option("rowsPerSecond", rows_per_s)
                           .option("numPartitions", partitions).load())
                gate = _Gate(tg.foreach_batch())
                q = (kafka_columns(src, "value", size).writeStream.foreachBatch(gate)
                     .option("checkpointLocation", chk).trigger(processingTime="1 second").start())
                end = time.monotonic() + (max_s if max_s is not None else duration_s + warmup_batches * 1.0 + 3.0)
                while time.monotonic() < end and q.isActive:
                    time.sleep(0.2)
                    if len([b for b in gate.written if b >= warmup_batches]) >= int(duration_s):
                        break
                gate.close()  # a batch running now finishes; later ones skip the writer
                if not q.isActive:
                    raise RuntimeError(f"streaming query of {writer} stopped: {q.exception()}")
                t_wait = time.monotonic()
                while time.monotonic() - t_wait < 600 and q.isActive and gate.running:
                    time.sleep(0.05)
                t_wait = time.monotonic()  # the last written batch's progress event comes when its trigger ends
                while (gate.written and time.monotonic() - t_wait < 15 and q.isActive
                       and not any(dict(p).get("batchId") == gate.written[-1] for p in q.recentProgress)):
                    time.sleep(0.05)
                done = set(gate.written)
                progress = [d for d in (dict(p) for p in q.recentProgress) if d.get("batchId") in done]
                ts = time.monotonic()
                between = stop_between_triggers(q)
                t_stop = time.monotonic()
                if t_stop - ts > 10 or not between:
                    log(f"{tag}: stopping the {writer} query took {t_stop - ts:.1f}s "
                        f"({'between triggers' if between else 'during a trigger'})")
                drain, adopted = None, False
                if writer == ASYNC:
                    end_t = tg.wait_durable(60.0)
                    if end_t is None:
                        # A worker died with records in its WAL slot (e.g. a task killed by the
                        # stop): only a later task of the sink adopts them. Run one, as a job would.
                        log(f"{tag}: async sink's WAL not empty 60 s after the stop; running an empty batch "
                            "so that a task adopts the orphaned slot")
                        adopted = True
                        tg.sink.write(kafka_columns(spark.range(0, 0, 1, partitions), "id", size), batch_id=10**9)
                        end_t = tg.wait_durable(300.0)
                    drain = None if end_t is None else end_t - t_stop
                res = summarize_latency(writer, size, rows_per_s, progress, warmup_batches)
                res["drain_after_stop_s"] = drain
                res["stopped_between_triggers"] = between
                res["drain_needed_orphan_adoption"] = adopted
                if tg.sink is not None:
                    res["sink_batches"] = summarize_sink_reports(tg.sink.reports, warmup_batches)
                results.append(res)
                log(f"{tag}: {writer:12s} {size:5d} B: p50 addBatch {res['add_batch_ms']['p50']} ms, "
                    f"p95 {res['add_batch_ms']['p95']} ms, p99 {res['add_batch_ms']['p99']} ms over "
                    f"{res['batches']} batches; kept up: {res['kept_up']}")
            finally:
                if q is not None and q.isActive:
                    q.stop()
                common.delete_topic(bootstrap, topic)
                shutil.rmtree(chk, ignore_errors=True)
    return {"rows_per_s": rows_per_s, "trigger_s": 1.0, "partitions": partitions, "sizes": sizes, "source": source,
            "duration_s": duration_s, "warmup_batches": warmup_batches, "max_s": max_s, "engines": engines,
            "results": results}


class _Gate:
    """A ``foreachBatch`` function passing batches to the writer until :meth:`close`; later ones are skipped.

    Records the batch ids the writer ran (the measured batches come from
    them), and whether a batch is in the writer right now.
    """

    def __init__(self, inner: Callable[[Any, int], None]) -> None:
        self.inner = inner
        self.written: list[int] = []
        self.closed = False
        self.running = False

    def close(self) -> None:
        self.closed = True

    def __call__(self, df: Any, batch_id: int) -> None:
        if self.closed:
            return
        self.running = True
        try:
            self.inner(df, batch_id)
            self.written.append(batch_id)
        finally:
            self.running = False


def summarize_sink_reports(reports: Any, warmup: int) -> dict[str, Any]:
    """What the sink's own batch reports say about the measured batches: task times, worker processes.

    ``batch_s``: the sink's time for the batch on the driver (its Spark job,
    and for exactly-once the wait until every lane is committed);
    ``task_s``: one task's ``write_partition``; ``task_s_sum``: all of a
    batch's task time (divided by the cores, what the tasks take of the batch).
    """
    rs = [r for r in list(reports) if r.batch_id >= warmup and r.rows > 0]
    tasks = [p.seconds for r in rs for p in r.partition_reports]
    busy = [p.seconds for r in rs for p in r.partition_reports if p.rows > 0]  # exactly-once: lanes with records
    sums = [sum(p.seconds for p in r.partition_reports) for r in rs]
    return {"batches": len(rs), "batch_s_p50": common.median([r.seconds for r in rs]),
            "task_s_p50": common.median(tasks), "task_s_p95": common.percentile(tasks, 95),
            "task_s_busy_p50": common.median(busy),
            "busy_tasks_per_batch": common.median([sum(p.rows > 0 for p in r.partition_reports)
                                                   for r in rs]),
            "task_s_sum_p50": common.median(sums), "tasks_per_batch": common.median([len(r.partition_reports) for r in rs]),
            "workers": len({p.pid for r in rs for p in r.partition_reports})}


def stop_between_triggers(q: Any, timeout_s: float = 30.0) -> bool:
    """Stop a query right after a trigger ended, never during one.

    Stopping during a trigger interrupts the running ``foreachBatch`` and
    kills its tasks (and their Python workers). Returns whether the stop
    happened between triggers (False: the query never went idle in time).
    """
    end = time.monotonic() + timeout_s
    seen_active = False
    while time.monotonic() < end and q.isActive:
        active = bool(q.status.get("isTriggerActive"))
        if active:
            seen_active = True
        elif seen_active:  # a trigger just ended: the next one is most of a second away
            q.stop()
            return True
        time.sleep(0.01)
    q.stop()
    return False


def summarize_latency(writer: str, size: int, rows_per_s: int, progress: list[dict[str, Any]],
                      warmup: int) -> dict[str, Any]:
    ps = [p for p in progress if p.get("batchId", 0) >= warmup and p.get("numInputRows", 0) > 0]
    add = [float(p["durationMs"].get("addBatch", 0)) for p in ps]
    trig = [float(p["durationMs"].get("triggerExecution", 0)) for p in ps]
    rows = [int(p["numInputRows"]) for p in ps]

    def pct(xs: list[float]) -> dict[str, float | None]:
        return {"p50": common.percentile(xs, 50), "p95": common.percentile(xs, 95), "p99": common.percentile(xs, 99),
                "max": max(xs) if xs else None}

    mean_rows = sum(rows) / len(rows) if rows else 0.0
    # Kept up: batches stayed about one trigger's worth of rows (a writer that falls
    # behind gets ever larger batches and triggers longer than the interval).
    kept_up = bool(ps) and (common.percentile(trig, 95) or 0) <= 1000.0 and mean_rows <= 1.2 * rows_per_s
    return {"writer": writer, "label": LABELS[writer], "value_bytes": size, "batches": len(ps),
            "rows_per_batch_mean": mean_rows, "add_batch_ms": pct(add), "trigger_ms": pct(trig), "kept_up": kept_up,
            "batch_ids": [p.get("batchId") for p in ps]}
