"""A Spark Connect client of tests/programs/compat_app.py's server: the sink's Connect scenarios.

Run by compat_app with the same Python and ``PYTHONPATH``::

    python -m tests.programs.compat_client SPEC.json

Against ``sc://127.0.0.1:<connect_port>``, in order:

* ``cx_write``: ``sink.write(df)`` through Connect;
* ``cx_eo``: ``foreachBatch(sink)`` exactly-once (``run_id`` given: a Connect
  client cannot read the query's id) through ``stream_twice``, with a unit
  left to the settle's drain job (tests/compat/scenarios.py's ``ForcedDrain``):
  the batch ends only once a drain job, run from the server's foreachBatch
  worker through Connect, has committed it;
* ``cx_drain``: ``sink.drain(spark)`` through Connect.

Writes ``client.json`` in its directory.
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback
from typing import Any, Callable

from tests.compat.scenarios import Faults, ForcedDrain, stream_twice
from tests.hooks import Hooks


def main(spec_path: str) -> int:
    spec = json.load(open(spec_path))
    from pyspark.sql import SparkSession

    from spark_recoverable_sink import RecoverableKafkaSink

    t0 = time.monotonic()
    spark = SparkSession.builder.remote(f"sc://127.0.0.1:{spec['connect_port']}").getOrCreate()
    results: dict[str, Any] = {"cx_session_seconds": round(time.monotonic() - t0, 1)}
    hooks = Hooks(os.environ["RKS_HOOK_DIR"])
    work, tag = spec["work"], spec["tag"]
    wal = os.path.join(work, "wal")

    def write() -> dict[str, Any]:
        df = spark.range(0, spec["rows"], 1, 3).selectExpr(
            "cast(id as string) as key", "cast(concat('c-', cast(id as string)) as binary) as value")
        report = RecoverableKafkaSink(f"cx-write-{tag}", {"bootstrap.servers": spec["bootstrap"]},
                                      topic=spec["outputs"]["cx_write"], wal_dir=wal).write(df)
        return {"rows": report.rows, "acked": report.acked}

    def eo() -> dict[str, Any]:
        sink = RecoverableKafkaSink(f"cx-eo-{tag}", {"bootstrap.servers": spec["bootstrap"],
                                                     "transaction.timeout.ms": 30000},
                                    topic=spec["outputs"]["cx_eo"], wal_dir=wal, guarantee="exactly_once",
                                    exactly_once_lanes=2, ack_timeout_s=3.0, settle_timeout_s=120.0,
                                    run_id=f"cx-{tag}")
        faults = Faults(ForcedDrain(hooks, sink.name, batch=1, ack_timeout_s=3.0))
        return stream_twice(spark, spec["source"], sink, os.path.join(work, "chk-cx-eo"), stop_after=2,
                            faults=faults)

    def drain() -> dict[str, Any]:
        sink = RecoverableKafkaSink(f"cx-eo-{tag}", {"bootstrap.servers": spec["bootstrap"]},
                                    topic=spec["outputs"]["cx_eo"], wal_dir=wal)
        report = sink.drain(spark, timeout_s=10.0)
        return {"replayed": report.replayed, "pending": report.pending, "workers": report.workers}

    steps: dict[str, Callable[[], Any]] = {"cx_write": write, "cx_eo": eo, "cx_drain": drain}
    for name in spec.get("client_scenarios", list(steps)):
        t = time.monotonic()
        hooks.reset()
        try:
            results[name] = steps[name]()
        except Exception as exc:  # noqa: BLE001 - the scenario's failure is its result
            results[name] = {"error": f"{type(exc).__name__}: {exc}"[:4000], "trace": traceback.format_exc()[-4000:]}
        results[name]["seconds"] = round(time.monotonic() - t, 1)
        with open(os.path.join(work, "client.json.tmp"), "w") as f:
            json.dump(results, f, indent=1)
        os.replace(os.path.join(work, "client.json.tmp"), os.path.join(work, "client.json"))
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
