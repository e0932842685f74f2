"""Bounded, seeded soak run: a streaming query under random faults for a few minutes, then a full count.

    python -m tests.programs.soak [--seed 1] [--minutes 3] [--rows-per-second 1000] [--results PATH]

A feeder writes a parquet file every second; a processing-time query writes
it through the sink to a Kafka broker of its own behind the TcpProxy. Every
8-15 s (seeded) one fault from this list is injected:

* ``kill_worker``   -- kill -9 of a pyspark worker parked mid-task (test hook ``task.mid_task``)
* ``after_commit``  -- the test hook ``task.after_commit``: the next worker to commit exits before acks
* ``broker_pause``  -- SIGSTOP the broker for 3-8 s (message.timeout.ms=5000)
* ``proxy_cut``     -- reset the sink's connections and refuse new ones for 3-8 s
* ``proxy_stall``   -- freeze the sink's connections for 3-8 s
* ``query_restart`` -- stop the query and start it again from its checkpoint

When the time is up the feeder stops, the query drains what is left, and the
topic is read back completely. Prints the fault log and the usual table, adds
a ``soak`` row to the results JSON, exits 1 if any row was lost. It ends by
itself: every wait in it is bounded.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import tempfile
import threading
import time
import uuid


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--minutes", type=float, default=3.0)
    ap.add_argument("--rows-per-second", type=int, default=1000)
    ap.add_argument("--results", default=None, help="results JSON (default: tests/faults/results/last_run.json)")
    args = ap.parse_args(argv)
    if args.minutes <= 0 or args.minutes > 30:
        ap.error("--minutes must be in (0, 30]")

    work = tempfile.mkdtemp(prefix="rks-soak-")
    hook_dir = os.path.join(work, "hooks")
    os.makedirs(hook_dir)
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    # Test hooks in Spark's Python workers: set before Spark starts them (tests/hooks.py).
    os.environ.update({"RKS_TEST_HOOKS": "tests.hooks", "RKS_HOOK_DIR": hook_dir})
    os.environ["PYTHONPATH"] = os.pathsep.join([p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
                                               + [repo])
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    if repo not in sys.path:
        sys.path.insert(0, repo)

    from pyspark.sql import SparkSession

    from spark_recoverable_sink import RecoverableKafkaSink
    from tests.faults.brokers import HurtableBroker
    from tests.faults.procs import kill9
    from tests.faults.proxy import SINK_CLIENT_ID
    from tests.faults.readback import LiveReader, keys_of, read_back
    from tests.faults.scenario_results import ScenarioRow, print_table, record_result
    from tests.faults.streams import BatchProbe, start_stream, write_source
    from tests.hooks import Hooks
    from tests.kafka_helpers import create_topic

    hooks = Hooks(hook_dir)

    rng = random.Random(args.seed)
    t_start = time.time()
    log_lines: list[str] = []

    def note(msg: str) -> None:
        line = f"[{time.time() - t_start:7.1f}s] {msg}"
        log_lines.append(line)
        print(line, flush=True)

    broker = HurtableBroker(os.path.join(work, "kafka")).start()
    spark = (SparkSession.builder.master("local[2,3]").appName("rks-soak")
             .config("spark.ui.enabled", "false")
             .config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
             .config("spark.sql.shuffle.partitions", "4")
             .config("spark.sql.execution.arrow.maxRecordsPerBatch", "2000")
             .config("spark.python.worker.reuse", "true")
             .config("spark.sql.streaming.stopTimeout", "30s")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    topic = f"soak-{uuid.uuid4().hex[:8]}"
    create_topic(broker.bootstrap, topic, partitions=3)
    name = f"soak-{args.seed}-{uuid.uuid4().hex[:4]}"
    src, wal, chk = (os.path.join(work, d) for d in ("src", "wal", "chk"))
    os.makedirs(src)
    conf = {"bootstrap.servers": broker.bootstrap, "client.id": SINK_CLIENT_ID, "message.timeout.ms": 5000}
    opts = dict(topic=topic, wal_dir=wal, ack_timeout_s=2.0, retry_backoff_s=0.5, retry_backoff_max_s=2.0)

    sent = [0]
    stop_feed = threading.Event()

    def feed() -> None:
        while not stop_feed.is_set():
            write_source(src, args.rows_per_second, 1, value_size=200, start=sent[0])
            sent[0] += args.rows_per_second
            stop_feed.wait(1.0)

    def start_query():
        sink = RecoverableKafkaSink(name, conf, **opts)
        return sink, start_stream(spark, src, BatchProbe(sink), chk, files_per_trigger=2, available_now=False)

    reader = LiveReader(broker.bootstrap, topic).start()
    feeder = threading.Thread(target=feed, daemon=True)
    feeder.start()
    sink, q = start_query()
    faults = ["kill_worker", "after_commit", "broker_pause", "proxy_cut", "proxy_stall", "query_restart"]
    counts = {f: 0 for f in faults}
    counts["query_failed"] = 0
    end = t_start + args.minutes * 60
    first_fault = last_fault_end = None
    try:
        while time.time() < end:
            time.sleep(min(rng.uniform(8, 15), max(0.0, end - time.time())))
            if time.time() >= end:
                break
            if not q.isActive:
                counts["query_failed"] += 1
                note(f"query had stopped: {str(q.exception())[:300]}; restarting it")
                sink, q = start_query()
                continue
            f = rng.choice(faults)
            counts[f] += 1
            first_fault = first_fault or time.time()
            hold = rng.uniform(3, 8)
            if f == "kill_worker":
                parked = hooks.park("task.mid_task")
                try:
                    at = parked.wait(10)
                except AssertionError:
                    hooks.reset()  # no task ran within 10 s: disarm (and free one that just parked)
                    note("kill_worker: no task reached task.mid_task within 10 s")
                else:
                    kill9(at["pid"])
                    parked.release()
                    note(f"kill -9 worker pid={at['pid']} parked at {at['coords']}")
            elif f == "after_commit":
                hooks.crash("task.after_commit", after_rows=1)
                note("armed after_commit")
            elif f == "broker_pause":
                broker.pause()
                note(f"broker SIGSTOP for {hold:.1f}s")
                time.sleep(hold)
                broker.resume()
            elif f in ("proxy_cut", "proxy_stall"):
                getattr(broker.proxy, f.split("_")[1])()
                note(f"proxy {f.split('_')[1]} for {hold:.1f}s")
                time.sleep(hold)
                broker.proxy.restore()
            elif f == "query_restart":
                q.stop()
                sink, q = start_query()
                note("query stopped and restarted from its checkpoint")
            last_fault_end = time.time()
        stop_feed.set()
        feeder.join(10)
        note(f"feeding stopped after {sent[0]} rows; draining")
        drain_from = time.time()
        hooks.reset()  # disarm a hook that did not fire
        if not q.isActive:
            counts["query_failed"] += 1
            note(f"query had stopped: {str(q.exception())[:300]}; restarting it to drain")
            sink, q = start_query()
        drained = threading.Event()

        def drain() -> None:
            try:
                q.processAllAvailable()
            finally:
                drained.set()

        threading.Thread(target=drain, daemon=True).start()
        drained.wait(300)
        q.stop()
        full_at = reader.wait_for(keys_of(range(sent[0])), 180)
        t = read_back(broker.bootstrap, topic, range(sent[0]), reader, wait_s=60)
    finally:
        stop_feed.set()
        reader.stop()
        spark.stop()
        broker.stop()
    row = ScenarioRow(scenario="soak", title=f"Soak: {args.minutes:g} min of random faults (seed {args.seed})")
    row.fault = ", ".join(f"{k}={v}" for k, v in counts.items() if v)
    row.apply(t)
    row.recovery(last_fault_end, full_at)  # from the end of the last fault
    row.status = "passed" if t.lost == 0 else "failed"
    row.seconds = round(time.time() - t_start, 1)
    row.finished_at = time.strftime("%Y-%m-%dT%H:%M:%S")
    row.figures = {"drain_s": round(full_at - drain_from, 1) if full_at else None, "seed": args.seed,
                   "first_fault_to_full_delivery_s": round(full_at - first_fault, 1) if full_at and first_fault else None, "minutes": args.minutes, "rows_per_second": args.rows_per_second,
                   "faults": counts, "log": log_lines[-60:]}
    if args.results:
        os.environ["RKS_FAULT_RESULTS"] = args.results
    record_result(row)
    print()
    print_table([row.__dict__])
    if t.lost == 0:
        import shutil

        shutil.rmtree(work, ignore_errors=True)
    else:
        print(f"rows were lost; work dir kept for inspection: {work}")
    return 0 if t.lost == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
