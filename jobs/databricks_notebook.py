# Databricks notebook source
# MAGIC %md
# MAGIC # Stream into Kafka through `spark_recoverable_sink`
# MAGIC
# MAGIC Every row is committed to a write-ahead log on the executor's local disk (`/local_disk0/rks`) before
# MAGIC Kafka sees it, and retried from there until the broker acknowledges it (at-least-once; each record
# MAGIC carries an `rks-id` header to de-duplicate on).
# MAGIC
# MAGIC 1. install the wheel (upload `spark_recoverable_sink-<version>-py3-none-any.whl` to `/dbfs/FileStore/wheels/`);
# MAGIC 2. set the widgets (bootstrap servers, topic, security) and put the Kafka password in a secret scope:
# MAGIC    `databricks secrets put-secret <scope> <key>`;
# MAGIC 3. run all: a `foreachBatch` query with its batch reports, then the same through the data source
# MAGIC    `format("recoverable-kafka")`.
# MAGIC
# MAGIC Replace `source_df` with your own stream in the Kafka sink schema (`value`, optional `key`, `topic`,
# MAGIC `partition`, `headers`, `timestamp`).

# COMMAND ----------

# MAGIC %pip install /dbfs/FileStore/wheels/spark_recoverable_sink-0.1.0-py3-none-any.whl

# COMMAND ----------

dbutils.library.restartPython()

# COMMAND ----------

# MAGIC %md
# MAGIC ## Settings
# MAGIC
# MAGIC Widgets at the top of the notebook (or job parameters of the same names). `security_protocol`
# MAGIC `SASL_SSL` (the default) uses `sasl_mechanism`, `sasl_username` and the password from the secret scope;
# MAGIC the password is never printed (the sink's repr redacts it).

# COMMAND ----------

WIDGETS = {
    "bootstrap": "broker-1:9093",
    "topic": "rks-events",
    "sink_name": "notebook-to-kafka",
    "wal_dir": "/local_disk0/rks",
    "checkpoint": "/dbfs/rks/checkpoints/notebook-to-kafka",
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
# MAGIC The fullest form: batch reports on the sink object, a drain job after a failed batch, exactly-once
# MAGIC (`guarantee="exactly_once"`). The query stops once `batches` micro-batches were reported (a real job
# MAGIC runs until it is stopped); records still pending in the WALs are then drained.

# COMMAND ----------

from spark_recoverable_sink import RecoverableKafkaSink
from spark_recoverable_sink.jobs import stop_gracefully

sink = RecoverableKafkaSink(sink_name, kafka_conf, topic=topic, wal_dir=wal_dir)
print(sink)  # secrets redacted

# COMMAND ----------

query = (source_df.writeStream.queryName(sink_name.replace("-", "_")).foreachBatch(sink)
         .option("checkpointLocation", f"{checkpoint}/foreach-batch").start())
while query.isActive and len(sink.reports) < batches:
    query.awaitTermination(1)
stop_gracefully(query, 60)
if query.exception() is not None:
    raise query.exception()
if sum(r.pending for r in sink.reports):
    print(sink.drain(spark, timeout_s=60))

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
# MAGIC under their own names. Each batch's report is logged by the driver (`entry=recoverable-kafka`); no
# MAGIC exactly-once and no drain job in this form.

# COMMAND ----------

from spark_recoverable_sink import RecoverableKafkaDataSource

spark.dataSource.register(RecoverableKafkaDataSource)
ds_query = (source_df.writeStream.format("recoverable-kafka")
            .options(**{f"kafka.{k}": str(v) for k, v in kafka_conf.items() if k != "bootstrap.servers"})
            .option("kafka.bootstrap.servers", settings["bootstrap"]).option("topic", topic)
            .option("name", f"{sink_name}-ds").option("wal_dir", wal_dir)
            .option("checkpointLocation", f"{checkpoint}/data-source").start())
while ds_query.isActive and len(ds_query.recentProgress) < batches:
    ds_query.awaitTermination(1)
stop_gracefully(ds_query, 60)
if ds_query.exception() is not None:
    raise ds_query.exception()

# COMMAND ----------

display(spark.createDataFrame([(p["batchId"], p["numInputRows"], p["batchDuration"]) for p in ds_query.recentProgress],
                              "batch_id long, rows long, duration_ms long"))
