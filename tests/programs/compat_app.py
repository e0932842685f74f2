"""One Spark release's headline scenarios in one application (tests/compat; tests/spark for Spark Connect).

Run by the tests with a release's Python, the installed wheel first on
``PYTHONPATH`` (tests/compat/conftest.py), from a directory of its own::

    python -m tests.programs.compat_app SPEC.json

``SPEC.json`` names the broker, the input (a Kafka topic, or parquet files
where the release has no Kafka connector), one output topic per scenario,
the jars, and whether to start a Spark Connect server (then
tests/programs/compat_client.py runs the Connect scenarios against it). One
local[2,3] session (task retries allowed) runs, in order:

* ``fb_alo`` / ``fb_eo``: ``foreachBatch(sink)`` at-least-once / exactly-once
  (``exactly_once_lanes=2``: the re-split) through tests/compat/scenarios.py's
  ``stream_twice``: a Python worker SIGKILLed mid-batch, the query stopped and
  restarted from its checkpoint; exactly-once also has a unit left to the
  settle's drain job (``ForcedDrain``);
* ``write`` / ``write_eo``: ``sink.write(df)``;
* ``ds``: ``format("recoverable-kafka")``, batch and streaming (PySpark 4.1+;
  before, the error importing it says why);
* ``avro``: ``sink.write(df)`` with ``value_format=Avro(...)`` (Spark's Avro
  package where Maven Central serves it; without it, the sink's error);
* ``notebook``: templates/databricks_notebook.py's cells (tests/notebook_cells.py's stand-ins for
  ``dbutils`` and ``display``), both its forms where the release has them;
* ``installed``: where the driver and the Python workers import the package from.

Writes ``results.json`` in its directory: per scenario what happened (errors
as text); the tests read the topics back.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import time
import traceback
from typing import Any, Callable

from tests.compat.scenarios import Faults, ForcedDrain, WorkerKill, stream_twice
from tests.hooks import Hooks

AVRO_SCHEMA = {"type": "record", "name": "Row", "namespace": "compat", "fields": [
    {"name": "id", "type": "long"}, {"name": "text", "type": "string"}]}


def _session(spec: dict[str, Any]) -> Any:
    from pyspark.sql import SparkSession

    b = (SparkSession.builder.master("local[2,3]").appName("rks-compat").config("spark.ui.enabled", "false")
         .config("spark.sql.shuffle.partitions", "4").config("spark.sql.streaming.stopTimeout", "60s")
         .config("spark.python.worker.reuse", "true").config("spark.ui.showConsoleProgress", "false"))
    if spec.get("jars"):
        b = b.config("spark.jars", ",".join(spec["jars"]))
    if spec.get("connect_port"):  # a Spark Connect server in this application (what remote("local") starts)
        b = (b.config("spark.plugins", "org.apache.spark.sql.connect.SparkConnectPlugin")
             .config("spark.connect.grpc.binding.port", str(spec["connect_port"])))
    spark = b.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def _conf(spec: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"bootstrap.servers": spec["bootstrap"], **extra}


def _installed(spark: Any) -> dict[str, Any]:
    import pyarrow as pa

    import spark_recoverable_sink
    from spark_recoverable_sink.driver.versions import features

    def where(batches: Any) -> Any:
        import spark_recoverable_sink as pkg

        for _ in batches:
            pass
        yield pa.RecordBatch.from_pylist([{"path": pkg.__file__}])

    paths = {r.path for r in spark.range(0, 2, 1, 2).mapInArrow(where, "path string").collect()}
    f = features()
    return {"driver": spark_recoverable_sink.__file__, "workers": sorted(paths), "pyspark": f.text,
            "python_data_source": f.python_data_source}


def _fb(spark: Any, spec: dict[str, Any], hooks: Hooks, name: str, eo: bool) -> dict[str, Any]:
    from spark_recoverable_sink import RecoverableKafkaSink

    work = spec["work"]
    opts: dict[str, Any] = {"guarantee": "exactly_once", "exactly_once_lanes": 2, "ack_timeout_s": 3.0,
                            "settle_timeout_s": 120.0} if eo else {}
    sink = RecoverableKafkaSink(f"{name}-{spec['tag']}", _conf(spec, **({"transaction.timeout.ms": 30000} if eo else {})),
                                topic=spec["outputs"][name], wal_dir=os.path.join(work, "wal"), **opts)
    drains: list[dict[str, Any]] = []
    plain_drain = sink.drain

    def drain(*args: Any, **kwargs: Any) -> Any:  # the drain jobs settle runs, noted
        report = plain_drain(*args, **kwargs)
        drains.append({"replayed": report.replayed, "pending": report.pending, "workers": report.workers,
                       "units": [[u["batch"], u["rows"]] for u in report.units], "at": time.time()})
        return report

    sink.drain = drain  # type: ignore[method-assign]
    faults = Faults(WorkerKill(hooks, "eo.produced_chunk" if eo else "task.mid_task", batch=1),
                    *([ForcedDrain(hooks, sink.name, batch=2, ack_timeout_s=3.0)] if eo else []))
    out = stream_twice(spark, spec["source"], sink, os.path.join(work, f"chk-{name}"), stop_after=3, faults=faults)
    out.update(drains=drains, batches=[{"batch": r.batch_id, "rows": r.rows, "pending": r.pending}
                                       for r in sink.reports])
    return out


def _write(spark: Any, spec: dict[str, Any], name: str, eo: bool) -> dict[str, Any]:
    from spark_recoverable_sink import RecoverableKafkaSink

    opts = {"guarantee": "exactly_once", "exactly_once_lanes": 4} if eo else {}
    df = spark.range(0, spec["rows"], 1, 3).selectExpr("cast(id as string) as key",
                                                        "cast(concat('w-', cast(id as string)) as binary) as value")
    report = RecoverableKafkaSink(f"{name}-{spec['tag']}", _conf(spec), topic=spec["outputs"][name],
                                  wal_dir=os.path.join(spec["work"], "wal"), **opts).write(df)
    return {"rows": report.rows, "acked": report.acked, "pending": report.pending}


def _ds(spark: Any, spec: dict[str, Any]) -> dict[str, Any]:
    from spark_recoverable_sink.driver.versions import features

    if not features().python_data_source:
        names: dict[str, Any] = {}
        exec("from spark_recoverable_sink import *", names)  # noqa: S102 - a star import works, without it
        star = sorted(n for n in names if not n.startswith("__"))
        try:
            from spark_recoverable_sink import RecoverableKafkaDataSource  # noqa: F401
        except ImportError as exc:
            return {"refused": f"{type(exc).__name__}: {exc}", "star": star}
        return {"refused": None, "star": star}
    from spark_recoverable_sink import RecoverableKafkaDataSource
    from tests.compat.scenarios import source

    # Registered here: Spark finds it by itself (tests/spark/test_datasource.py) through a lookup it runs once per
    # JVM in a Python process it waits 10 s for, and skips, saying so only in its WARN log, on a loaded machine.
    spark.dataSource.register(RecoverableKafkaDataSource)
    topic, work = spec["outputs"]["ds"], spec["work"]
    opts = {"kafka.bootstrap.servers": spec["bootstrap"], "topic": topic, "wal_dir": os.path.join(work, "wal")}
    df = spark.range(0, spec["rows"], 1, 2).selectExpr("cast(id as string) as key", "cast(id as string) as value")
    df.write.format("recoverable-kafka").options(**opts).option("name", f"ds-batch-{spec['tag']}").mode("append").save()
    q = (source(spark, spec["source"]).writeStream.format("recoverable-kafka").options(**opts)
         .option("name", f"ds-stream-{spec['tag']}").option("checkpointLocation", os.path.join(work, "chk-ds"))
         .trigger(availableNow=True).start())
    q.awaitTermination(300)
    return {"refused": None, "stream_error": str(q.exception())[:3000] if q.exception() else None}


def _avro(spark: Any, spec: dict[str, Any]) -> dict[str, Any]:
    from spark_recoverable_sink import Avro, RecoverableKafkaSink

    registry = {"url": spec["registry"]["url"], "basic.auth.user.info": {"env": spec["registry"]["auth_env"]}}
    sink = RecoverableKafkaSink(f"avro-{spec['tag']}", _conf(spec), topic=spec["outputs"]["avro"],
                                wal_dir=os.path.join(spec["work"], "wal"),
                                value_format=Avro(json.dumps(AVRO_SCHEMA), registry))
    df = spark.range(0, spec["rows"], 1, 2).selectExpr(
        "cast(id as string) as key", "named_struct('id', id, 'text', concat('t-', cast(id as string))) as value")
    report = sink.write(df)
    return {"rows": report.rows, "acked": report.acked}


def _notebook(spark: Any, spec: dict[str, Any]) -> dict[str, Any]:
    """templates/databricks_notebook.py's Python cells on this session, ``dbutils`` and ``display`` stood in for."""
    import contextlib
    import io

    from tests.notebook_cells import DS_SKIPPED, FakeDbutils, run_cells

    name = f"nb-{spec['tag']}"
    dbutils = FakeDbutils({"bootstrap": spec["bootstrap"], "topic": spec["outputs"]["notebook"], "sink_name": name,
                           "wal_dir": os.path.join(spec["work"], "wal-nb"),
                           "checkpoint": os.path.join(spec["work"], "chk-nb"), "security_protocol": "PLAINTEXT",
                           "rows_per_batch": "300", "batches": "2"}, "unused")
    out = io.StringIO()
    shown: list[Any] = []
    with contextlib.redirect_stdout(out):
        ns = run_cells(spark, dbutils, shown.append)
    ds = ns.get("ds_query")
    return {"name": name, "engines": ns["engines"], "drained_pending": ns["drained"].pending,
            "reports": [[r.batch_id, r.rows, r.acked, r.run] for r in ns["sink"].reports],
            "ds_skipped": DS_SKIPPED in out.getvalue(),
            "ds_progress": [[p["batchId"], p["numInputRows"]] for p in ds.recentProgress] if ds is not None else None}


def _client(spec: dict[str, Any], spec_path: str) -> dict[str, Any]:
    """tests/programs/compat_client.py against this application's Connect server."""
    t = time.monotonic()
    p = subprocess.run([sys.executable, "-m", "tests.programs.compat_client", spec_path], capture_output=True,
                       text=True, timeout=900, cwd=spec["work"])
    out_path = os.path.join(spec["work"], "client.json")
    out = json.load(open(out_path)) if os.path.exists(out_path) else {}
    out["client_rc"] = p.returncode
    out["client_seconds"] = round(time.monotonic() - t, 1)
    if p.returncode != 0:
        out["client_stderr"] = p.stderr[-4000:]
    return out


def main(spec_path: str) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    logging.getLogger("py4j").setLevel(logging.WARNING)
    spec = json.load(open(spec_path))
    results: dict[str, Any] = {}
    path = os.path.join(spec["work"], "results.json")
    hooks = Hooks(os.environ["RKS_HOOK_DIR"])
    t0 = time.monotonic()
    spark = _session(spec)
    results["session_seconds"] = round(time.monotonic() - t0, 1)
    steps: dict[str, Callable[[], Any]] = {
        "installed": lambda: _installed(spark),
        "write": lambda: _write(spark, spec, "write", eo=False),
        "write_eo": lambda: _write(spark, spec, "write_eo", eo=True),
        "fb_alo": lambda: _fb(spark, spec, hooks, "fb_alo", eo=False),
        "fb_eo": lambda: _fb(spark, spec, hooks, "fb_eo", eo=True),
        "ds": lambda: _ds(spark, spec),
        "avro": lambda: _avro(spark, spec),
        "notebook": lambda: _notebook(spark, spec),
        "connect": lambda: _client(spec, spec_path),
    }
    for name in spec["scenarios"]:
        t = time.monotonic()
        hooks.reset()
        try:
            results[name] = steps[name]()
        except Exception as exc:  # noqa: BLE001 - the scenario's failure is its result
            results[name] = {"error": f"{type(exc).__name__}: {exc}"[:4000], "trace": traceback.format_exc()[-4000:]}
        results[name]["seconds"] = round(time.monotonic() - t, 1)
        with open(path + ".tmp", "w") as f:
            json.dump(results, f, indent=1)
        os.replace(path + ".tmp", path)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
