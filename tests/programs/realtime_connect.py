"""Spark's real-time mode through a Spark Connect session: ``foreach(sink.foreach_writer(df))``.

    SPARK_REMOTE=local[2] python -m tests.programs.realtime_connect '{"bootstrap": ..., "src": ..., "out": ...,
        "name": ..., "chk": ..., "wal": ..., "expected": N}'

Run in a process of its own (``SPARK_REMOTE`` makes ``getOrCreate()`` start a
local Connect server and return a Connect session: the writer is pickled by
the client and run by the server's Python workers), it starts the query on
the Kafka source ``src``, waits until ``out`` holds ``expected`` records or
the query stops (bounded: 240 s), stops it, and prints one JSON line: the
session's module, the run its records are named by (the query id's first 16
hex digits), whether the query was still active, and its exception.
"""

from __future__ import annotations

import json
import sys
import time


def main(argv: list[str]) -> int:
    args = json.loads(argv[0])
    from confluent_kafka import Consumer, TopicPartition
    from pyspark.sql import SparkSession

    from spark_recoverable_sink import RecoverableKafkaSink

    spark = SparkSession.builder.getOrCreate()
    sink = RecoverableKafkaSink(args["name"], {"bootstrap.servers": args["bootstrap"], "linger.ms": 5},
                                topic=args["out"], wal_dir=args["wal"])
    df = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", args["bootstrap"])
          .option("subscribe", args["src"]).option("startingOffsets", "earliest").load())
    q = (df.writeStream.foreach(sink.foreach_writer(df)).outputMode("update").trigger(realTime="5 seconds")
         .option("checkpointLocation", args["chk"]).start())
    c = Consumer({"bootstrap.servers": args["bootstrap"], "group.id": f"{args['name']}-watch",
                  "enable.auto.commit": False})
    parts = c.list_topics(args["out"], timeout=30).topics[args["out"]].partitions
    c.assign([TopicPartition(args["out"], p, 0) for p in parts])
    seen, end = 0, time.monotonic() + 240
    while seen < args["expected"] and q.isActive and time.monotonic() < end:
        seen += sum(1 for m in c.consume(1000, 0.5) if m.error() is None)
    c.close()
    active = q.isActive
    error = None if active else str(q.exception())
    run = str(q.id).replace("-", "")[:16]
    if active:
        q.stop()
    print(json.dumps({"session": type(spark).__module__, "run": run, "active": active, "exception": error}),
          flush=True)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
