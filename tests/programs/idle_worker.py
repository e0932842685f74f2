"""Measure what happens to records pending in async mode when Spark closes idle Python workers.

    python -m tests.programs.idle_worker [--outage-s 180] [--rows 20000] [--out PATH]

Not in CI (it takes ``outage + 2`` minutes). A bounded ``availableNow`` query
writes ``--rows`` rows with ``ack_timeout_s=0`` while the sink's connections
are refused by the proxy (an outage: nothing of the sink reaches the broker).
The query ends with every record pending. Then, every 5 s, it notes which
Python workers are alive and which of them hold the sink's WAL slots; when the
outage ends it notes how many rows arrive by themselves within 60 s, then
runs ``sink.drain(spark)`` and counts again. Prints one JSON document (and
writes it to ``--out``).

What Spark 4.3 does (``PythonWorkerFactory``): a worker returned to the idle
pool is closed when the factory saw no activity for ``IDLE_WORKER_TIMEOUT_NS``
(one minute, hard-coded; checked every 10 s by its monitor thread). A closed
worker exits, and the sink's background thread with it.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import uuid


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--outage-s", type=float, default=180.0)
    ap.add_argument("--rows", type=int, default=20000)
    ap.add_argument("--files", type=int, default=4)
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)

    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    if repo not in sys.path:
        sys.path.insert(0, repo)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    from spark_recoverable_sink import RecoverableKafkaSink
    from tests.faults.brokers import HurtableBroker
    from tests.faults.procs import alive, spark_python_workers
    from tests.faults.proxy import SINK_CLIENT_ID
    from tests.faults.slots import slot_holders, slot_row_keys
    from tests.faults.streams import BatchProbe, start_stream, write_source
    from tests.kafka_helpers import create_topic, read_topic

    work = tempfile.mkdtemp(prefix="rks-idle-")
    broker = HurtableBroker(os.path.join(work, "kafka")).start()
    spark = (SparkSession.builder.master("local[2,3]").appName("rks-idle-worker")
             .config("spark.ui.enabled", "false")
             .config("spark.sql.shuffle.partitions", "4")
             .config("spark.sql.execution.arrow.maxRecordsPerBatch", "2000")
             .config("spark.python.worker.reuse", "true")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    out: dict = {"rows": args.rows, "outage_s": args.outage_s, "timeline": []}
    t0 = time.time()
    try:
        topic = f"idle-{uuid.uuid4().hex[:8]}"
        create_topic(broker.bootstrap, topic, partitions=3)
        name = f"idle-{uuid.uuid4().hex[:6]}"
        src, wal = os.path.join(work, "src"), os.path.join(work, "wal")
        write_source(src, args.rows, args.files, value_size=200)
        conf = {"bootstrap.servers": broker.bootstrap, "client.id": SINK_CLIENT_ID, "message.timeout.ms": 5000}
        sink = RecoverableKafkaSink(name, conf, topic=topic, wal_dir=wal, ack_timeout_s=0.0,
                                    retry_backoff_max_s=2.0, wait_for_broker=True)  # down from the start
        broker.proxy.refuse()
        outage_at = time.time()
        q = start_stream(spark, src, BatchProbe(sink), os.path.join(work, "chk"), files_per_trigger=1)
        q.awaitTermination(600)
        ended_at = time.time()
        out["query_exception"] = None if q.exception() is None else str(q.exception())[:300]
        out["pending_at_query_end"] = sum(r.pending for r in sink.reports)
        out["query_seconds"] = round(ended_at - outage_at, 1)

        def snapshot(label: str) -> None:
            holders = slot_holders(wal, name)
            in_wal = sum(len(slot_row_keys(os.path.join(wal, name, f"slot-{i:05d}"))) for i in holders)
            workers = spark_python_workers()
            out["timeline"].append({
                "t_after_query_end_s": round(time.time() - ended_at, 1), "label": label,
                "python_workers": len(workers),
                "slots_held_by_live_worker": sum(1 for p in holders.values() if p is not None and alive(p)),
                "slots_free": sum(1 for p in holders.values() if p is None), "records_in_wal": in_wal})
            print(json.dumps(out["timeline"][-1]), flush=True)

        snapshot("query ended")
        while time.time() - outage_at < args.outage_s:
            time.sleep(5)
            snapshot("outage")
        broker.proxy.restore()
        restored_at = time.time()
        snapshot("network back")
        got = read_topic(broker.bootstrap, topic, expected=args.rows, idle_s=60.0, timeout_s=70)
        out["arrived_within_60s_of_restore_without_drain"] = len({r.key for r in got.records})
        snapshot("60 s after the network is back")
        d0 = time.time()
        drained = sink.drain(spark, timeout_s=120)
        out["drain"] = {"replayed": drained.replayed, "pending": drained.pending, "workers": drained.workers,
                        "seconds": round(time.time() - d0, 1)}
        got = read_topic(broker.bootstrap, topic, expected=args.rows, idle_s=3.0, timeout_s=120)
        out["arrived_after_drain"] = len({r.key for r in got.records})
        out["restored_to_full_s"] = round(time.time() - restored_at, 1)
        snapshot("after drain")
    finally:
        out["total_s"] = round(time.time() - t0, 1)
        spark.stop()
        broker.stop()
    text = json.dumps(out, indent=1)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)
    return 0 if out.get("arrived_after_drain") == args.rows else 1


if __name__ == "__main__":
    sys.exit(main())
