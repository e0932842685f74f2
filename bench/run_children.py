"""The child processes of ``bench/run.py``: a bench script or a bench/tasks.py task, its ``RESULT`` line back."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import uuid
from typing import Any

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_child(script: str, args: dict[str, Any], timeout_s: float, logdir: str, echo: bool = False) -> dict[str, Any]:
    """Run ``bench/<script>`` with a JSON argument in a child process; returns its ``RESULT`` line.

    Its stderr goes to a log file in ``logdir`` (with ``echo``, its ``[bench ...]``
    progress lines also to this process's stderr).
    """
    logfile = os.path.join(logdir, f"{os.path.splitext(script)[0]}-{uuid.uuid4().hex[:6]}.log")
    out: list[str] = []
    timed_out: list[bool] = []
    with open(logfile, "w") as err:
        proc = subprocess.Popen([sys.executable, os.path.join(REPO, "bench", script), json.dumps(args)],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO)

        def kill() -> None:
            timed_out.append(True)
            proc.kill()  # the child's own process (its Spark JVMs see their parent go and exit)

        timer = threading.Timer(timeout_s, kill)
        timer.start()
        reader = threading.Thread(target=lambda: out.extend(proc.stdout or ()), daemon=True)
        reader.start()
        try:
            for line in proc.stderr or ():  # until the child closes stderr (exits)
                err.write(line)
                if echo and line.startswith("[bench "):
                    sys.stderr.write(line)
            proc.wait()
            reader.join(10)
        finally:
            timer.cancel()
    if timed_out:
        raise RuntimeError(f"{script} still running after {timeout_s:.0f}s: killed (log {logfile})")
    for line in out:
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):])
    with open(logfile) as f:
        tail = f.read()[-3000:]
    raise RuntimeError(f"{script} exited {proc.returncode} without a result (log {logfile}); stderr tail:\n{tail}")


def run_task(task: str, args: dict[str, Any], timeout_s: float, logdir: str) -> dict[str, Any]:
    """Run a bench/tasks.py task in a child process; returns its RESULT."""
    logfile = os.path.join(logdir, f"{task}-{uuid.uuid4().hex[:6]}.log")
    with open(logfile, "w") as err:
        r = subprocess.run([sys.executable, os.path.join(REPO, "bench", "tasks.py"), task, json.dumps(args)],
                           stdout=subprocess.PIPE, stderr=err, text=True, timeout=timeout_s, cwd=REPO)
    for line in r.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):])
    with open(logfile) as f:
        tail = f.read()[-3000:]
    raise RuntimeError(f"task {task} exited {r.returncode} without a result; stderr tail:\n{tail}")
