"""What the sink's tasks import in a Python worker: a write of each guarantee through Spark, then a look.

    python -m tests.programs.worker_imports BOOTSTRAP TOPIC WAL_DIR

Run in a process of its own (a fresh ``local[1]`` SparkSession: one Python
worker, reused), it writes 2,000 rows with ``sink.write()`` at-least-once and
exactly-once, then runs a ``mapInArrow`` probe until it lands in a worker
that ran the sink's tasks (their reports carry its pid) and prints one JSON
line: the pids the sink's tasks ran in, and for the probed worker whether
``pandas`` is among its modules (read before the probe touches pyarrow).
"""

from __future__ import annotations

import json
import sys
import uuid


def _probe(batches):  # runs in the Python worker
    import os
    import sys

    loaded = "pandas" in sys.modules  # first: nothing of this function has asked pyarrow anything yet
    import numpy as np
    import pyarrow as pa

    for _ in batches:
        pass
    cols = [pa.Array.from_buffers(pa.int64(), 1, [None, pa.py_buffer(np.array([v], dtype=np.int64))])
            for v in (os.getpid(), int(loaded))]  # not pa.array: that would import pandas itself
    yield pa.RecordBatch.from_arrays(cols, names=["pid", "pandas"])


def main(argv: list[str]) -> int:
    bootstrap, topic, wal_dir = argv
    from pyspark.sql import SparkSession

    from spark_recoverable_sink import RecoverableKafkaSink

    spark = (SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false")
             .config("spark.python.worker.reuse", "true").getOrCreate())
    df = spark.range(2000).selectExpr("cast(id % 50 as string) as key", "repeat('v', 100) as value").repartition(2)
    pids, rows = set(), {}
    for guarantee in ("at_least_once", "exactly_once"):
        sink = RecoverableKafkaSink(name=f"imports-{uuid.uuid4().hex[:6]}", topic=topic, wal_dir=wal_dir,
                                    kafka_conf={"bootstrap.servers": bootstrap}, guarantee=guarantee)
        report = sink.write(df)
        rows[guarantee] = report.acked
        pids |= {p.pid for p in report.task_reports if p.rows}
    probed = []
    for _ in range(5):  # Spark reuses an idle worker; a new one is possible, so look again (bounded)
        got = spark.range(1, numPartitions=1).mapInArrow(_probe, "pid long, pandas long").collect()[0]
        probed.append({"pid": got.pid, "pandas": bool(got.pandas)})
        if got.pid in pids:
            break
    spark.stop()
    print(json.dumps({"sink_pids": sorted(pids), "acked": rows, "probed": probed}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
