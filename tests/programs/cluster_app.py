"""A streaming Spark app in ``local-cluster[2,1,1024]`` mode, run as a subprocess by scenarios 3 and 19.

Two executor JVMs (one core each) on this machine, sharing one wal_dir (the
disk survives the executor). It writes ``start <batch> <time>`` /
``end <batch> <time>`` lines to a status file as batches run, and at the end a
JSON file with the sink's partition reports and the query's exception.
``conf`` adds Spark settings, ``sink`` further sink options.

Usage: ``python -m tests.programs.cluster_app ARGS_JSON``
"""

from __future__ import annotations

import json
import os
import sys
import time


def main() -> None:
    a = json.loads(sys.argv[1])
    import pyspark

    # local-cluster workers write executor logs to $SPARK_HOME/work: use a SPARK_HOME of links to
    # pyspark's files, so that they land in the test's directory and not inside site-packages.
    home = a["spark_home"]
    os.makedirs(home, exist_ok=True)
    pdir = os.path.dirname(pyspark.__file__)
    for entry in os.listdir(pdir):
        if entry != "work" and not os.path.exists(os.path.join(home, entry)):
            os.symlink(os.path.join(pdir, entry), os.path.join(home, entry))
    os.environ["SPARK_HOME"] = home
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    from pyspark.sql import SparkSession

    from spark_recoverable_sink import RecoverableKafkaSink
    from tests.faults.streams import start_stream

    status = open(a["status"], "a", buffering=1)
    t0 = time.time()
    spark = (
        SparkSession.builder.master("local-cluster[2,1,1024]")
        .appName("rks-fault-executor-kill")
        .config("spark.ui.enabled", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.sql.execution.arrow.maxRecordsPerBatch", "2000")
        .config("spark.python.worker.reuse", "true")
        .config("spark.task.maxFailures", "4")
    )
    for k, v in a.get("conf", {}).items():
        spark = spark.config(k, v)
    spark = spark.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    status.write(f"up {time.time() - t0:.1f}\n")
    sink = RecoverableKafkaSink(a["name"], {"bootstrap.servers": a["bootstrap"]}, topic=a["topic"],
                                wal_dir=a["wal_dir"], ack_timeout_s=30.0, guarantee=a.get("guarantee", "at_least_once"),
                                delivery_engine=a.get("engine", "auto"), **a.get("sink", {}))

    def fn(df, batch_id):
        status.write(f"start {batch_id} {time.time():.3f}\n")
        sink(df, batch_id)
        status.write(f"end {batch_id} {time.time():.3f}\n")

    q = start_stream(spark, a["src"], fn, a["chk"], files_per_trigger=a.get("files_per_trigger", 2))
    exc = None
    try:
        q.awaitTermination(a.get("timeout_s", 400))
        exc = q.exception()
    except Exception as e:  # noqa: BLE001 -- reported to the parent
        exc = e
    out = {
        "exception": None if exc is None else str(exc)[:3000],
        "partitions": [p.to_row() for r in sink.reports for p in r.task_reports],
        "batches": [r.batch_id for r in sink.reports],
    }
    with open(a["out"], "w") as f:
        json.dump(out, f)
    status.write("done\n")
    spark.stop()


if __name__ == "__main__":
    main()
