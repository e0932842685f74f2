# Databricks notebook source
# MAGIC %md
# MAGIC # Stream into Kafka through `spark_recoverable_sink`
# MAGIC
# MAGIC Every row is committed to a write-ahead log (WAL) on the worker node's local disk (`/local_disk0/rks`)
# MAGIC before Kafka sees it, and retried from there until the broker acknowledges it (at-least-once; each
# MAGIC record carries an `rks-id` header to de-duplicate on).
# MAGIC
# MAGIC 1. install the wheel of your nodes' architecture from a Unity Catalog volume or from workspace files
# MAGIC    (next two cells);
# MAGIC 2. set the widgets (bootstrap servers, topic, security, the checkpoint directory on your volume) and put
# MAGIC    the Kafka password in a secret scope: `databricks secrets put-secret <scope> <key>`;
# MAGIC 3. run all: the delivery engine the driver and the executors got, a `foreachBatch` query with its batch
# MAGIC    reports and a drain, then the same through the data source `format("recoverable-kafka")` (PySpark 4.1+).
# MAGIC
# MAGIC Replace `source_df` with your own stream in the Kafka sink schema (`value`, optional `key`, `topic`,
# MAGIC `partition`, `headers`, `timestamp`).

# COMMAND ----------

# MAGIC %md
# MAGIC ## Install
# MAGIC
# MAGIC `make wheels` builds, into `dist/`, one wheel per CPU architecture with the native delivery engine (a C
# MAGIC extension for CPython 3.11+, i.e. Databricks Runtime 15.x and later; it opens the librdkafka that
# MAGIC confluent-kafka's wheel ships). Take the one of your cluster's nodes:
# MAGIC
# MAGIC | nodes | wheel |
# MAGIC | --- | --- |
# MAGIC | x86_64: most node types | `spark_recoverable_sink-0.1.0-cp311-abi3-manylinux2014_x86_64.manylinux_2_17_x86_64.whl` |
# MAGIC | aarch64: AWS Graviton node types | `spark_recoverable_sink-0.1.0-cp311-abi3-manylinux2014_aarch64.manylinux_2_17_aarch64.whl` |
# MAGIC
# MAGIC Upload it to a Unity Catalog volume (Catalog Explorer, or
# MAGIC `databricks fs cp dist/<wheel> dbfs:/Volumes/<catalog>/<schema>/<volume>/wheels/`) or to workspace files,
# MAGIC and install it by its full path, from either place:
# MAGIC
# MAGIC ```
# MAGIC %pip install /Volumes/<catalog>/<schema>/<volume>/wheels/spark_recoverable_sink-0.1.0-cp311-abi3-manylinux2014_x86_64.manylinux_2_17_x86_64.whl
# MAGIC %pip install /Workspace/Users/<user>/wheels/spark_recoverable_sink-0.1.0-cp311-abi3-manylinux2014_x86_64.manylinux_2_17_x86_64.whl
# MAGIC ```
# MAGIC
# MAGIC `%pip` takes a literal path (no pattern, no widget): replace `<catalog>/<schema>/<volume>` in the next cell
# MAGIC (and `x86_64` by `aarch64` on Graviton). pip refuses the wheel of the other architecture ("is not a
# MAGIC supported wheel on this platform") and fetches the dependencies (confluent-kafka, lmdb, ...) from the
# MAGIC cluster's package index. Not `/dbfs/FileStore`: libraries in the DBFS root are disabled by default since
# MAGIC Databricks Runtime 15.1. The pure-Python wheel (`...-py3-none-any.whl`) installs anywhere but runs the
# MAGIC slower Python engine: with `delivery_engine="native"`, as below, the sink refuses to run on it instead.

# COMMAND ----------

# MAGIC %pip install /Volumes/<catalog>/<schema>/<volume>/wheels/spark_recoverable_sink-0.1.0-cp311-abi3-manylinux2014_x86_64.manylinux_2_17_x86_64.whl

# COMMAND ----------

dbutils.library.restartPython()

# COMMAND ----------

# MAGIC %md
# MAGIC ## Settings
# MAGIC
# MAGIC Widgets at the top of the notebook (or job parameters of the same names). `security_protocol`
# MAGIC `SASL_SSL` (the default) uses `sasl_mechanism`, `sasl_username` and the password from the secret scope;
# MAGIC the password is never printed (the sink's repr redacts it). `checkpoint` is a directory on a Unity
# MAGIC Catalog volume (replace `<catalog>/<schema>/<volume>`), `wal_dir` the node's local disk (next section).

# COMMAND ----------

WIDGETS = {
    "bootstrap": "broker-1:9093",
    "topic": "rks-events",
    "sink_name": "notebook-to-kafka",
    "wal_dir": "/local_disk0/rks",
    "checkpoint": "/Volumes/<catalog>/<schema>/<volume>/checkpoints/notebook-to-kafka",
    "security_protocol": "SASL_SSL",
    "sasl_mechanism": "PLAIN",
    "sasl_username": "rks",
    "secret_scope": "kafka",
    "secret_key": "password",
    "rows_per_batch": "10000",
    "batches": "3",
}
for name, default in WIDGETS.items():
    dbutils.widgets.text(name, default)
settings = {name: dbutils.widgets.get(name) for name in WIDGETS}
print({k: v for k, v in settings.items() if k not in ("secret_scope", "secret_key")})
if "<" in settings["checkpoint"]:
    raise ValueError("set the checkpoint widget to a directory on your volume: "
                     "/Volumes/<catalog>/<schema>/<volume>/checkpoints/<name>")

# COMMAND ----------

password = dbutils.secrets.get(scope=settings["secret_scope"], key=settings["secret_key"])

protocol = settings["security_protocol"]
kafka_conf = {"bootstrap.servers": settings["bootstrap"], "security.protocol": protocol, "linger.ms": 20}
if protocol.startswith("SASL"):
    kafka_conf.update({"sasl.mechanism": settings["sasl_mechanism"], "sasl.username": settings["sasl_username"],
                       "sasl.password": password})
topic, sink_name, wal_dir = settings["topic"], settings["sink_name"], settings["wal_dir"]
checkpoint, batches = settings["checkpoint"], int(settings["batches"])

# COMMAND ----------

# MAGIC %md
# MAGIC ## Where the checkpoints and the WAL live
# MAGIC
# MAGIC * **Checkpoints** on the volume (`/Volumes/<catalog>/<schema>/<volume>/checkpoints/<name>`, one directory
# MAGIC   per query): they outlive the cluster, and a restarted query resumes from them.
# MAGIC * **The WAL** on each worker node's local disk (`/local_disk0/rks`): a record the sink accepted stays there
# MAGIC   until Kafka acknowledges it. Records still pending in a WAL live on that node's local disk only.
# MAGIC
# MAGIC On **autoscaling** and **spot** clusters nodes go away: a node removed by autoscaling, or lost as a spot
# MAGIC instance, takes its local disk with it, and with it the records pending in its WAL that were not acked
# MAGIC first. They are lost: Spark re-runs a task that was running on the lost node, not one that had returned.
# MAGIC So:
# MAGIC
# MAGIC * keep acks synchronous, `ack_timeout_s > 0` (the default, 30 s): a task returns once Kafka acknowledged its
# MAGIC   records, or when the timeout passed; only what was still pending then (the batch report's `pending`) is
# MAGIC   exposed. With `ack_timeout_s=0` (asynchronous) everything not yet acked is;
# MAGIC * call `sink.drain(spark)` before a planned scale-down and at the end of a bounded job (the query cell
# MAGIC   below does): one small job whose tasks, on the live executors, adopt the WAL slots dead Python workers
# MAGIC   left on their node and wait up to `timeout_s` for the acks. `pending > 0` in its report means records are
# MAGIC   still in WALs (delivered later by a live worker or the next run);
# MAGIC * what `drain()` cannot reach: a node that is already gone (its WAL went with it), and a node none of its
# MAGIC   tasks ran on (it runs one task per core of the cluster; the report's `workers` counts the Python workers
# MAGIC   it reached).

# COMMAND ----------

# MAGIC %md
# MAGIC ## The sink and its delivery engine
# MAGIC
# MAGIC `delivery_engine="native"`: the produce loop, the record-id header and the ack tracking run in the wheel's
# MAGIC C extension. Where the extension cannot load (the pure wheel, or the other architecture's), `"native"` is an
# MAGIC error (the tasks fail, saying why) instead of a silent fallback: `"auto"`, the default, would run the
# MAGIC slower Python engine and say so only once, at INFO, in the executors' logs. The second cell asks the
# MAGIC driver and the executors' Python workers which engine they get, with their architecture, and stops the
# MAGIC notebook if one cannot load it.

# COMMAND ----------

from spark_recoverable_sink import RecoverableKafkaSink
from spark_recoverable_sink.jobs import stop_gracefully

sink = RecoverableKafkaSink(sink_name, kafka_conf, topic=topic, wal_dir=wal_dir, delivery_engine="native",
                            ack_timeout_s=30.0)  # synchronous acks: see the section above
print(sink)  # secrets redacted

# COMMAND ----------

import os
import platform
import socket
import time

import pyarrow as pa
from spark_recoverable_sink import delivery_engine


def engine_here(config):
    """The delivery engine ``config`` gets in this process, as the sink chooses it, and why."""
    try:
        engine, why = delivery_engine(config)
    except ImportError as exc:  # delivery_engine="native" and the extension cannot load here
        engine, why = "unavailable", str(exc)
    return {"host": socket.gethostname(), "arch": platform.machine(), "pid": os.getpid(), "engine": engine,
            "why": why}


def probe(batches, config=sink.config):
    for _ in batches:
        pass
    time.sleep(0.2)  # busy a little, so that the probe tasks land on different Python workers
    yield pa.RecordBatch.from_pylist([engine_here(config)])


try:
    tasks = spark.sparkContext.defaultParallelism  # one probe task per core
except Exception:  # standard access mode (Spark Connect): no SparkContext
    tasks = 8
executors = (spark.range(0, tasks, 1, tasks)
             .mapInArrow(probe, "host string, arch string, pid long, engine string, why string").collect())
engines = [{"where": "driver", **engine_here(sink.config)}] + [{"where": "executor", **r.asDict()} for r in executors]
seen = {}
for e in engines:
    seen.setdefault((e["where"], e["host"], e["arch"], e["engine"], e["why"]), set()).add(e["pid"])
for (where, host, arch, engine, why), pids in sorted(seen.items()):
    print(f"{where} {host} ({arch}, {len(pids)} Python process(es)): delivery engine {engine}: {why}")
if any(e["engine"] == "unavailable" for e in engines):
    raise RuntimeError("the native delivery engine cannot load everywhere (above): install the wheel of the "
                       "nodes' architecture (Install), or set delivery_engine='auto' to run the Python engine")

# COMMAND ----------

# MAGIC %md
# MAGIC ## The input
# MAGIC
# MAGIC A demo stream: `rate-micro-batch`, key = the row's number, value = `{"n": ..., "ts": ...}`.

# COMMAND ----------

source_df = (spark.readStream.format("rate-micro-batch").option("rowsPerBatch", int(settings["rows_per_batch"]))
             .option("numPartitions", 2).load()
             .selectExpr("cast(value as string) as key",
                         "to_json(named_struct('n', value, 'ts', cast(timestamp as string))) as value"))

# COMMAND ----------

# MAGIC %md
# MAGIC ## `foreachBatch(sink)`
# MAGIC
# MAGIC The fullest form, on PySpark 3.5 and later: batch reports on the sink object, a drain job after a failed
# MAGIC batch, exactly-once (`guarantee="exactly_once"`). The query stops once `batches` micro-batches were
# MAGIC reported (a real job runs until it is stopped); then `sink.drain(spark)` delivers what the WALs still hold.

# COMMAND ----------

query = (source_df.writeStream.queryName(sink_name.replace("-", "_")).foreachBatch(sink)
         .option("checkpointLocation", f"{checkpoint}/foreach-batch").start())
while query.isActive and len(sink.reports) < batches:
    query.awaitTermination(1)
stop_gracefully(query, 60)
if query.exception() is not None:
    raise query.exception()
drained = sink.drain(spark, timeout_s=60)  # the end of a bounded job (and before a planned scale-down)
print(drained)

# COMMAND ----------

REPORT_COLUMNS = ["batch_id", "run", "rows", "acked", "pending", "retried", "dead_lettered", "replayed", "seconds"]
display(spark.createDataFrame([{k: r.as_dict()[k] for k in REPORT_COLUMNS} for r in sink.reports],
                              "batch_id long, run string, rows long, acked long, pending long, retried long, "
                              "dead_lettered long, replayed long, seconds double"))

# COMMAND ----------

# MAGIC %md
# MAGIC ## The data source `recoverable-kafka`
# MAGIC
# MAGIC A drop-in for `format("kafka")`: `kafka.*` options go to the producer, the sink's keywords are options
# MAGIC under their own names (`delivery_engine` `native` here too). Each batch's report is logged by the driver
# MAGIC (`entry=recoverable-kafka`); no exactly-once and no drain job in this form. It needs Python data sources
# MAGIC with a streaming Arrow writer (PySpark 4.1+): on an older runtime the next cell says so and skips the
# MAGIC section (`foreachBatch(sink)` above is the way there).

# COMMAND ----------

from spark_recoverable_sink import SparkVersionError

try:
    from spark_recoverable_sink import RecoverableKafkaDataSource
except SparkVersionError as exc:  # PySpark without streaming Arrow writers for Python data sources
    RecoverableKafkaDataSource = None
    print(f"The data source section is skipped: format(\"recoverable-kafka\") needs PySpark 4.1+ (Python data "
          f"sources with a streaming Arrow writer) and this is PySpark {exc.version}; foreachBatch(sink) above "
          "is the way on this version.")
ds_query = None
if RecoverableKafkaDataSource is not None:
    spark.dataSource.register(RecoverableKafkaDataSource)
    ds_query = (source_df.writeStream.format("recoverable-kafka")
                .options(**{f"kafka.{k}": str(v) for k, v in kafka_conf.items() if k != "bootstrap.servers"})
                .option("kafka.bootstrap.servers", settings["bootstrap"]).option("topic", topic)
                .option("name", f"{sink_name}-ds").option("wal_dir", wal_dir).option("delivery_engine", "native")
                .option("checkpointLocation", f"{checkpoint}/data-source").start())
    while ds_query.isActive and len(ds_query.recentProgress) < batches:
        ds_query.awaitTermination(1)
    stop_gracefully(ds_query, 60)
    if ds_query.exception() is not None:
        raise ds_query.exception()

# COMMAND ----------

if ds_query is not None:
    display(spark.createDataFrame([(p["batchId"], p["numInputRows"], p["batchDuration"])
                                   for p in ds_query.recentProgress],
                                  "batch_id long, rows long, duration_ms long"))
