"""The kafka-source section: micro-batch latency of a Kafka → Kafka copy as users write it, per writer, in rounds.

Spark's Kafka source reads a prefilled input topic (``in_partitions``
partitions) at ``rows_per_trigger`` rows a trigger (``maxOffsetsPerTrigger``,
1 s trigger); the rows are repartitioned to ``partitions`` Spark partitions
(a shuffle, as a query with a join or an aggregation has) and written by the
writer in ``foreachBatch``. Each writer's query reads the same input from the
start, so every batch of every writer holds the same rows.

Steps of :func:`kafka_source_latency`:

1. the input topic, filled once with (warm-up + measured + 1) batches' rows:
   the last measured batch never reads to the end of the log (a read that
   reaches it waits ``fetch.max.wait.ms`` per input partition for more:
   every writer's last batch took 2 s more, and made every p95);
2. for each round, each partition count, each writer (order rotated each
   round): a fresh output topic, the writer's untimed warm-up, then a query
   of ``warmup_batches`` + ``batches`` triggers; its measured batches'
   ``triggerExecution`` and ``addBatch`` durations from Spark's progress,
   every step of each trigger, and the sink's own reports (its time in
   ``write()``, each task's time and worker);
3. per (partition count, writer): the median over rounds of each round's
   p50 and p95, with their spread; exactly-once's p50 over Spark's own
   sink's, taken round by round (both in the same round), median and spread.

Runs in the benchmark's SparkSession (bench/run_spark.py), whose class path
has Spark's Kafka connector (the source and Spark's own sink).
"""

from __future__ import annotations

import os
import shutil
import time
import uuid
from typing import Any

from . import common
from .analysis_ks import summarize
from .spark_bench import EXACTLY, SPARK_KAFKA, SYNC, log
from .spark_latency import _Gate, stop_between_triggers, summarize_latency
from .spark_target import make_target

__all__ = ["kafka_source_latency", "KS_WRITERS"]

KS_WRITERS = (SPARK_KAFKA, SYNC, EXACTLY)


def _fill(bootstrap: str, topic: str, rows: int, partitions: int, value_bytes: int) -> None:
    """Step 1: ``rows`` records, key = row number, spread evenly over the input topic's partitions."""
    from confluent_kafka import Producer

    p = Producer({**common.producer_conf(bootstrap), "linger.ms": 20, "queue.buffering.max.messages": 500_000})
    failed: list[Any] = []
    for i in range(rows):
        key = str(i).encode()
        while True:
            try:
                p.produce(topic, key.rjust(value_bytes, b"v"), key, partition=i % partitions,
                          on_delivery=lambda err, _m: failed.append(err) if err is not None else None)
                break
            except BufferError:
                p.poll(0.05)
    left = p.flush(120)
    if left or failed:
        raise RuntimeError(f"input topic {topic}: {left} records not acked, {len(failed)} failed ({failed[:1]})")


def _sink_each(reports: Any, done: set[int]) -> dict[int, dict[str, Any]]:
    """Per batch the writer ran: the sink's seconds in ``write()`` and each task's (partition, worker pid, rows,
    seconds): for exactly-once, a lane task each."""
    return {r.batch_id: {"s": r.seconds, "tasks": [[p.partition, p.pid, p.rows, round(p.seconds, 4)]
                                                   for p in r.partition_reports]}
            for r in list(reports) if r.batch_id in done}


def _one_query(spark: Any, bootstrap: str, in_topic: str, writer: str, partitions: int, rows_per_trigger: int,
               value_bytes: int, batches: int, warmup_batches: int, topic_partitions: int, scratch: str,
               max_s: float) -> dict[str, Any]:
    """Step 2 for one writer: its query over the whole input; the measured batches' figures."""
    name = f"bench-ks-{writer}-{partitions}-{uuid.uuid4().hex[:6]}"
    common.create_topic(bootstrap, name, topic_partitions)
    chk = os.path.join(scratch, "chk", name)
    tg = make_target(writer, bootstrap, name, os.path.join(scratch, "wal"), name)
    q = None
    try:
        tg.warm_up(spark, partitions, value_bytes)
        src = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", bootstrap)
               .option("subscribe", in_topic).option("startingOffsets", "earliest")
               .option("maxOffsetsPerTrigger", rows_per_trigger).load())
        gate = _Gate(tg.foreach_batch())
        q = (src.select("key", "value").repartition(partitions).writeStream.foreachBatch(gate)
             .option("checkpointLocation", chk).trigger(processingTime="1 second").start())
        end = time.monotonic() + max_s
        while time.monotonic() < end and q.isActive and len(gate.written) < warmup_batches + batches:
            time.sleep(0.1)
        gate.close()
        if not q.isActive:
            raise RuntimeError(f"kafka-source query of {writer} stopped: {q.exception()}")
        t_wait = time.monotonic()
        while time.monotonic() - t_wait < 600 and q.isActive and gate.running:
            time.sleep(0.05)
        t_wait = time.monotonic()
        while (gate.written and time.monotonic() - t_wait < 15 and q.isActive
               and not any(dict(p).get("batchId") == gate.written[-1] for p in q.recentProgress)):
            time.sleep(0.05)
        done = set(gate.written)
        progress = [d for d in (dict(p) for p in q.recentProgress) if d.get("batchId") in done]
        stop_between_triggers(q)
        got = summarize_latency(writer, value_bytes, rows_per_trigger, progress, warmup_batches)
        got["trigger_each_ms"] = {int(d["batchId"]): float(d["durationMs"].get("triggerExecution", 0))
                                  for d in progress}  # every batch's, warm-up included: which one was slow
        got["phases_each_ms"] = {int(d["batchId"]): {k: float(v) for k, v in dict(d["durationMs"]).items()}
                                 for d in progress}  # Spark's steps of each trigger (latestOffset, addBatch, ...)
        if tg.sink is not None:  # the sink's own reports: its time in write() and each task's
            got["sink_each"] = _sink_each(tg.sink.reports, done)
        return got
    finally:
        if q is not None and q.isActive:
            q.stop()
        common.delete_topic(bootstrap, name)
        shutil.rmtree(chk, ignore_errors=True)


def kafka_source_latency(spark: Any, bootstrap: str, *, rows_per_trigger: int, in_partitions: int,
                         partitions: list[int], value_bytes: int, batches: int, warmup_batches: int, rounds: int,
                         topic_partitions: int, scratch: str, writers: tuple[str, ...] = KS_WRITERS,
                         max_s: float = 300.0) -> dict[str, Any]:
    """Steps 1-3 (see the module); the rounds' figures and their summary.

    Raises:
        RuntimeError: the input topic could not be filled. A writer's query that fails is recorded in its round
            (``errors``), and the other writers go on.
    """
    in_topic = f"bench-ks-in-{uuid.uuid4().hex[:6]}"
    common.create_topic(bootstrap, in_topic, in_partitions)
    total = rows_per_trigger * (warmup_batches + batches + 1)  # a batch beyond the measured ones: never the log end
    t = time.monotonic()
    _fill(bootstrap, in_topic, total, in_partitions, value_bytes)  # Step 1
    log(f"kafka-source: {total:,} rows in {in_topic} ({in_partitions} partitions) in {time.monotonic() - t:.1f}s")
    done: list[dict[str, Any]] = []
    for r in range(rounds):  # Step 2
        order = list(writers[r % len(writers):]) + list(writers[:r % len(writers)])
        res: dict[str, Any] = {"round": r, "order": order, "results": {}, "errors": {}}
        for n in partitions:
            for w in order:
                try:
                    got = _one_query(spark, bootstrap, in_topic, w, n, rows_per_trigger, value_bytes, batches,
                                     warmup_batches, topic_partitions, scratch, max_s)
                except Exception as exc:  # noqa: BLE001 - recorded; the others go on
                    res["errors"][f"{n}:{w}"] = f"{type(exc).__name__}: {exc}"
                    log(f"kafka-source round {r} {n} partitions {w}: {exc}")
                    continue
                res["results"][f"{n}:{w}"] = got
                log(f"kafka-source round {r} {n:3d} partitions {w:18s}: trigger p50 {got['trigger_ms']['p50']} ms, "
                    f"p95 {got['trigger_ms']['p95']} ms over {got['batches']} batches; kept up: {got['kept_up']}")
        done.append(res)
    common.delete_topic(bootstrap, in_topic)
    return {"rows_per_trigger": rows_per_trigger, "trigger_s": 1.0, "in_partitions": in_partitions,
            "partitions": partitions, "value_bytes": value_bytes, "batches": batches,
            "warmup_batches": warmup_batches, "rounds": done, "summary": summarize(done, partitions, writers)}
