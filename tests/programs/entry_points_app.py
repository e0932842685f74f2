"""A fresh Spark application writing through every entry point; run in its own process by the tests.

* ``format("recoverable-kafka")`` without registering it (a session looks
  its Python data sources up once, when it starts: only a fresh one shows that
  Spark finds the data source by itself), batch (``ds-batch``) and streaming
  (``ds-stream``, three micro-batches);
* with ``connect``: the same through a local Spark Connect server, plus
  ``sink.write(df)`` (``cx-write``), ``foreachBatch(sink)`` with a ``run_id``
  (``cx-stream``) and without one (must fail, naming ``run_id``); with
  ``RKS_TEST_REGISTRY_URL`` set, also ``sink.write(df)`` of a struct as Avro in
  Schema Registry's wire format to ``<TOPIC>-avro`` (``cx-avro``; the password
  from ``RKS_TEST_REGISTRY_AUTH``, Spark's Avro jars from ``RKS_TEST_SPARK_JARS``).

Prints one JSON line of results on stdout.

Usage: python -m tests.programs.entry_points_app BOOTSTRAP TOPIC WORK_DIR ROWS classic|connect
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any


def _until_batch(q: Any, batch: int) -> None:
    while q.isActive and (q.lastProgress is None or q.lastProgress["batchId"] < batch):
        q.awaitTermination(0.2)
    q.stop()


def _rate(spark: Any, rows: int, prefix: str) -> Any:
    return (spark.readStream.format("rate-micro-batch").option("rowsPerBatch", rows).option("numPartitions", 2)
            .load().selectExpr("cast(value as string) as key", f"concat('{prefix}', cast(value as string)) as value"))


#: the Avro schema of ``cx-avro``'s values (the registry subject ``<TOPIC>-avro-value``)
ROW_AVRO = {"type": "record", "name": "Row", "namespace": "cx", "fields": [
    {"name": "id", "type": "long"}, {"name": "text", "type": "string"}]}


def _avro(spark: Any, conf: dict, topic: str, wal: str, n: int, out: dict[str, Any]) -> None:
    from spark_recoverable_sink import Avro, RecoverableKafkaSink

    registry = {"url": os.environ["RKS_TEST_REGISTRY_URL"], "basic.auth.user.info": {"env": "RKS_TEST_REGISTRY_AUTH"}}
    sink = RecoverableKafkaSink("cx-avro", conf, topic=topic, wal_dir=wal,
                                value_format=Avro(json.dumps(ROW_AVRO), registry))
    df = spark.range(n).selectExpr("named_struct('id', id, 'text', concat('t-', cast(id as string))) as value")
    report = sink.write(df)
    out.update(avro_rows=report.rows, avro_acked=report.acked)


#: Spark Connect's answer when the Python process of a foreachBatch did not connect back to the JVM within its fixed
#: 10 s (importing PySpark's Connect client can take longer on a loaded machine): nothing ran yet, so the start is
#: tried again, at most _STARTS times (tests/compat/scenarios.py does the same).
_NOT_STARTED = "to connect back"
_STARTS = 5


def _start(writer: Any) -> Any:
    for attempt in range(1, _STARTS + 1):
        try:
            return writer.start()
        except Exception as exc:  # noqa: BLE001 - told apart by Spark's message
            if _NOT_STARTED not in str(exc) or attempt == _STARTS:
                raise
    raise AssertionError("unreachable")


def main(argv: list[str]) -> int:
    bootstrap, topic, work, rows, mode = argv[:5]
    n = int(rows)
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2")
    if os.environ.get("RKS_TEST_SPARK_JARS"):
        builder = builder.config("spark.jars", os.environ["RKS_TEST_SPARK_JARS"])
    spark = (builder.remote("local[2]") if mode == "connect" else builder.master("local[2]")).getOrCreate()
    out: dict[str, Any] = {"mode": mode}
    wal = os.path.join(work, "wal")
    opts = {"kafka.bootstrap.servers": bootstrap, "topic": topic, "wal_dir": wal, "ack_timeout_s": "30"}
    batch = spark.range(n).selectExpr("cast(id as string) as key", "concat('v-', cast(id as string)) as value")
    batch.write.format("recoverable-kafka").options(**opts).option("name", "ds-batch").mode("append").save()

    q = (_rate(spark, n // 2, "s-").writeStream.format("recoverable-kafka").options(**opts)
         .option("name", "ds-stream").option("checkpointLocation", os.path.join(work, "chk-ds"))
         .trigger(processingTime="500 milliseconds").start())
    _until_batch(q, 2)
    out.update(ds_query_id=str(q.id), ds_exception=str(q.exception()) if q.exception() else None)

    if mode == "connect":
        from spark_recoverable_sink import RecoverableKafkaSink

        conf = {"bootstrap.servers": bootstrap}
        report = RecoverableKafkaSink("cx-write", conf, topic=topic, wal_dir=wal).write(batch)
        out.update(write_rows=report.rows, write_acked=report.acked, write_run=report.run)
        sink = RecoverableKafkaSink("cx-stream", conf, topic=topic, wal_dir=wal, run_id="cxrun1")
        q = _start(_rate(spark, n // 2, "c-").writeStream.foreachBatch(sink)
                   .option("checkpointLocation", os.path.join(work, "chk-fb"))
                   .trigger(processingTime="500 milliseconds"))
        _until_batch(q, 2)
        out.update(fb_exception=str(q.exception()) if q.exception() else None)
        if os.environ.get("RKS_TEST_REGISTRY_URL"):
            _avro(spark, conf, f"{topic}-avro", wal, n, out)
        sink = RecoverableKafkaSink("cx-norun", conf, topic=topic, wal_dir=wal)
        q = _start(_rate(spark, 10, "x-").writeStream.foreachBatch(sink)
                   .option("checkpointLocation", os.path.join(work, "chk-norun")))
        try:
            q.awaitTermination(120)
        except Exception as exc:  # noqa: BLE001 - the failure is the result
            out.update(norun_error=str(exc)[:2000])
    print(json.dumps(out))
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
