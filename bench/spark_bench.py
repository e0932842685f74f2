"""The Spark benchmarks: batch-write throughput and micro-batch latency, per writer.

Every writer gets the same cached DataFrame (or the same rate source), the
same partition count, the same Spark settings, the same broker and the same
producer settings. Runs are interleaved (round 1 of every writer, then round 2
..., the order rotated each round) so that a noisy neighbour hurts every writer
alike, and each timed run is preceded by an untimed warm-up task
(:class:`bench.writers.Prepare`). Every run writes to a topic of its own, which
is deleted afterwards (its log would fill the broker's disk).

This module holds what every section shares: the writers' names, labels and
delivery engines, the SparkSession and the rows' Kafka columns. A writer bound
to a topic is in :mod:`bench.spark_target`; the sections are in
:mod:`bench.spark_throughput`, :mod:`bench.spark_latency` and
:mod:`bench.spark_scaling`.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any

RAW, FLUSH, SYNC, ASYNC, EXACTLY = "raw", "flush-writer", "sink-sync", "sink-async", "sink-exactly-once"
NOOP = "noop"  # reads its rows, writes nothing (the part of a write's time Spark itself sets)
FLUSH_ID = "flush-writer-id"  # throughput only: the flush-writer sending the sink's id header (the header's cost)
SYNC_PY = "sink-sync-python"  # throughput only: sink sync on the Python delivery engine (what the native one saves)
EXACTLY_SPARK = "sink-exactly-once-no-resplit"  # exactly_once_lanes=0: Spark's partitions as lanes, no shuffle
RAW_POLL = "raw-poll"  # throughput only: the raw loop ending as the sink's task does (poll until acked, no flush())
SYNC_PART = "sink-sync-partition-ids"  # throughput only: sink sync with record_ids="partition" (no re-split)
SPARK_KAFKA = "spark-kafka"  # Spark's own Kafka sink (connector jars from devtools/jvm.py), the writer users pick today
#: Spark's own Kafka sink with the batching every librdkafka writer here has (linger.ms 5, batch.size 1,000,000):
#: both clients set alike, so that neither wins by a default.
SPARK_KAFKA_ALIKE = "spark-kafka-alike"
ALIKE = {"linger.ms": "5", "batch.size": "1000000"}
WRITERS = (NOOP, RAW, RAW_POLL, FLUSH, FLUSH_ID, SPARK_KAFKA, SPARK_KAFKA_ALIKE, SYNC, SYNC_PART, SYNC_PY, ASYNC,
           EXACTLY, EXACTLY_SPARK)
LATENCY_WRITERS = (NOOP, RAW, FLUSH, SPARK_KAFKA, SPARK_KAFKA_ALIKE, SYNC, ASYNC, EXACTLY)
#: The scaling section (4, 16, 64, 200 partitions and local-cluster): the sink's two sync modes and the references.
SCALING_TP_WRITERS = (FLUSH, SPARK_KAFKA, SYNC, EXACTLY)
SCALING_LAT_WRITERS = (NOOP, FLUSH, SPARK_KAFKA, SYNC, EXACTLY, EXACTLY_SPARK)
LABELS = {
    NOOP: "no-op (Spark's floor)", RAW: "raw (ceiling)", FLUSH: "flush-writer (built-in sink stand-in)",
    RAW_POLL: "raw, ending as the sink does (poll until acked, no flush())",
    SYNC_PART: "sink at-least-once sync, record_ids=\"partition\" (no re-split)",
    FLUSH_ID: "flush-writer + rks-id header", SPARK_KAFKA: "Spark's Kafka sink (connector 4.2.0)",
    SPARK_KAFKA_ALIKE: "Spark's Kafka sink, batching set as librdkafka's (linger.ms 5, batch.size 1,000,000)",
    SYNC: "sink at-least-once sync (native engine)", SYNC_PY: "sink at-least-once sync (Python engine)",
    ASYNC: "sink at-least-once async (native engine)", EXACTLY: "sink exactly-once (native engine)",
    EXACTLY_SPARK: "sink exactly-once without the re-split (exactly_once_lanes=0)",
}
assert set(WRITERS) <= set(LABELS) and set(SCALING_LAT_WRITERS) <= set(LABELS), "every writer has its label"
#: The delivery engine each sink writer runs with: explicit, so that "auto" never decides what is measured.
ENGINES = {SYNC: "native", SYNC_PART: "native", SYNC_PY: "python", ASYNC: "native", EXACTLY: "native", EXACTLY_SPARK: "native"}
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
