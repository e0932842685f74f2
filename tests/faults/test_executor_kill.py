"""Scenario 3: an executor JVM is SIGKILLed mid-batch in ``local-cluster[2,1,1024]`` mode.

The Spark app runs in a subprocess (``cluster_app``) so it does not clash
with the session's local SparkSession. The executor to kill is the
``CoarseGrainedExecutorBackend`` JVM whose Python worker holds a WAL slot with
an open task attempt. Its Python daemon and workers die with it (stdin EOF ->
SIGHUP), Spark's standalone master launches a replacement executor, the lost
tasks re-run, and the replacement's tasks adopt the dead executor's slots
because they share the wal_dir (same machine, disk intact).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from spark_recoverable_sink.wal import Wal

from .conftest import new_topic, sink_name
from .harness import (
    REPO,
    LiveReader,
    executor_jvms,
    find_worker_mid_task,
    keys_of,
    kill9,
    ppid,
    read_back,
    slot_attempts,
    slot_holders,
    spark_python_workers,
    write_source,
)

pytestmark = pytest.mark.spark


def _executor_of(pid: int, executors: list[int]) -> int | None:
    p: int | None = pid
    while p and p > 1:
        if p in executors:
            return p
        p = ppid(p)
    return None


def test_03_executor_jvm_sigkill_mid_batch_local_cluster(broker, tmp_path, scenario):
    scenario.scenario, scenario.title = "03_executor_sigkill", "Executor JVM SIGKILLed mid-batch (local-cluster)"
    scenario.fault = "kill -9 of the CoarseGrainedExecutorBackend JVM whose Python worker has an OPEN attempt"
    n, files = 40000, 8
    src, wal = str(tmp_path / "src"), str(tmp_path / "wal")
    write_source(src, n, files, value_size=300)
    topic = new_topic(broker.bootstrap)
    name = sink_name("f03")
    status, out = str(tmp_path / "status.txt"), str(tmp_path / "out.json")
    args = {"bootstrap": broker.bootstrap, "topic": topic, "src": src, "wal_dir": wal, "chk": str(tmp_path / "chk"),
            "name": name, "status": status, "out": out, "files_per_trigger": 2, "spark_home": str(tmp_path / "spark_home")}
    env = {**os.environ, "PYTHONPATH": REPO}
    env.pop("RKS_FAULT_DIR", None)
    log = open(tmp_path / "app.log", "wb")
    app = subprocess.Popen([sys.executable, "-m", "tests.faults.cluster_app", json.dumps(args)], cwd=REPO, env=env,
                           stdout=log, stderr=subprocess.STDOUT)
    reader = LiveReader(broker.bootstrap, topic).start()
    killed = None
    try:
        end = time.monotonic() + 180
        while len(executor_jvms(app.pid)) < 2 and time.monotonic() < end and app.poll() is None:
            time.sleep(0.2)
        executors = executor_jvms(app.pid)  # known before the hunt, so that the kill follows the sighting at once
        hit = find_worker_mid_task(wal, name, lambda: spark_python_workers(app.pid), timeout_s=180, min_batch=1)
        assert hit is not None, f"no executor worker was seen mid-task; app rc={app.poll()}"
        victim = _executor_of(hit[0], executors)
        assert victim is not None, f"worker {hit[0]} is under no executor JVM {executors}"
        fault_at = kill9(victim)
        # What the dead executor's slot holds at once (before its worker, dying, releases the slot's lock).
        left = slot_attempts(os.path.join(wal, name, f"slot-{hit[1]:05d}"))
        killed = {"executor_pid": victim, "worker_pid": hit[0], "slot": hit[1], "executors_before": len(executors),
                  "slot_attempts_after_kill": {str(k): v for k, v in left.items()}}
        time.sleep(1)
        try:
            app.wait(400)
        except subprocess.TimeoutExpired:
            app.kill()
            raise
        full_at = reader.wait_for(keys_of(range(n)), 90)
        t = read_back(broker.bootstrap, topic, range(n), reader)
    finally:
        reader.stop()
        if app.poll() is None:
            app.kill()
        log.close()
    res = json.load(open(out)) if os.path.exists(out) else {"exception": "no output", "partitions": []}
    adoptions = []
    for root, _dirs, names in os.walk(str(tmp_path / "spark_home" / "work")):
        for fname in names:
            if fname == "stderr":
                with open(os.path.join(root, fname), errors="replace") as f:
                    adoptions += [line.strip()[:200] for line in f
                                  if "adopting orphan slot=" in line or " dropping " in line or " replaying " in line]
    parts = res["partitions"]
    scenario.apply(t)
    scenario.recovery(fault_at, full_at)
    scenario.figures.update(killed=killed, app_rc=app.returncode, batches=res.get("batches"),
                            tasks_rerun=sum(p["spark_attempt"] > 0 for p in parts),
                            replayed=sum(p["replayed"] for p in parts),
                            worker_pids=sorted({p["pid"] for p in parts}), adoptions=adoptions)
    scenario.notes.append("the WAL is executor-local: this holds because the replacement executor runs on the same "
                          "disk and wal_dir; a WAL on a lost disk/node is lost with it")
    assert res["exception"] is None, res["exception"]
    assert app.returncode == 0
    assert t.lost == 0, f"lost {t.lost} rows, e.g. {t.lost_sample}"
    # Nothing is left behind in any slot, the dead executor's included: its open attempt was either
    # finished by its dying worker (acked and pruned) or dropped by the task that adopted the slot.
    leftover = {}
    for idx in sorted(slot_holders(wal, name)):
        w = Wal(os.path.join(wal, name, f"slot-{idx:05d}"), sink_name=name, map_size=1 << 30, sync=False)
        try:
            st = w.stats()
        finally:
            w.close()
        if st.chunks or st.attempts:
            leftover[idx] = st.as_dict()
    scenario.figures["leftover"] = leftover
    assert not leftover, f"slots still hold records after the app ended: {leftover}"
