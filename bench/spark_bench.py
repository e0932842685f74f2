"""The Spark benchmarks: batch-write throughput and micro-batch latency, per writer.

Every writer gets the same cached DataFrame (or the same rate source), the
same partition count, the same Spark settings, the same broker and the same
producer settings. Runs are interleaved (round 1 of every writer, then round 2
..., the order rotated each round) so that a noisy neighbour hurts every writer
alike, and each timed run is preceded by an untimed warm-up task
(:class:`bench.writers.Prepare`). Every run writes to a topic of its own, which
is deleted afterwards (its log would fill the broker's disk).
"""

from __future__ import annotations

import os
import shutil
import sys
import time
import uuid
from dataclasses import dataclass
from typing import Any, Callable

from . import common
from .cpu import CpuMeter
from .writers import EngineProbe, FlushWriter, NoopWriter, Prepare, RawWriter

RAW, FLUSH, SYNC, ASYNC, EXACTLY = "raw", "flush-writer", "sink-sync", "sink-async", "sink-exactly-once"
NOOP = "noop"  # reads its rows, writes nothing (the part of a write's time Spark itself sets)
FLUSH_ID = "flush-writer-id"  # throughput only: the flush-writer sending the sink's id header (the header's cost)
SYNC_PY = "sink-sync-python"  # throughput only: sink sync on the Python delivery engine (what the native one saves)
EXACTLY_SPARK = "sink-exactly-once-no-resplit"  # exactly_once_lanes=0: Spark's partitions as lanes, no shuffle
SPARK_KAFKA = "spark-kafka"  # Spark's own Kafka sink (connector jars from devtools/jvm.py), the writer users pick today
#: Spark's own Kafka sink with the batching every librdkafka writer here has (linger.ms 5, batch.size 1,000,000):
#: both clients set alike, so that neither wins by a default.
SPARK_KAFKA_ALIKE = "spark-kafka-alike"
ALIKE = {"linger.ms": "5", "batch.size": "1000000"}
WRITERS = (NOOP, RAW, FLUSH, FLUSH_ID, SPARK_KAFKA, SPARK_KAFKA_ALIKE, SYNC, SYNC_PY, ASYNC, EXACTLY, EXACTLY_SPARK)
LATENCY_WRITERS = (NOOP, RAW, FLUSH, SPARK_KAFKA, SPARK_KAFKA_ALIKE, SYNC, ASYNC, EXACTLY)
#: The scaling section (4, 16, 64, 200 partitions and local-cluster): the sink's two sync modes and the references.
SCALING_TP_WRITERS = (FLUSH, SPARK_KAFKA, SYNC, EXACTLY)
SCALING_LAT_WRITERS = (NOOP, FLUSH, SPARK_KAFKA, SYNC, EXACTLY, EXACTLY_SPARK)
LABELS = {
    NOOP: "no-op (Spark's floor)", RAW: "raw (ceiling)", FLUSH: "flush-writer (built-in sink stand-in)",
    FLUSH_ID: "flush-writer + rks-id header", SPARK_KAFKA: "Spark's Kafka sink (connector 4.2.0)",
    SPARK_KAFKA_ALIKE: "Spark's Kafka sink, batching set as librdkafka's (linger.ms 5, batch.size 1,000,000)",
    SYNC: "sink at-least-once sync (native engine)", SYNC_PY: "sink at-least-once sync (Python engine)",
    ASYNC: "sink at-least-once async (native engine)", EXACTLY: "sink exactly-once (native engine)",
    EXACTLY_SPARK: "sink exactly-once without the re-split (exactly_once_lanes=0)",
}
assert set(WRITERS) <= set(LABELS) and set(SCALING_LAT_WRITERS) <= set(LABELS), "every writer has its label"
#: The delivery engine each sink writer runs with: explicit, so that "auto" never decides what is measured.
ENGINES = {SYNC: "native", SYNC_PY: "python", ASYNC: "native", EXACTLY: "native", EXACTLY_SPARK: "native"}
SYNC_ACK_TIMEOUT_S = 900.0  # "large": a sync task always waits for every ack
WARM_TASKS = 8  # tasks of a warm-up (and of the engine check): at most this many, whatever the partitions


def log(msg: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def build_spark(cores: int, partitions: int, driver_memory: str, master: str | None = None,
                app_name: str = "rks-bench", extra_conf: dict[str, str] | None = None) -> Any:
    from pyspark.sql import SparkSession

    b = (
        SparkSession.builder.master(master or f"local[{cores}]")
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.memory", driver_memory)
        .config("spark.sql.shuffle.partitions", str(partitions))
        .config("spark.default.parallelism", str(partitions))
        .config("spark.python.worker.reuse", "true")
        .config("spark.sql.streaming.stopTimeout", "60s")
    )
    conf = {"spark.jars": ",".join(spark_kafka_jars()), **(extra_conf or {})}
    for k, v in conf.items():
        b = b.config(k, v)
    spark = b.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def spark_kafka_jars() -> list[str]:
    """Spark's Kafka connector jars (fetched once by devtools/jvm.py): Spark's own sink is a writer of every section."""
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from devtools.jvm import spark_kafka_connector_jars

    return spark_kafka_connector_jars()


def spark_kafka_options(conf: dict[str, str], topic: str, alike: bool = False) -> dict[str, str]:
    """Spark's Kafka sink's options for the same producer settings (Java client names; its defaults otherwise).

    The settings that decide what a write guarantees are the same for every
    writer (acks=all, idempotence on); the Java client's tuning (linger,
    batch size) stays at the defaults a user of Spark's sink gets (kafka-clients
    3.9: linger.ms 0, batch.size 16,384), or with ``alike`` is set to
    librdkafka's (:data:`ALIKE`), which every other writer here runs with.
    """
    java = {"bootstrap.servers": conf["bootstrap.servers"], "acks": conf.get("acks", "all"),
            "enable.idempotence": conf.get("enable.idempotence", "true"), **(ALIKE if alike else {})}
    return {"topic": topic, **{f"kafka.{k}": v for k, v in java.items()}}


def spark_settings(spark: Any) -> dict[str, Any]:
    conf = spark.sparkContext.getConf()
    keys = ["spark.master", "spark.driver.memory", "spark.executor.memory", "spark.sql.shuffle.partitions",
            "spark.python.worker.reuse", "spark.sql.execution.arrow.maxRecordsPerBatch"]
    out = {k: conf.get(k) for k in keys}
    out["spark.sql.execution.arrow.maxRecordsPerBatch"] = spark.conf.get(
        "spark.sql.execution.arrow.maxRecordsPerBatch")
    out["spark.version"] = spark.version
    return out


def kafka_columns(df: Any, id_col: str, value_bytes: int) -> Any:
    """key = the number as text (binary); value = that text left-padded with 'v' to ``value_bytes`` (binary)."""
    from pyspark.sql import functions as F

    s = F.col(id_col).cast("string")
    return df.select(s.cast("binary").alias("key"), F.lpad(s, value_bytes, "v").cast("binary").alias("value"))


@dataclass
class Target:
    """One writer bound to one topic (and, for the sink, one sink object)."""

    writer: str
    topic: str
    fn: Callable[..., Any]  # mapInArrow function (baselines) or the sink's PartitionWriter factory
    ddl: str
    sink: Any = None
    wal_dir: str | None = None
    spark_kafka: dict[str, str] | None = None  # Spark's own Kafka sink: its options

    def warm_up(self, spark: Any, partitions: int, value_bytes: int) -> None:
        """Untimed: drop leftovers of earlier runs in the workers, then write a few rows (batch id 0).

        At most :data:`WARM_TASKS` tasks: enough to reach every Python worker
        (each held a moment), without paying Spark's per-task cost 64 times.
        """
        n = min(partitions, WARM_TASKS)
        df = kafka_columns(spark.range(0, 10 * partitions, 1, n), "id", value_bytes)
        if self.spark_kafka is not None:  # its producers live in the executor JVM's cache, keyed by these options
            df.write.format("kafka").options(**self.spark_kafka).save()
            return
        df.mapInArrow(Prepare(self.task_fn(0)), self.ddl).collect()
        if self.writer == ASYNC:
            self.wait_durable(120.0)

    def task_fn(self, batch_id: int) -> Callable[..., Any]:
        if self.sink is None:
            return self.fn
        from spark_recoverable_sink.task.writer import PartitionWriter

        return PartitionWriter(self.sink.config, batch_id, run="warmup")

    def write(self, df: Any, batch_id: int) -> dict[str, Any]:
        """The timed write; returns what the writer reported (and how many tasks and worker processes ran it)."""
        if self.sink is not None:
            r = self.sink.write(df, batch_id=batch_id)
            parts = r.partition_reports
            return {"rows": r.rows, "acked": r.acked, "pending": r.pending, "retried": r.retried,
                    "dead_lettered": r.dead_lettered, "replayed": r.replayed, "tasks": len(parts),
                    "workers": len({p.pid for p in parts}), "task_s_sum": sum(p.seconds for p in parts)}
        if self.spark_kafka is not None:  # save() returns when every task's producer flushed without error
            tasks = df.rdd.getNumPartitions()
            df.write.format("kafka").options(**self.spark_kafka).save()
            return {"rows": None, "tasks": tasks, "workers": None, "task_s_sum": None}
        rows = df.mapInArrow(self.fn, self.ddl).collect()
        unflushed = sum(r["unflushed"] for r in rows)
        if unflushed:
            log(f"WARNING {self.writer}: {unflushed} records still unflushed when the write returned")
        return {"rows": sum(r["rows"] for r in rows), "unflushed": unflushed, "tasks": len(rows),
                "workers": len({r["pid"] for r in rows}), "task_s_sum": sum(r["seconds"] for r in rows)}

    def engine_check(self, spark: Any, partitions: int) -> dict[str, Any] | None:
        """For the sink: the delivery engine its configuration gets in the worker processes (None for baselines).

        Raises:
            RuntimeError: a worker runs another engine than the one this writer asks for.
        """
        if self.sink is None:
            return None
        want = self.sink.config.delivery_engine
        n = min(partitions, WARM_TASKS)
        rows = spark.range(0, 2 * n, 1, n).mapInArrow(
            EngineProbe(self.sink.config), EngineProbe.ddl).collect()
        got = sorted({r["engine"] for r in rows})
        out = {"asked": want, "workers": len({r["pid"] for r in rows}), "engines": got,
               "why": sorted({r["why"] for r in rows})}
        if got != [want]:
            raise RuntimeError(f"{self.writer} asks for delivery_engine={want!r} but its workers run {got}: "
                               f"{out['why']}")
        return out

    def foreach_batch(self) -> Callable[[Any, int], None]:
        if self.sink is not None:
            return self.sink
        if self.spark_kafka is not None:
            opts = self.spark_kafka

            def save(batch_df: Any, _batch_id: int) -> None:
                batch_df.write.format("kafka").options(**opts).save()

            return save
        fn, ddl = self.fn, self.ddl

        def run(batch_df: Any, _batch_id: int) -> None:
            batch_df.mapInArrow(fn, ddl).collect()

        return run

    def wait_durable(self, timeout_s: float) -> float | None:
        """For the sink: poll its WAL until empty; returns the monotonic time it was (None for baselines)."""
        if self.sink is None:
            return None
        return common.wait_wal_empty(self.wal_dir, self.sink.config.name, timeout_s)


def make_target(writer: str, bootstrap: str, topic: str, wal_dir: str, run_name: str) -> Target:
    """The writer ``writer`` bound to ``topic``; every sink writer with its delivery engine set explicitly."""
    from spark_recoverable_sink import RecoverableKafkaSink
    from spark_recoverable_sink.report import REPORT_DDL as SINK_DDL

    conf = common.producer_conf(bootstrap)
    if writer == RAW:
        fn = RawWriter(conf, topic)
        return Target(writer, topic, fn, fn.ddl)
    if writer == FLUSH:
        fn = FlushWriter(conf, topic)
        return Target(writer, topic, fn, fn.ddl)
    if writer == FLUSH_ID:  # the sink's header: rks-id = <name>:<run>:<batch>:<partition>:<fingerprint>-<occ>
        fn = FlushWriter(conf, topic, id_header="rks-id", id_prefix=f"{run_name}:{uuid.uuid4().hex[:16]}:1:".encode())
        return Target(writer, topic, fn, fn.ddl)
    if writer == NOOP:
        fn = NoopWriter()
        return Target(writer, topic, fn, fn.ddl)
    if writer in (SPARK_KAFKA, SPARK_KAFKA_ALIKE):
        return Target(writer, topic, None, "",  # type: ignore[arg-type]
                      spark_kafka=spark_kafka_options(conf, topic, alike=writer == SPARK_KAFKA_ALIKE))
    if writer not in ENGINES:
        raise ValueError(f"unknown writer {writer!r}")
    ack = 0.0 if writer == ASYNC else SYNC_ACK_TIMEOUT_S
    guarantee = "exactly_once" if writer in (EXACTLY, EXACTLY_SPARK) else "at_least_once"
    extra = {"exactly_once_lanes": 0} if writer == EXACTLY_SPARK else {}
    sink = RecoverableKafkaSink(name=run_name, kafka_conf=conf, topic=topic, wal_dir=wal_dir, ack_timeout_s=ack,
                                guarantee=guarantee, delivery_engine=ENGINES[writer], **extra)
    return Target(writer, topic, None, SINK_DDL, sink=sink, wal_dir=wal_dir)  # type: ignore[arg-type]


# -- 1. throughput -----------------------------------------------------------------------


def cached_sizes(spark: Any) -> dict[str, int]:
    """Bytes of cached data in memory and on disk (a cache that spilled to disk is partly re-read)."""
    mem = disk = 0
    for info in spark.sparkContext._jsc.sc().getRDDStorageInfo():
        mem += info.memSize()
        disk += info.diskSize()
    return {"memory_bytes": mem, "disk_bytes": disk}


def throughput(spark: Any, bootstrap: str, *, rows_by_size: dict[int, int], partitions: int, topic_partitions: int,
               rounds: int, writers: tuple[str, ...], scratch: str, verify: bool, cpu_root: int | None = None,
               tag: str = "throughput") -> dict[str, Any]:
    """Median time of a batch write of cached rows, per writer and value size.

    ``cpu_root``: the process whose tree the CPU seconds are summed over
    (default this one; a child running its own Spark passes the bench
    process, which also runs the broker).
    """
    uid = uuid.uuid4().hex[:6]
    runs: list[dict[str, Any]] = []
    engines: dict[str, Any] = {}
    sizes = list(rows_by_size)
    cache: dict[int, dict[str, int]] = {}
    for size in sizes:
        rows = rows_by_size[size]
        df = kafka_columns(spark.range(0, rows, 1, partitions), "id", size).cache()
        t = time.monotonic()
        assert df.count() == rows
        cache[size] = cached_sizes(spark)
        log(f"{tag}: {rows} rows of {size} B cached in {time.monotonic() - t:.1f}s "
            f"({df.rdd.getNumPartitions()} partitions, {cache[size]['memory_bytes'] / 2**20:.0f} MiB in memory, "
            f"{cache[size]['disk_bytes'] / 2**20:.0f} MiB on disk)")
        if cache[size]["disk_bytes"]:
            log(f"{tag}: WARNING part of the cached data spilled to disk: raise --driver-memory")
        payload = rows * size + _key_bytes(rows)
        for rnd in range(rounds):
            order = writers[rnd % len(writers):] + writers[:rnd % len(writers)]  # rotate: no writer always first
            for writer in order:
                name = f"bench-{writer}-{size}-{rnd}-{uid}"
                topic = name
                common.create_topic(bootstrap, topic, topic_partitions)
                wal_dir = os.path.join(scratch, "wal")
                tg = make_target(writer, bootstrap, topic, wal_dir, name)
                try:
                    if writer not in engines and tg.sink is not None:
                        engines[writer] = tg.engine_check(spark, partitions)
                    tw = time.monotonic()
                    tg.warm_up(spark, partitions, size)
                    t0 = time.monotonic()
                    if t0 - tw > 15:
                        log(f"{tag}: {writer} warm-up took {t0 - tw:.1f}s")
                    cpu = CpuMeter(cpu_root).start()
                    rep = tg.write(df, batch_id=1)
                    t1 = time.monotonic()
                    durable = None
                    if writer == ASYNC:
                        end = tg.wait_durable(600.0)
                        durable = None if end is None else end - t0
                    cpu_s = cpu.stop()  # the whole process tree (JVM, Python workers, broker), until durable
                    run = {"writer": writer, "value_bytes": size, "round": rnd, "rows": rows, "payload_bytes": payload,
                           "seconds": t1 - t0, "durable_seconds": durable, "report": rep, "cpu_s": cpu_s,
                           "cpu_split": cpu.split}
                    if verify and rnd == 0 and writer != NOOP:
                        warm = 10 * partitions
                        tv = time.monotonic()
                        n = common.count_topic(bootstrap, topic, rows + warm)
                        run["read_back_s"] = time.monotonic() - tv
                        run["read_back"] = n - warm
                        run["read_back_ok"] = n >= rows + warm
                        if not run["read_back_ok"]:
                            # Tell a flaky read from records really missing: count again.
                            n2 = common.count_topic(bootstrap, topic, rows + warm)
                            run["read_back_again"] = n2 - warm
                            # ... and what a reader that also sees uncommitted records finds
                            n3 = common.count_topic(bootstrap, topic, rows + warm, isolation="read_uncommitted")
                            run["read_back_uncommitted"] = n3 - warm
                            log(f"{tag}: {writer} {size} B: read back {n - warm} of {rows} rows "
                                f"(+{warm} warm-up rows); a second count found {n2 - warm}, "
                                f"read_uncommitted {n3 - warm}")
                    runs.append(run)
                    extra = f" durable {durable:.2f}s" if durable is not None else ""
                    log(f"{tag}: {writer:12s} {size:5d} B round {rnd}: {t1 - t0:.2f}s "
                        f"= {rows / (t1 - t0):,.0f} rows/s{extra}" +
                        (f" read back {run['read_back']}" if "read_back" in run else ""))
                finally:
                    common.delete_topic(bootstrap, topic)
        df.unpersist()
    return {"rows_by_size": {str(k): v for k, v in rows_by_size.items()}, "partitions": partitions,
            "topic_partitions": topic_partitions, "rounds": rounds, "sizes": sizes, "cache": cache, "runs": runs,
            "engines": engines, "summary": summarize_throughput(runs, writers, sizes)}


def _key_bytes(rows: int) -> int:
    """Bytes of the keys 0..rows-1 as decimal text."""
    total, lo, digits = 0, 0, 1
    while lo < rows:
        hi = min(rows, 10 ** digits)
        total += (hi - lo) * digits
        lo, digits = hi, digits + 1
    return total


def _cpu_per_million(rs: list[dict[str, Any]]) -> float | None:
    """Median CPU seconds (all processes) per million rows of these runs."""
    per = [r["cpu_s"] / r["rows"] * 1e6 for r in rs if r.get("cpu_s") is not None]
    return common.median(per) if per else None


def _cpu_split_per_million(rs: list[dict[str, Any]]) -> dict[str, float] | None:
    """Per kind of process (Spark's JVM, Python, broker): median CPU seconds per million rows of these runs."""
    splits = [(r["cpu_split"], r["rows"]) for r in rs if r.get("cpu_split")]
    if not splits:
        return None
    return {k: round(common.median([sp[k] / rows * 1e6 for sp, rows in splits]), 3) for k in splits[0][0]}


def summarize_throughput(runs: list[dict[str, Any]], writers: tuple[str, ...], sizes: list[int]) -> list[dict[str, Any]]:
    out = []
    for size in sizes:
        med: dict[str, float] = {}
        for w in writers:
            secs = [r["seconds"] for r in runs if r["writer"] == w and r["value_bytes"] == size]
            if secs:
                med[w] = common.median(secs)
        for w in writers:
            rs = [r for r in runs if r["writer"] == w and r["value_bytes"] == size]
            if not rs:
                continue
            rows, payload = rs[0]["rows"], rs[0]["payload_bytes"]
            m = med[w]
            row: dict[str, Any] = {
                "writer": w, "rows": rows, "label": LABELS[w], "value_bytes": size, "runs": len(rs), "median_s": m,
                "min_s": min(r["seconds"] for r in rs), "max_s": max(r["seconds"] for r in rs),
                "rows_per_s": rows / m, "mb_per_s": payload / m / 1e6,
                "vs_raw": (med[RAW] / m) if RAW in med else None,
                "vs_flush": (med[FLUSH] / m) if FLUSH in med else None,
                "cpu_s_per_million": _cpu_per_million(rs),
                "cpu_split_per_million": _cpu_split_per_million(rs),
                "tasks": rs[0]["report"].get("tasks"),
                "workers": max((r["report"].get("workers") or 0) for r in rs) or None,
            }
            flush_cpu = _cpu_per_million([r for r in runs if r["writer"] == FLUSH and r["value_bytes"] == size])
            row["cpu_vs_flush"] = (row["cpu_s_per_million"] / flush_cpu
                                   if row["cpu_s_per_million"] is not None and flush_cpu else None)
            if w == ASYNC:
                ds = [r["durable_seconds"] for r in rs if r["durable_seconds"] is not None]
                dm = common.median(ds)
                row["durable_median_s"] = dm
                row["durable_rows_per_s"] = rows / dm if dm else None
                row["durable_vs_raw"] = (med[RAW] / dm) if (RAW in med and dm) else None
                row["durable_vs_flush"] = (med[FLUSH] / dm) if (FLUSH in med and dm) else None
                acked = [r["report"]["acked"] / r["rows"] for r in rs if r["report"].get("acked") is not None]
                row["acked_at_task_end"] = common.median(acked)
            checks = [r for r in rs if "read_back" in r]
            if checks:
                row["read_back_ok"] = all(r["read_back_ok"] for r in checks)
                bad = [r for r in checks if not r["read_back_ok"]]
                if bad:
                    row["read_back_text"] = "; ".join(
                        f"{r['read_back']:,} of {r['rows']:,} read back"
                        + (f", {r['read_back_again']:,} on a second read" if "read_back_again" in r else "")
                        + (f", {r['read_back_uncommitted']:,} read_uncommitted" if "read_back_uncommitted" in r
                           else "")
                        for r in bad)
            out.append(row)
    return out


# -- 2. micro-batch latency -----------------------------------------------------------------


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


# -- 3. scaling with Spark partitions ---------------------------------------------------------------------


def scaling_point(spark: Any, bootstrap: str, *, partitions: int, rows: int, value_bytes: int, rounds: int,
                  rows_per_s: int, duration_s: float, warmup_batches: int, topic_partitions: int, scratch: str,
                  verify: bool, tp_writers: tuple[str, ...] = SCALING_TP_WRITERS,
                  lat_writers: tuple[str, ...] = SCALING_LAT_WRITERS, max_s: float | None = None,
                  cpu_root: int | None = None, tag: str = "scaling") -> dict[str, Any]:
    """Throughput (the same cached rows) and micro-batch latency (the same rows per batch) at ``partitions``.

    Latency: a ``rate-micro-batch`` source, ``rows_per_s`` rows in every
    batch, 1 s trigger; ``duration_s`` batches measured (or those within ``max_s``).

    A failure of one half is recorded in it (``{"error": ...}``) and does not
    stop the other.
    """
    out: dict[str, Any] = {"partitions": partitions}
    t = time.monotonic()
    try:
        out["throughput"] = throughput(
            spark, bootstrap, rows_by_size={value_bytes: rows}, partitions=partitions,
            topic_partitions=topic_partitions, rounds=rounds, writers=tp_writers, scratch=scratch, verify=verify,
            cpu_root=cpu_root, tag=f"{tag} {partitions}p throughput")
    except Exception as exc:  # noqa: BLE001 - recorded, and the run fails (bench/run.py)
        import traceback

        traceback.print_exc()
        out["throughput"] = {"error": f"{type(exc).__name__}: {exc}"}
    try:
        out["latency"] = latency(
            spark, bootstrap, rows_per_s=rows_per_s, sizes=[value_bytes], partitions=partitions,
            topic_partitions=topic_partitions, duration_s=duration_s, warmup_batches=warmup_batches,
            writers=lat_writers, scratch=scratch, tag=f"{tag} {partitions}p latency", source="rate-micro-batch",
            max_s=max_s)
    except Exception as exc:  # noqa: BLE001
        import traceback

        traceback.print_exc()
        out["latency"] = {"error": f"{type(exc).__name__}: {exc}"}
    out["seconds"] = time.monotonic() - t
    return out


def scaling_rows(point: dict[str, Any], setting: str) -> list[dict[str, Any]]:
    """One summary row per writer of a scaling point: throughput, CPU and micro-batch latency side by side."""
    tp, lat = point.get("throughput") or {}, point.get("latency") or {}
    by: dict[str, dict[str, Any]] = {}
    for r in tp.get("summary", []) if "error" not in tp else []:
        by.setdefault(r["writer"], {}).update(
            rows_per_s=r["rows_per_s"], median_s=r["median_s"], cpu_s_per_million=r.get("cpu_s_per_million"),
            tp_vs_flush=r.get("vs_flush"), tp_workers=r.get("workers"), tp_rows=r["rows"], tp_runs=r["runs"],
            read_back_ok=r.get("read_back_ok"))
    for r in lat.get("results", []) if "error" not in lat else []:
        sb = r.get("sink_batches") or {}
        by.setdefault(r["writer"], {}).update(
            p50_ms=r["add_batch_ms"]["p50"], p95_ms=r["add_batch_ms"]["p95"], p99_ms=r["add_batch_ms"]["p99"],
            trigger_p50_ms=r["trigger_ms"]["p50"], kept_up=r["kept_up"], batches=r["batches"],
            rows_per_batch=r["rows_per_batch_mean"], task_s_p50=sb.get("task_s_p50"),
            task_s_busy_p50=sb.get("task_s_busy_p50"),
            task_s_sum_p50=sb.get("task_s_sum_p50"), sink_batch_s_p50=sb.get("batch_s_p50"),
            lat_workers=sb.get("workers"))
    order = list(SCALING_LAT_WRITERS) + [w for w in by if w not in SCALING_LAT_WRITERS]
    return [{"setting": setting, "partitions": point["partitions"], "writer": w, "label": LABELS.get(w, w), **by[w]}
            for w in order if w in by]
