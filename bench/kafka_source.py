"""The kafka-source and realtime sections: a Kafka → Kafka copy as users write it, per writer, in rounds.

kafka-source (:func:`kafka_source_latency`): Spark's Kafka source reads a
prefilled input topic at ``rows_per_trigger`` rows a 1 s trigger; the rows
are repartitioned to N Spark partitions (a shuffle, as a join or an
aggregation has) and written by the writer in ``foreachBatch``. Every
writer's query reads the same input from the start.

1. the input topic, filled once with (warm-up + measured + 1) batches' rows:
   the last measured batch never reads to the end of the log (a read that
   reaches it waits ``fetch.max.wait.ms`` per input partition for more);
2. for each round, each N, each writer (order rotated each round): a fresh
   output topic, the writer's untimed warm-up, then a query of
   ``warmup_batches`` + ``batches`` triggers; the measured batches'
   ``triggerExecution`` and ``addBatch`` from Spark's progress, each
   trigger's steps, and the sink's own reports;
3. per (N, writer): the median over rounds of each round's p50 and p95 with
   their spread; p50 ÷ Spark's sink's, taken round by round (:func:`summarize`).

realtime (:func:`realtime_latency`): the same copy in Spark's real-time mode;
each record's end-to-end latency (its send time, carried in its value, to a
consumer of the output reading it) for Spark's sink and the sink's foreach
writer, and to a Python foreach writer that writes nothing (the floor).

Runs in the benchmark's driver process, in its SparkSession (bench/spark.py),
whose class path has Spark's Kafka connector.
"""

from __future__ import annotations

import os
import shutil
import threading
import time
import uuid
from typing import Any, Callable

from bench import common
from bench.common import log
from bench.rounds import spread
from bench.spark import EXACTLY, LABELS, SPARK_KAFKA, SYNC, make_target

__all__ = ["kafka_source_latency", "summarize", "KS_WRITERS", "realtime_latency", "RT_WRITERS", "RT_LABELS"]

KS_WRITERS = (SPARK_KAFKA, SYNC, EXACTLY)


class _Gate:
    """A ``foreachBatch`` function passing batches to the writer until :meth:`close`; later ones are skipped.

    Records the batch ids the writer ran, and whether a batch is in the writer right now.
    """

    def __init__(self, inner: Callable[[Any, int], None]) -> None:
        self.inner, self.written, self.closed, self.running = inner, [], False, False

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


def _stop_between_triggers(q: Any, timeout_s: float = 30.0) -> None:
    """Stop a query right after a trigger ended, never during one (that would kill its tasks and Python workers)."""
    end, seen_active = time.monotonic() + timeout_s, False
    while time.monotonic() < end and q.isActive:
        if q.status.get("isTriggerActive"):
            seen_active = True
        elif seen_active:  # a trigger just ended: the next one is most of a second away
            break
        time.sleep(0.01)
    q.stop()


def _batches(writer: str, size: int, rows_per_s: int, progress: list[dict[str, Any]], warmup: int) -> dict[str, Any]:
    """The measured batches' addBatch and trigger p50 / p95 / p99 / max, and whether the query kept up.

    Kept up: its trigger p95 within the 1 s trigger and its batches about one
    trigger's worth of rows (a writer that falls behind gets ever larger batches).
    """
    ps = [p for p in progress if p.get("batchId", 0) >= warmup and p.get("numInputRows", 0) > 0]
    add = [float(p["durationMs"].get("addBatch", 0)) for p in ps]
    trig = [float(p["durationMs"].get("triggerExecution", 0)) for p in ps]
    mean_rows = sum(int(p["numInputRows"]) for p in ps) / len(ps) if ps else 0.0

    def pct(xs: list[float]) -> dict[str, float | None]:
        return {"p50": common.percentile(xs, 50), "p95": common.percentile(xs, 95), "p99": common.percentile(xs, 99),
                "max": max(xs) if xs else None}

    return {"writer": writer, "label": LABELS[writer], "value_bytes": size, "batches": len(ps),
            "rows_per_batch_mean": mean_rows, "add_batch_ms": pct(add), "trigger_ms": pct(trig),
            "kept_up": bool(ps) and (common.percentile(trig, 95) or 0) <= 1000.0 and mean_rows <= 1.2 * rows_per_s,
            "batch_ids": [p.get("batchId") for p in ps]}


def summarize(rounds: list[dict[str, Any]], partitions: list[int], writers: tuple[str, ...]) -> list[dict[str, Any]]:
    """Step 3: per (partition count, writer), medians over rounds with their spread; p50 ÷ Spark's sink's by round.

    Pure: reads the rounds only.
    """
    def sp(xs: list[float]) -> dict[str, float | None]:
        s = spread(xs)
        return {"median": s["median"], "min": s["min"], "max": s["max"]} if s else dict.fromkeys(
            ("median", "min", "max"))

    out = []
    for n in partitions:
        for w in writers:
            got = [r["results"][f"{n}:{w}"] for r in rounds if f"{n}:{w}" in r["results"]]
            row = {"partitions": n, "writer": w, "rounds": len(got), "kept_up_rounds": sum(g["kept_up"] for g in got),
                   "failed_rounds": sum(f"{n}:{w}" in r.get("errors", {}) for r in rounds)}
            for key, (fig, q) in {"trigger_p50_ms": ("trigger_ms", "p50"), "trigger_p95_ms": ("trigger_ms", "p95"),
                                  "add_batch_p50_ms": ("add_batch_ms", "p50")}.items():
                row[key] = sp([g[fig][q] for g in got if g[fig][q] is not None])
            if w != SPARK_KAFKA:
                p50 = [{x: r["results"].get(f"{n}:{x}", {}).get("trigger_ms", {}).get("p50") for x in (w, SPARK_KAFKA)}
                       for r in rounds]  # within each round: both writers ran in it, one after the other
                pairs = [(d[w], d[SPARK_KAFKA]) for d in p50]
                row["p50_vs_spark_kafka"] = sp([a / b for a, b in pairs if a is not None and b])
            out.append(row)
    return out


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
    return {r.batch_id: {"s": r.seconds, "tasks": [[p.origin, p.pid, p.rows, round(p.seconds, 4)]
                                                   for p in r.task_reports]}
            for r in list(reports) if r.batch_id in done}


def _one_query(spark: Any, bootstrap: str, in_topic: str, writer: str, partitions: int, rows_per_trigger: int,
               value_bytes: int, batches: int, warmup_batches: int, topic_partitions: int, scratch: str,
               max_s: float) -> dict[str, Any]:
    """Step 2 for one writer: its query over the whole input; the measured batches' figures.

    Raises:
        RuntimeError: the query stopped.
    """
    name = f"bench-ks-{writer}-{partitions}-{uuid.uuid4().hex[:6]}"
    common.create_topic(bootstrap, name, topic_partitions)
    chk = os.path.join(scratch, "chk", name)
    tg = make_target(writer, bootstrap, name, os.path.join(scratch, "wal"))
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
        _stop_between_triggers(q)
        got = _batches(writer, value_bytes, rows_per_trigger, progress, warmup_batches)
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


# -- real-time mode: end-to-end latency ------------------------------------------------------------------------------

#: The real-time section's writers: Spark's own Kafka sink, the sink's foreach writer, and a Python foreach writer that
#: writes nothing (when rows reach any Python foreach writer: the floor Spark sets for it).
RT_SPARK, RT_SINK, RT_FLOOR = "spark-kafka-rt", "sink-foreach-rt", "python-foreach-floor"
RT_WRITERS = (RT_SPARK, RT_SINK, RT_FLOOR)
RT_LABELS = {RT_SPARK: "Spark's Kafka sink", RT_SINK: "sink.foreach_writer(df)",
             RT_FLOOR: "a Python foreach writer that writes nothing (rows reaching Python)"}


class ForeachFloor:
    """A ``foreach`` writer that writes nothing: each row's wait from its send time (in its value) to ``process``,
    appended per task to a file of ``out_dir`` (read by the driver)."""

    def __init__(self, out_dir: str) -> None:
        self.out_dir = out_dir

    def open(self, partition_id: int, epoch_id: int) -> bool:
        self.name = os.path.join(self.out_dir, f"{os.getpid()}-{partition_id}-{epoch_id}-{uuid.uuid4().hex[:6]}")
        self.seen: list[str] = []
        return True

    def process(self, row: Any) -> None:
        self.seen.append(f"{_sent(row['value'])} {time.time()}")

    def close(self, error: Any) -> None:
        with open(self.name, "w") as f:
            f.write("\n".join(self.seen))


def _sent(value: bytes) -> float:
    """The send time a real-time input record carries in its value (``<seq>:<unix seconds>`` padded with 'v')."""
    return float(bytes(value).rstrip(b"v").split(b":")[1])


def _feed(bootstrap: str, topic: str, partitions: int, rows_per_s: int, seconds: float, value_bytes: int,
          stop: Any) -> int:
    """Records at ``rows_per_s`` for ``seconds`` (bursts every 10 ms), each carrying its send time; the count."""
    from confluent_kafka import Producer

    p = Producer({**common.producer_conf(bootstrap), "linger.ms": 0})
    n, t0 = 0, time.monotonic()
    while not stop.is_set() and time.monotonic() - t0 < seconds:
        due = int((time.monotonic() - t0) * rows_per_s)
        while n < due:
            p.produce(topic, f"{n}:{time.time():.6f}".encode().ljust(value_bytes, b"v"), partition=n % partitions)
            n += 1
        p.poll(0)
        time.sleep(0.01)
    p.flush(30)
    return n


def _watch(bootstrap: str, topic: str, seen: list[tuple[float, float]], stop: Any) -> None:
    """Each output record's (send time, time it was read) until ``stop`` (a consumer that waits 5 ms at most)."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"rt-{uuid.uuid4().hex}", "enable.auto.commit": False,
                  "fetch.wait.max.ms": 5, "fetch.min.bytes": 1})
    try:
        parts = c.list_topics(topic, timeout=10).topics[topic].partitions
        c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in parts])
        while not stop.is_set():
            for m in c.consume(1000, 0.05):
                if m.error() is None:
                    seen.append((_sent(m.value()), time.time()))
    finally:
        c.close()


def _rt_query(spark: Any, bootstrap: str, in_topic: str, writer: str, out: str, scratch: str, trigger: str) -> Any:
    from spark_recoverable_sink import RecoverableKafkaSink

    df = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", bootstrap).option("subscribe", in_topic)
          .option("startingOffsets", "latest").load())
    w = df.writeStream.outputMode("update").trigger(realTime=trigger).option(
        "checkpointLocation", os.path.join(scratch, "chk", out))
    if writer == RT_SPARK:
        return w.format("kafka").option("kafka.bootstrap.servers", bootstrap).option("topic", out).start()
    if writer == RT_FLOOR:
        return w.foreach(ForeachFloor(os.path.join(scratch, "floor", out))).start()
    sink = RecoverableKafkaSink(out, common.producer_conf(bootstrap), topic=out, wal_dir=os.path.join(scratch, "wal"))
    return w.foreach(sink.foreach_writer(df)).start()


def _pcts(lat_ms: list[float]) -> dict[str, float] | None:
    if not lat_ms:
        return None
    xs = sorted(lat_ms)
    return {"p50": round(xs[len(xs) // 2], 1), "p95": round(xs[min(len(xs) - 1, int(len(xs) * 0.95))], 1),
            "n": len(xs)}


def _rt_one(spark: Any, bootstrap: str, writer: str, partitions: int, rows_per_s: int, value_bytes: int,
            warmup_s: float, measure_s: float, scratch: str, trigger: str, topics: list[str]) -> dict[str, Any]:
    """One writer's query: fed for ``warmup_s + measure_s`` once its first epoch ended (the first epoch of a query
    runs as long as its tasks take to start, a fresh Python worker's imports included); the latencies of the records
    sent after the warm-up. Its topics are added to ``topics`` (deleted at the section's end: a sink's worker may
    still deliver what a stopped query's last epoch left in its WAL).

    Raises:
        RuntimeError: no epoch ended within 180 s, or the query stopped.
    """
    tag = f"{writer}-{uuid.uuid4().hex[:6]}"
    in_topic, out = f"bench-rt-in-{tag}", f"bench-rt-out-{tag}"
    common.create_topic(bootstrap, in_topic, partitions)
    common.create_topic(bootstrap, out, partitions)
    topics += [in_topic, out]
    floor_dir = os.path.join(scratch, "floor", out)
    os.makedirs(floor_dir, exist_ok=True)
    stop, seen = threading.Event(), []
    watcher = threading.Thread(target=_watch, args=(bootstrap, out, seen, stop), daemon=True)
    q = None
    try:
        watcher.start()
        q = _rt_query(spark, bootstrap, in_topic, writer, out, scratch, trigger)
        end = time.monotonic() + 180
        while time.monotonic() < end and q.isActive and q.lastProgress is None:
            time.sleep(0.1)
        if q.lastProgress is None:
            raise RuntimeError(f"real-time query of {writer}: no epoch ended within 180 s ({q.exception()})")
        t0 = time.time()
        sent = _feed(bootstrap, in_topic, partitions, rows_per_s, warmup_s + measure_s, value_bytes, stop)
        time.sleep(float(trigger.split()[0]) + 3)  # the last epoch ends: every row reached its writer
        if not q.isActive:
            raise RuntimeError(f"real-time query of {writer} stopped: {q.exception()}")
        epochs = len(q.recentProgress)
    finally:
        if q is not None and q.isActive:
            q.stop()
        stop.set()
        watcher.join(30)
    if writer == RT_FLOOR:
        seen = [tuple(map(float, line.split())) for f in os.listdir(floor_dir)  # type: ignore[misc]
                for line in open(os.path.join(floor_dir, f)).read().splitlines() if line]
    measured = [(b - a) * 1000 for a, b in seen if a >= t0 + warmup_s]
    return {"sent": sent, "seen": len(seen), "epochs": epochs, "latency_ms": _pcts(measured)}


def realtime_latency(spark: Any, bootstrap: str, *, rows_per_s: int, partitions: int, value_bytes: int,
                     warmup_s: float, measure_s: float, rounds: int, scratch: str,
                     writers: tuple[str, ...] = RT_WRITERS, trigger: str = "5 seconds") -> dict[str, Any]:
    """Real-time mode (``trigger(realTime=...)``, PySpark 4.1+): a Kafka → Kafka copy at ``rows_per_s``, end-to-end
    latency per writer (an input record's send time → read by a consumer of the output; the floor: → handed to a
    Python foreach writer), p50 and p95 of the records sent after ``warmup_s``, in ``rounds`` interleaved rounds
    (order rotated); per writer the median over rounds with its spread, and the sink's p50 over Spark's sink's,
    round by round. One source partition per core (a real-time task keeps its core for the whole epoch). A writer's
    query that fails is recorded in its round (``errors``), and the other writers go on.
    """
    done: list[dict[str, Any]] = []
    topics: list[str] = []
    for r in range(rounds):
        order = list(writers[r % len(writers):]) + list(writers[:r % len(writers)])
        res: dict[str, Any] = {"round": r, "order": order, "results": {}, "errors": {}}
        for w in order:
            try:
                got = _rt_one(spark, bootstrap, w, partitions, rows_per_s, value_bytes, warmup_s, measure_s, scratch,
                              trigger, topics)
            except Exception as exc:  # noqa: BLE001 - recorded; the others go on
                res["errors"][w] = f"{type(exc).__name__}: {exc}"
                log(f"realtime round {r} {w}: {exc}")
                continue
            res["results"][w] = got
            log(f"realtime round {r} {w:22s}: {got['latency_ms']} (sent {got['sent']}, seen {got['seen']})")
        done.append(res)
    for t in topics:
        common.delete_topic(bootstrap, t)

    def figures(w: str, k: str) -> list[float]:
        return [d["results"][w]["latency_ms"][k] for d in done if (d["results"].get(w) or {}).get("latency_ms")]

    summary = {w: {k: spread(figures(w, k)) for k in ("p50", "p95")} for w in writers}

    def ratio(a: str, b: str) -> list[float]:
        return [d["results"][a]["latency_ms"]["p50"] / d["results"][b]["latency_ms"]["p50"]
                for d in done if all((d["results"].get(w) or {}).get("latency_ms") for w in (a, b))]

    return {"rows_per_s": rows_per_s, "partitions": partitions, "value_bytes": value_bytes, "trigger": trigger,
            "warmup_s": warmup_s, "measure_s": measure_s, "rounds": done, "summary": summary,
            "sink_over_spark_p50": spread(ratio(RT_SINK, RT_SPARK)),
            "sink_over_floor_p50": spread(ratio(RT_SINK, RT_FLOOR))}
