"""Subprocess entry points that call ``write_partition`` without Spark (scenarios 10 and 11).

Usage: ``python -m tests.programs.writer_cli COMMAND ARGS_JSON``

* ``task``   -- run ``write_partition`` for each unit of ``units``; print one JSON line per unit
               (the report, or the exception's type and message); exit 0.
* ``writer`` -- a crash-test writer: run its units in order, skipping those in its progress file,
               append each finished unit to it; ``crash_after_s`` arms a timer that logs "crash"
               and calls ``os._exit(137)``.
* ``drain``  -- adopt every orphan slot and wait until every slot of the sink is empty.
* ``drain_job`` -- what a task of the driver's drain job runs (``drain_worker``), until nothing is pending
               and no adopted slot is left (or ``timeout_s``); prints what the worker had.

A unit is ``[batch, partition, first_row, rows]``; record key = row number,
value = padded bytes (see tests/faults/streams.py). Log lines carry ``time.time()``
so the parent can check slot ownership across processes.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import threading
import time

from tests.faults.streams import unit_batches


def _config(a: dict):
    from spark_recoverable_sink.config import SinkConfig

    return SinkConfig.build(a["name"], a["kafka_conf"], a["wal_dir"], topic=a.get("topic"), **a.get("opts", {}))


def _event(what: str) -> None:
    logging.getLogger("writer_cli").warning("event=%s pid=%d", what, os.getpid())


def cmd_task(a: dict) -> None:
    from spark_recoverable_sink.task.writer import write_partition

    cfg = _config(a)
    for batch, partition, first, rows in a["units"]:
        try:
            rep = write_partition(cfg, batch, partition, a.get("attempt", 0),
                                  unit_batches(first, rows, a.get("value_size", 200)))
            out = {"ok": True, "report": rep.to_row()}
        except Exception as exc:  # noqa: BLE001 -- reported to the parent as data
            out = {"ok": False, "type": type(exc).__name__, "message": str(exc),
                   "path": getattr(exc, "path", None)}
        print(json.dumps(out), flush=True)
    if a.get("wait_idle_s"):
        from spark_recoverable_sink.task.runtime import get_runtime

        rt = get_runtime(cfg)
        end = time.monotonic() + a["wait_idle_s"]
        while time.monotonic() < end and not (rt.publisher.idle() and rt.wal.is_empty()):
            time.sleep(0.05)
    os._exit(0)


def cmd_writer(a: dict) -> None:
    from spark_recoverable_sink.task.writer import write_partition

    cfg = _config(a)
    progress = a["progress"]
    done = set()
    if os.path.exists(progress):
        with open(progress) as f:
            done = {tuple(map(int, line.split())) for line in f if line.strip()}
    crash = a.get("crash_after_s")
    if crash is not None:
        def boom() -> None:
            _event("crash")
            os._exit(137)

        threading.Timer(crash, boom).start()
    _event("start")
    for batch, partition, first, rows in a["units"]:
        if (batch, partition) in done:
            continue
        write_partition(cfg, batch, partition, a.get("attempt", 0), unit_batches(first, rows, a.get("value_size", 200)))
        with open(progress, "a") as f:
            f.write(f"{batch} {partition}\n")
            f.flush()
            os.fsync(f.fileno())
    # Leave when everything is acked (or after a while: the slot keeps the rest for an adopter).
    from spark_recoverable_sink.task.runtime import get_runtime

    rt = get_runtime(cfg)
    end = time.monotonic() + a.get("linger_s", 10)
    # An armed crash always fires: a writer that finished early dies idle, holding its slot
    # (a crash point like any other), instead of leaving before its crash time.
    armed = crash is not None
    while time.monotonic() < end and (armed or not (rt.publisher.idle() and rt.wal.is_empty())):
        time.sleep(0.05)
    _event("exit")
    os._exit(0)


def cmd_drain(a: dict) -> None:
    from spark_recoverable_sink.task.runtime import get_runtime
    from spark_recoverable_sink.task.writer import write_partition

    cfg = _config(a)
    _event("start")
    rep = write_partition(cfg, a.get("batch", 999_999), a.get("partition", 999), 0, iter(()))
    rt = get_runtime(cfg)
    end = time.monotonic() + a.get("timeout_s", 60)
    while time.monotonic() < end:
        rep2 = write_partition(cfg, a.get("batch", 999_999), a.get("partition", 999), 0, iter(()))
        if rt.publisher.idle() and rt.wal.is_empty() and not rt.adopter.adopted:
            break
        time.sleep(0.2)
    print(json.dumps({"replayed": rep.replayed + rep2.replayed, "adopted_left": sorted(rt.adopter.adopted),
                      "idle": rt.publisher.idle(), "problems": list(rep2.problems)}), flush=True)
    _event("exit")
    os._exit(0)


def cmd_drain_job(a: dict) -> None:
    from spark_recoverable_sink.task.drain import drain_worker
    from spark_recoverable_sink.task.runtime import get_runtime

    cfg = _config(a)
    _event("start")
    end = time.monotonic() + a.get("timeout_s", 60)
    replayed, out = 0, {}
    while time.monotonic() < end:
        out = drain_worker(cfg, 2.0)
        replayed += out["replayed"]
        rt = get_runtime(cfg)
        with rt.publisher.task():
            rt.adopter.release_drained()
        if out["pending"] == 0 and not rt.adopter.adopted:
            break
    rt = get_runtime(cfg)
    print(json.dumps({"replayed": replayed, "pending": out.get("pending"), "slot": out.get("slot"),
                      "adopted_left": sorted(rt.adopter.adopted), "problems": list(rt.problems())}), flush=True)
    _event("exit")
    os._exit(0)


def main() -> None:
    command, raw = sys.argv[1], sys.argv[2]
    a = json.loads(raw)
    if a.get("log"):
        logging.basicConfig(filename=a["log"], level=logging.INFO,
                            format="%(created).6f pid=%(process)d %(name)s %(levelname)s %(message)s")
    {"task": cmd_task, "writer": cmd_writer, "drain": cmd_drain, "drain_job": cmd_drain_job}[command](a)


if __name__ == "__main__":
    main()
