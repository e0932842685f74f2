"""One writer of the Spark benchmarks bound to one topic: :class:`Target` and :func:`make_target`.

Each writer's warm-up, timed write, ``foreachBatch`` function and, for the
sink, its delivery-engine check and the wait until its WAL is empty; Spark's
own Kafka sink with its options (:func:`spark_kafka_options`).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any, Callable

from . import common
from .spark_bench import (ALIKE, ASYNC, ENGINES, EXACTLY, EXACTLY_SPARK, FLUSH, FLUSH_ID, NOOP, RAW, RAW_POLL,
                          SPARK_KAFKA, SPARK_KAFKA_ALIKE, SYNC_ACK_TIMEOUT_S, SYNC_PART, WARM_TASKS, kafka_columns, log)
from .writers import EngineProbe, FlushWriter, NoopWriter, Prepare, RawWriter


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
    if writer in (RAW, RAW_POLL):
        fn = RawWriter(conf, topic, end="poll" if writer == RAW_POLL else "flush")
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
    extra: dict[str, Any] = {"exactly_once_lanes": 0} if writer == EXACTLY_SPARK else {}
    if writer == SYNC_PART:
        extra["record_ids"] = "partition"
    sink = RecoverableKafkaSink(name=run_name, kafka_conf=conf, topic=topic, wal_dir=wal_dir, ack_timeout_s=ack,
                                guarantee=guarantee, delivery_engine=ENGINES[writer], **extra)
    return Target(writer, topic, None, SINK_DDL, sink=sink, wal_dir=wal_dir)  # type: ignore[arg-type]
