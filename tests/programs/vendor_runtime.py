"""The sink's tasks under a PySpark whose worker is not PySpark's ``worker.py``: a vendor runtime, or a refactor.

    python -m tests.programs.vendor_runtime BOOTSTRAP ALO_TOPIC EO_TOPIC WAL_DIR RUNTIME_DIR

Run in a process of its own: a fresh ``local[1]`` SparkSession whose Python
workers run ``pyspark_vendor_runtime``, a copy of this PySpark's
``pyspark/worker.py`` under another name, written to ``RUNTIME_DIR`` and
named by Spark's own setting ``spark.python.worker.module`` (what a vendor
runtime that ships its own worker does; PySpark's daemon imports a worker
module whose name starts with ``pyspark``). Nothing of the sink is changed
or patched: its tasks simply find no frame of PySpark's ``worker.py`` on their
stack. It looks at the stack of a task (the ``main`` frames there), writes
2,000 rows with ``sink.write()`` at-least-once, then exactly-once, and prints
one JSON line: the ``main`` frames a task ran under, what each write acked,
and the error of each write that failed.
"""

from __future__ import annotations

import json
import os
import sys
import uuid

MODULE = "pyspark_vendor_runtime"


def _mains(batches):  # runs in the Python worker: the files of the ``main`` frames on its stack
    import pyarrow as pa

    for _ in batches:
        pass
    frame, files = sys._getframe(), []
    while frame is not None:
        if frame.f_code.co_name == "main":
            files.append(frame.f_code.co_filename)
        frame = frame.f_back
    yield pa.RecordBatch.from_arrays([pa.array(files or [""], pa.string())], names=["file"])


def main(argv: list[str]) -> int:
    bootstrap, alo_topic, eo_topic, wal_dir, runtime_dir = argv
    import pyspark

    with open(os.path.join(os.path.dirname(pyspark.__file__), "worker.py")) as f:
        source = f.read()
    with open(os.path.join(runtime_dir, f"{MODULE}.py"), "w") as f:
        f.write(source)
    # The driver's environment is the workers': Spark puts its own paths before this one.
    os.environ["PYTHONPATH"] = os.pathsep.join([runtime_dir] + [p for p in os.environ.get("PYTHONPATH", "").split(
        os.pathsep) if p])
    from pyspark.sql import SparkSession

    from spark_recoverable_sink import RecoverableKafkaSink

    spark = (SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false")
             .config("spark.python.worker.reuse", "true").config("spark.python.worker.module", MODULE)
             .getOrCreate())
    out: dict = {"pyspark": pyspark.__version__}
    try:
        out["mains"] = sorted({r.file for r in spark.range(1, numPartitions=1).mapInArrow(_mains, "file string")
                              .collect()})
        df = spark.range(2000).selectExpr("cast(id % 50 as string) as key", "repeat('v', 100) as value")
        out["acked"], out["errors"] = {}, {}
        for guarantee, topic in (("at_least_once", alo_topic), ("exactly_once", eo_topic)):
            sink = RecoverableKafkaSink(name=f"vendor-{uuid.uuid4().hex[:6]}", topic=topic, wal_dir=wal_dir,
                                        kafka_conf={"bootstrap.servers": bootstrap}, guarantee=guarantee,
                                        marker_topic=f"mk-vendor-{uuid.uuid4().hex[:8]}")
            try:
                out["acked"][guarantee] = sink.write(df.repartition(2)).acked
            except Exception as exc:  # noqa: BLE001 -- what the write raised is the result
                out["errors"][guarantee] = f"{type(exc).__name__}: {exc}"[-3000:]
    finally:
        spark.stop()
    print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
