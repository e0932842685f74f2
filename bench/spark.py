"""The Spark side of the benchmark: the session, the writers bound to a topic, and the throughput section.

Runs in the benchmark's driver process (bench/run.py), whose SparkSession
runs every Spark section; what runs in the Python workers is in
bench/writers.py. Every writer gets the same cached DataFrame, the same
partition count, the same Spark settings, the same broker and the same
producer settings (:func:`bench.common.producer_conf`).

The throughput section (:func:`throughput`), per value size: an untimed
warm-up round (every writer writes ``warm_rows`` cached rows once: the
broker's first writes, each writer's first job and connections), then
``rounds`` timed rounds, interleaved (round k of every writer before round
k+1), the writers' order rotated (bench/rounds.py). Each timed write goes to
a fresh topic, is preceded by an untimed task that connects its producer
(:class:`bench.writers.Prepare`) and is followed by the topic's deletion,
outside the timed window; round 0 is read back. In the window: CPU seconds of
the run's processes and of the whole machine (bench/common.py).
"""

from __future__ import annotations

import os
import statistics
import time
import uuid
from dataclasses import dataclass
from typing import Any, Callable

from bench import common
from bench.common import log
from bench.rounds import CPU, MACHINE_CPU, SPEED, paired, per_round, rotated, spread
from bench.writers import EngineProbe, FlushWriter, Prepare

FLUSH, SPARK_KAFKA, SYNC, EXACTLY = "flush-writer", "spark-kafka", "sink-sync", "sink-exactly-once"
WRITERS = (FLUSH, SPARK_KAFKA, SYNC, EXACTLY)
LABELS = {FLUSH: "flush-writer (a Python produce loop, no WAL)", SPARK_KAFKA: "Spark's Kafka sink",
          SYNC: "sink at-least-once sync (native engine)", EXACTLY: "sink exactly-once (native engine)"}
#: The delivery engine each sink writer runs with: explicit, so that "auto" never decides what is measured.
ENGINES = {SYNC: "native", EXACTLY: "native"}
SYNC_ACK_TIMEOUT_S = 900.0  # "large": a sync task always waits for every ack
WARM_TASKS = 8  # tasks of a warm-up (and of the engine check): at most this many, whatever the partitions


def build_spark(cores: int, partitions: int, driver_memory: str) -> Any:
    """A local[cores] SparkSession with Spark's Kafka connector (devtools/jvm.py) on its class path."""
    from pyspark.sql import SparkSession

    from devtools.jvm import spark_kafka_connector_jars

    spark = (SparkSession.builder.master(f"local[{cores}]").appName("rks-bench")
             .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
             .config("spark.driver.memory", driver_memory).config("spark.sql.shuffle.partitions", str(partitions))
             .config("spark.default.parallelism", str(partitions)).config("spark.python.worker.reuse", "true")
             .config("spark.sql.streaming.stopTimeout", "60s")
             .config("spark.jars", ",".join(spark_kafka_connector_jars())).getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def spark_settings(spark: Any) -> dict[str, Any]:
    """The session's settings the page shows."""
    conf = spark.sparkContext.getConf()
    out = {k: conf.get(k) for k in ("spark.master", "spark.driver.memory", "spark.executor.memory",
                                    "spark.sql.shuffle.partitions", "spark.python.worker.reuse")}
    out["spark.sql.execution.arrow.maxRecordsPerBatch"] = spark.conf.get("spark.sql.execution.arrow.maxRecordsPerBatch")
    out["spark.version"] = spark.version
    return out


def kafka_columns(df: Any, id_col: str, value_bytes: int) -> Any:
    """key = the number as text (binary); value = that text left-padded with 'v' to ``value_bytes`` (binary)."""
    from pyspark.sql import functions as F

    s = F.col(id_col).cast("string")
    return df.select(s.cast("binary").alias("key"), F.lpad(s, value_bytes, "v").cast("binary").alias("value"))


# -- a writer bound to a topic --------------------------------------------------------------------------------------


@dataclass
class Target:
    """One writer bound to one topic: the flush-writer's function, Spark's sink's options, or a sink object."""

    writer: str
    topic: str
    fn: Any = None  # the flush-writer's mapInArrow function
    sink: Any = None
    spark_kafka: dict[str, str] | None = None  # Spark's own Kafka sink: its options

    def warm_up(self, spark: Any, partitions: int, value_bytes: int) -> None:
        """Untimed: drop earlier runs' leftovers in the workers, then write a few rows (batch id 0).

        At most :data:`WARM_TASKS` tasks: enough to reach every Python worker.
        """
        df = kafka_columns(spark.range(0, 10 * partitions, 1, min(partitions, WARM_TASKS)), "id", value_bytes)
        if self.spark_kafka is not None:  # its producers live in the executor JVM's cache, keyed by these options
            df.write.format("kafka").options(**self.spark_kafka).save()
            return
        if self.sink is not None:
            from spark_recoverable_sink.report import REPORT_DDL
            from spark_recoverable_sink.task.writer import PartitionWriter

            df.mapInArrow(Prepare(PartitionWriter(self.sink.config, 0, run="warmup")), REPORT_DDL).collect()
            return
        df.mapInArrow(Prepare(self.fn), self.fn.ddl).collect()

    def write(self, df: Any) -> dict[str, Any]:
        """The timed write (batch id 1); what the writer reported, and how many tasks and worker processes ran it."""
        if self.sink is not None:
            r = self.sink.write(df, batch_id=1)
            parts = r.task_reports
            return {"rows": r.rows, "acked": r.acked, "pending": r.pending, "retried": r.retried, "tasks": len(parts),
                    "workers": len({p.pid for p in parts}), "task_s_sum": sum(p.seconds for p in parts)}
        if self.spark_kafka is not None:  # save() returns when every task's producer flushed without error
            tasks = df.rdd.getNumPartitions()
            df.write.format("kafka").options(**self.spark_kafka).save()
            return {"rows": None, "tasks": tasks, "workers": None, "task_s_sum": None}
        rows = df.mapInArrow(self.fn, self.fn.ddl).collect()
        return {"rows": sum(r["rows"] for r in rows), "unflushed": sum(r["unflushed"] for r in rows),
                "tasks": len(rows), "workers": len({r["pid"] for r in rows}),
                "task_s_sum": sum(r["seconds"] for r in rows)}

    def foreach_batch(self) -> Callable[[Any, int], None]:
        """The writer as a ``foreachBatch`` function."""
        if self.sink is not None:
            return self.sink  # type: ignore[no-any-return]
        if self.spark_kafka is not None:
            opts = self.spark_kafka
            return lambda batch_df, _batch_id: batch_df.write.format("kafka").options(**opts).save()
        fn = self.fn
        return lambda batch_df, _batch_id: batch_df.mapInArrow(fn, fn.ddl).collect()

    def engine_check(self, spark: Any, partitions: int) -> dict[str, Any] | None:
        """For a sink writer: the delivery engine its configuration gets in the worker processes (None otherwise).

        Raises:
            RuntimeError: a worker runs another engine than the one this writer asks for.
        """
        if self.sink is None:
            return None
        want, n = self.sink.config.delivery_engine, min(partitions, WARM_TASKS)
        rows = spark.range(0, 2 * n, 1, n).mapInArrow(EngineProbe(self.sink.config), EngineProbe.ddl).collect()
        got = sorted({r["engine"] for r in rows})
        out = {"asked": want, "workers": len({r["pid"] for r in rows}), "engines": got,
               "why": sorted({r["why"] for r in rows})}
        if got != [want]:
            raise RuntimeError(f"{self.writer} asks for delivery_engine={want!r}, its workers run {got}: {out['why']}")
        return out


def make_target(writer: str, bootstrap: str, topic: str, wal_dir: str) -> Target:
    """``writer`` bound to ``topic``; a sink writer with its delivery engine set explicitly, named after the topic.

    Spark's own Kafka sink gets the same ``acks`` and idempotence as every
    other writer and the Java client's defaults otherwise (``linger.ms`` 0,
    ``batch.size`` 16,384): what its users get.

    Raises:
        ValueError: an unknown writer.
    """
    conf = common.producer_conf(bootstrap)
    if writer == FLUSH:
        return Target(writer, topic, fn=FlushWriter(conf, topic))
    if writer == SPARK_KAFKA:
        java = {"bootstrap.servers": bootstrap, "acks": conf["acks"], "enable.idempotence": conf["enable.idempotence"]}
        return Target(writer, topic, spark_kafka={"topic": topic, **{f"kafka.{k}": v for k, v in java.items()}})
    if writer not in ENGINES:
        raise ValueError(f"unknown writer {writer!r}")
    from spark_recoverable_sink import RecoverableKafkaSink

    sink = RecoverableKafkaSink(name=topic, kafka_conf=conf, topic=topic, wal_dir=wal_dir,
                                ack_timeout_s=SYNC_ACK_TIMEOUT_S, delivery_engine=ENGINES[writer],
                                guarantee="exactly_once" if writer == EXACTLY else "at_least_once")
    return Target(writer, topic, sink=sink)


# -- the throughput section -----------------------------------------------------------------------------------------


def _cache(spark: Any, rows: int, size: int, partitions: int) -> tuple[Any, dict[str, int]]:
    """``rows`` rows of ``size`` B cached and counted; the cache's bytes in memory and on disk."""
    df = kafka_columns(spark.range(0, rows, 1, partitions), "id", size).cache()
    assert df.count() == rows
    mem = disk = 0
    for info in spark.sparkContext._jsc.sc().getRDDStorageInfo():
        mem, disk = mem + info.memSize(), disk + info.diskSize()
    if disk:
        log(f"throughput: WARNING {disk / 2**20:.0f} MiB of the cached rows spilled to disk: raise --driver-memory")
    return df, {"memory_bytes": mem, "disk_bytes": disk}


def throughput(spark: Any, bootstrap: str, data_dir: str, *, rows_by_size: dict[int, int], partitions: int,
               topic_partitions: int, rounds: int, warm_rows: int, scratch: str,
               writers: tuple[str, ...] = WRITERS) -> dict[str, Any]:
    """The section (see the module): every run, the warm-up round and the summary.

    Raises:
        RuntimeError: a sink writer's workers run another delivery engine than it asked for.
    """
    uid = uuid.uuid4().hex[:6]
    runs: list[dict[str, Any]] = []
    warmups: list[dict[str, Any]] = []
    engines: dict[str, Any] = {}
    cache: dict[int, dict[str, int]] = {}
    ctx = {"spark": spark, "bootstrap": bootstrap, "data_dir": data_dir, "partitions": partitions,
           "topic_partitions": topic_partitions, "wal_dir": os.path.join(scratch, "wal"), "engines": engines}
    for size, rows in rows_by_size.items():
        wr = min(warm_rows, rows)
        if wr:
            wdf, _ = _cache(spark, wr, size, partitions)
            for writer in writers:
                tw = time.monotonic()
                _one(ctx, writer, size, "w", wdf, wr, timed=False, name=f"bench-{writer}-{size}-w-{uid}")
                warmups.append({"writer": writer, "value_bytes": size, "rows": wr, "seconds": time.monotonic() - tw})
            wdf.unpersist()
        df, cache[size] = _cache(spark, rows, size, partitions)
        payload = rows * size + sum(len(str(i)) for i in range(rows))  # values + keys (decimal text)
        for rnd in range(rounds):
            for writer in rotated(writers, rnd, rounds):
                run = _one(ctx, writer, size, rnd, df, rows, timed=True, name=f"bench-{writer}-{size}-{rnd}-{uid}")
                runs.append({**run, "payload_bytes": payload})
        df.unpersist()
    sizes = list(rows_by_size)
    return {"rows_by_size": {str(k): v for k, v in rows_by_size.items()}, "partitions": partitions,
            "topic_partitions": topic_partitions, "rounds": rounds, "sizes": sizes, "cache": cache, "runs": runs,
            "warmup": warmups, "order": "rotated by round × writers ÷ rounds places", "engines": engines,
            "summary": summarize_throughput(runs, writers, sizes)}


def _one(ctx: dict[str, Any], writer: str, size: int, rnd: Any, df: Any, rows: int, *, timed: bool,
         name: str) -> dict[str, Any]:
    """One write of ``df`` by ``writer`` to a fresh topic (deleted after, its files waited for); timed or not."""
    spark, bootstrap, partitions = ctx["spark"], ctx["bootstrap"], ctx["partitions"]
    common.create_topic(bootstrap, name, ctx["topic_partitions"])
    tg = make_target(writer, bootstrap, name, ctx["wal_dir"])
    run: dict[str, Any] = {"writer": writer, "value_bytes": size, "round": rnd, "rows": rows}
    try:
        if writer not in ctx["engines"] and tg.sink is not None:
            ctx["engines"][writer] = tg.engine_check(spark, partitions)
        tg.warm_up(spark, partitions, size)
        cpu = common.CpuMeter().start()
        t0 = time.monotonic()
        report = tg.write(df)
        seconds = time.monotonic() - t0
        cpu_s = cpu.stop()
        if not timed:
            return run
        run.update(seconds=seconds, report=report, cpu_s=cpu_s, cpu_split=cpu.split, machine_cpu=cpu.machine)
        if rnd == 0:  # every writer checks its own delivery; a count tells a shortfall of the broker or the read
            warm = 10 * partitions
            n = common.count_topic(bootstrap, name, rows + warm) - warm
            run.update(read_back=n, read_back_ok=n >= rows)
        log(f"throughput: {writer:17s} {size:5d} B round {rnd}: {seconds:.2f}s = {rows / seconds:,.0f} rows/s"
            + (f", read back {run['read_back']:,}" if "read_back" in run else ""))
        return run
    finally:
        run["files_gone_s"] = common.delete_topic(bootstrap, name, ctx["data_dir"])


def summarize_throughput(runs: list[dict[str, Any]], writers: tuple[str, ...], sizes: list[int]) -> list[dict]:
    """One row per writer and value size: medians over the rounds with their spread, ratios round by round.

    Pure: reads the runs only.
    """
    def med(xs: list[float]) -> float | None:
        return statistics.median(xs) if xs else None

    def million(sp: dict[str, Any] | None) -> dict[str, Any] | None:
        return None if sp is None else {k: (v * 1e6 if k != "n" else v) for k, v in sp.items()}

    out = []
    for size in sizes:
        by = {w: [r for r in runs if r["writer"] == w and r["value_bytes"] == size] for w in writers}
        flush_cpu = med([r["cpu_s"] / r["rows"] * 1e6 for r in by.get(FLUSH, []) if r.get("cpu_s") is not None])
        for w, rs in by.items():
            if not rs:
                continue
            rows, m = rs[0]["rows"], statistics.median(r["seconds"] for r in rs)
            cpu = med([r["cpu_s"] / r["rows"] * 1e6 for r in rs if r.get("cpu_s") is not None])
            splits = [r["cpu_split"] for r in rs if r.get("cpu_split")]
            row: dict[str, Any] = {
                "writer": w, "rows": rows, "label": LABELS.get(w, w), "value_bytes": size, "runs": len(rs),
                "median_s": m, "min_s": min(r["seconds"] for r in rs), "max_s": max(r["seconds"] for r in rs),
                "rows_per_s": rows / m, "mb_per_s": rs[0]["payload_bytes"] / m / 1e6,
                "rows_per_s_spread": spread(list(per_round(runs, w, size, SPEED).values())),
                "vs_flush_spread": spread(paired(runs, w, FLUSH, size)) if by.get(FLUSH) else None,
                "cpu_s_per_million": cpu,
                "cpu_spread": million(spread(list(per_round(runs, w, size, CPU).values()))),
                "cpu_split_per_million": {k: round(statistics.median(s[k] / rows * 1e6 for s in splits), 3)
                                          for k in splits[0]} if splits else None,
                "machine_cpu_s_per_million": med([r["machine_cpu"]["busy"] / rows * 1e6 for r in rs
                                                  if (r.get("machine_cpu") or {}).get("busy") is not None]),
                "machine_cpu_spread": million(spread(list(per_round(runs, w, size, MACHINE_CPU).values()))),
                "tasks": rs[0]["report"].get("tasks"),
                "workers": max((r["report"].get("workers") or 0) for r in rs) or None,
                "cpu_vs_flush": cpu / flush_cpu if cpu is not None and flush_cpu else None,
            }
            checks = [r for r in rs if "read_back" in r]
            if checks:
                row["read_back_ok"] = all(r["read_back_ok"] for r in checks)
            out.append(row)
    return out
