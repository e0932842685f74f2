"""Benchmark section ``formats``: what the Schema Registry formats cost (its own Spark app and registry).

Usage: ``python bench/formats.py '<json args>'`` (run by bench/run.py; prints ``RESULT <json>``).

The same cached rows (a struct of a long, a ~40-character string, a nullable
double and a long) are written, rounds interleaved, by:

* ``sink-avro``      the sink with ``value_format=Avro(...)`` (to_avro in the JVM, sync, WAL, id header);
* ``sink-plain``     the sink given the very bytes ``sink-avro`` sends, encoded beforehand and cached
                     (the difference is what the format costs);
* ``row-by-row``     what users write by hand today: ``foreachPartition`` with confluent-kafka's
                     ``AvroSerializer`` and a ``Producer`` per partition, one ``serialize`` + ``produce``
                     per row, ``flush()`` at the end (no WAL).

All wait for every ack (the sink with a large ``ack_timeout_s``, the hand route by ``flush``) and use
the same producer options (``acks=all``, idempotence, ``linger.ms=5``).
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
import time
import uuid
from typing import Any

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

SCHEMA = json.dumps({"type": "record", "name": "Order", "namespace": "bench", "fields": [
    {"name": "id", "type": "long"}, {"name": "item", "type": "string"},
    {"name": "price", "type": ["null", "double"], "default": None}, {"name": "ts", "type": "long"}]})
CONF = {"acks": "all", "enable.idempotence": "true", "linger.ms": "5"}


def _row_by_row(bootstrap: str, topic: str, registry_url: str) -> Any:
    def write(rows: Any) -> None:
        from confluent_kafka import Producer
        from confluent_kafka.schema_registry import SchemaRegistryClient
        from confluent_kafka.schema_registry.avro import AvroSerializer
        from confluent_kafka.serialization import MessageField, SerializationContext

        ser = AvroSerializer(SchemaRegistryClient({"url": registry_url}), SCHEMA)
        producer = Producer({"bootstrap.servers": bootstrap, **CONF})
        ctx = SerializationContext(topic, MessageField.VALUE)
        failed: list[str] = []

        def on_delivery(err: Any, _msg: Any) -> None:
            if err is not None:
                failed.append(str(err))

        for row in rows:
            while True:
                try:
                    producer.produce(topic, value=ser(row.value.asDict(), ctx), on_delivery=on_delivery)
                    break
                except BufferError:
                    producer.poll(0.05)
            producer.poll(0)
        if producer.flush(300) or failed:
            raise RuntimeError(f"row-by-row: {len(failed)} failed, e.g. {failed[:1]}")

    return write


def main() -> int:
    a = json.loads(sys.argv[1])
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F
    from pyspark.sql.avro.functions import to_avro

    from bench import common
    from devtools.jvm import spark_avro_jars
    from devtools.schema_registry import SchemaRegistry
    from spark_recoverable_sink import Avro, RecoverableKafkaSink

    rows, rounds, parts = a["rows"], a["rounds"], a.get("partitions", 2)
    spark = (SparkSession.builder.master(f"local[{parts}]").appName("rks-bench-formats")
             .config("spark.ui.enabled", "false").config("spark.driver.memory", "4g")
             .config("spark.python.worker.reuse", "true").config("spark.jars", ",".join(spark_avro_jars()))
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    registry = SchemaRegistry(tempfile.mkdtemp(prefix="bench-registry-")).start()
    out: dict[str, Any] = {"rows": rows, "rounds": rounds, "partitions": parts, "writers": {}}
    try:
        base = spark.range(0, rows, 1, parts).select(F.struct(
            F.col("id"), F.concat(F.lit("item-of-the-benchmark-"), F.sha2(F.col("id").cast("string"), 256)
                                  .substr(1, 18)).alias("item"),
            F.when(F.col("id") % 7 == 0, F.lit(None)).otherwise(F.col("id") * 0.5).alias("price"),
            (F.col("id") * 1000).alias("ts")).alias("value")).cache()
        base.count()
        fmt = Avro(SCHEMA, {"url": registry.url})
        sid = fmt.client().schema_id("bench-value", SCHEMA, "AVRO", True)
        header = bytearray(b"\x00" + sid.to_bytes(4, "big"))
        encoded = base.select(F.concat(F.lit(header), to_avro(F.col("value"), SCHEMA)).alias("value")).cache()
        out["value_bytes"] = encoded.select(F.avg(F.length("value"))).first()[0]
        wal = tempfile.mkdtemp(prefix="bench-formats-wal-")

        def sink(fmt_: Any) -> Any:
            return RecoverableKafkaSink(name=f"fmt-{uuid.uuid4().hex[:6]}", kafka_conf={"bootstrap.servers": a[
                "bootstrap"], **CONF}, topic=topic, wal_dir=wal, ack_timeout_s=900.0, value_format=fmt_,
                                        delivery_engine="native")

        runs: dict[str, list[float]] = {"sink-avro": [], "sink-plain": [], "row-by-row": []}
        for rnd in range(rounds + 1):  # round 0 warms up (not counted)
            for writer in runs:
                topic = f"bench-fmt-{writer}-{uuid.uuid4().hex[:6]}"
                common.create_topic(a["bootstrap"], topic, a.get("topic_partitions", 4))
                t0 = time.monotonic()
                if writer == "sink-avro":
                    sink(Avro(SCHEMA, {"url": registry.url}, subject="bench-value")).write(base)
                elif writer == "sink-plain":
                    sink(None).write(encoded)
                else:
                    base.foreachPartition(_row_by_row(a["bootstrap"], topic, registry.url))
                secs = time.monotonic() - t0
                if rnd == 0 and common.count_topic(a["bootstrap"], topic, rows) < rows:
                    raise RuntimeError(f"{writer}: fewer than {rows} records read back")
                if rnd:
                    runs[writer].append(rows / secs)
                common.delete_topic(a["bootstrap"], topic)
        for writer, rates in runs.items():
            out["writers"][writer] = {"rows_per_s": statistics.median(rates), "runs": rates}
        w = out["writers"]
        out["avro_vs_plain"] = w["sink-avro"]["rows_per_s"] / w["sink-plain"]["rows_per_s"]
        out["avro_vs_row_by_row"] = w["sink-avro"]["rows_per_s"] / w["row-by-row"]["rows_per_s"]
    finally:
        registry.stop()
        spark.stop()
    print("RESULT " + json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
