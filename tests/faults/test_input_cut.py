"""Scenario 19: an exactly-once lane task whose input is cut part-way commits nothing of its unit.

In ``local-cluster[2,1,1024]`` (two executor JVMs, one core each), an
exactly-once batch is re-split into 2 lanes; its lane tasks read their rows
from the lane shuffle one block at a time (``spark.reducer.maxSizeInFlight``
1k). A lane task is parked at a named point after its first rows
(``task.mid_task``), the *other* executor JVM is SIGKILLed (the map outputs
it served are gone), and the task is released: its next fetch fails
(``FetchFailed``), and Spark closes the Python worker's input between two
Arrow messages, which pyarrow reads as a clean end of stream.

The task must not commit a unit of the rows it read (the retry brings the
whole unit: its lane's marker would then hold another digest, and the query
would die at that batch for good). Whether the fault lands depends on where
the lane task's fetches stood when it was parked: the killed executor's
blocks may all have been fetched already (no fetch fails), or the failure
may surface as an error rather than a cut between two Arrow messages. So the
scenario is arranged again, up to :data:`ATTEMPTS` runs, until one run cut a
lane's input; every run, whether its fault landed or not, must deliver every
row once (that is what the sink did), and only a scenario whose fault never
landed in all its runs fails on its premise.

The premise is the cut itself: the sink's own line saying a task's input
ended without Spark's end marker, whatever Spark did to end it. Most runs
also log the fetch failure (``Failed to get block``, kept in the scenario's
figures); one CI run saw the cut without that line (Spark ended the task's
input another way after the executor's loss), which tests the same thing
of the sink. Judged by what a read_committed consumer reads: every row once.
"""

from __future__ import annotations

import glob
import json
import os
import re
import subprocess
import sys

import pytest

from .conftest import new_topic, sink_name
from .procs import REPO, executor_jvms, executor_of, kill9
from .readback import read_back
from .streams import write_source

pytestmark = pytest.mark.spark

N, FILES = 24000, 8


def _logs(spark_home: str) -> str:
    text = []
    for path in glob.glob(os.path.join(spark_home, "work", "*", "*", "stderr")):
        with open(path, errors="replace") as f:
            text.append(f.read())
    return "\n".join(text)


ATTEMPTS = 5  # runs of the scenario until one cuts a lane's input (the fetch fails or not; the cut lands or not)


def _run_once(broker, tmp_path, hooks, n: int) -> dict:
    """One run of the scenario in ``tmp_path/run-<n>``: its read-back, the app's result and the executors' logs."""
    base = tmp_path / f"run-{n}"
    base.mkdir()
    src, wal = str(tmp_path / "src"), str(base / "wal")
    topic = new_topic(broker.bootstrap, partitions=2)
    name = sink_name("f19")
    home = str(base / "spark_home")
    args = {"bootstrap": broker.bootstrap, "topic": topic, "src": src, "wal_dir": wal, "chk": str(base / "chk"),
            "name": name, "status": str(base / "status.txt"), "out": str(base / "out.json"),
            "files_per_trigger": FILES, "spark_home": home, "guarantee": "exactly_once",
            # one map task per file (4 on each executor: each lane has remote blocks to fetch one at a time)
            "sink": {"exactly_once_lanes": 2, "settle_timeout_s": 240.0, "coalesce_tasks": False},
            "conf": {"spark.reducer.maxSizeInFlight": "1k", "spark.sql.execution.arrow.maxRecordsPerBatch": "500",
                     "spark.sql.files.maxPartitionBytes": "1m"}}
    env = {**os.environ, "PYTHONPATH": REPO}
    parked = hooks.park("task.mid_task", batch=0, rows__ge=1000)
    log = open(base / "app.log", "wb")
    app = subprocess.Popen([sys.executable, "-m", "tests.programs.cluster_app", json.dumps(args)], cwd=REPO, env=env,
                           stdout=log, stderr=subprocess.STDOUT)
    try:
        at = parked.wait(240)
        executors = executor_jvms(app.pid)
        mine = executor_of(at["pid"], executors)
        others = [e for e in executors if e != mine]
        assert mine is not None and len(others) == 1, f"worker {at['pid']} under {mine}; executors {executors}"
        kill9(others[0])
        parked.release()
        try:
            app.wait(400)
        except subprocess.TimeoutExpired:
            app.kill()
            raise
        t = read_back(broker.bootstrap, topic, range(N), None, isolation="read_committed")
    finally:
        if app.poll() is None:
            app.kill()
        log.close()
    res = json.load(open(args["out"])) if os.path.exists(args["out"]) else {"exception": "no output"}
    return {"t": t, "res": res, "rc": app.returncode, "logs": _logs(home), "at": at}


def test_19_an_exactly_once_lane_whose_input_is_cut_commits_nothing_of_it(broker, tmp_path, scenario, hooks):
    scenario.scenario = "19_lane_input_cut_exactly_once"
    scenario.title = "Exactly-once lane task's input cut by a lost executor's shuffle (local-cluster)"
    scenario.fault = ("kill -9 of the other executor JVM while a lane task is parked at task.mid_task; "
                      "the task's next shuffle fetch fails and its input ends between two Arrow messages")
    write_source(str(tmp_path / "src"), N, FILES, value_size=1500)  # 36 MB: far more than the socket buffers hold
    runs = []
    for n in range(ATTEMPTS):  # every run must end with every row once; one of them must have cut an input
        run = _run_once(broker, tmp_path, hooks, n)
        runs.append(run)
        t, logs = run["t"], run["logs"]
        assert run["res"]["exception"] is None, run["res"]["exception"]
        assert run["rc"] == 0
        assert t.lost == 0, f"run {n}: lost {t.lost} rows, e.g. {t.lost_sample}"
        assert t.duplicates == 0, f"run {n}: {t.duplicates} duplicates visible to read_committed"
        if "without Spark's end marker" in logs:
            break
    last = runs[-1]
    scenario.apply(last["t"])
    scenario.figures.update(runs=len(runs), parked_at=last["at"]["coords"],
                            fetch_failed=["Failed to get block" in r["logs"] for r in runs],
                            cut_seen=["without Spark's end marker" in r["logs"] for r in runs],
                            # who logged errors in the executors (the cause of the cut, if not the fetch failure)
                            errors_by=sorted(set(re.findall(r" ERROR (\w+):", last["logs"]))))
    failed = [n for n, r in enumerate(runs) if "Failed to get block" in r["logs"]]
    assert "without Spark's end marker" in last["logs"], (
        f"premise: no lane task's input was cut part-way in {len(runs)} runs (a fetch failed in runs {failed})")
