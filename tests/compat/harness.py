"""The pytest side of the compatibility tier: inputs, output topics, and one run of tests/programs/compat_app.py.

Runs in the test process (the main environment). :func:`run_app` starts the
program with a given Python and ``PYTHONPATH`` in a directory of its own
(never the checkout: a Python worker started there would import the source
tree) and returns its ``results.json``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import uuid
from typing import Any

from tests.faults.streams import row_value, write_source
from tests.hooks import env_for
from tests.kafka_helpers import create_topic, produce_all

__all__ = ["REPO", "ROWS", "IN_PARTS", "PER_TRIGGER", "VALUE_SIZE", "tests_only_path", "kafka_input", "file_input",
           "output_topics", "run_app", "check_forced_drain"]

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
#: The streaming input: ROWS records in IN_PARTS partitions (or files), PER_TRIGGER a batch: 6 batches.
ROWS, IN_PARTS, PER_TRIGGER, VALUE_SIZE = 6000, 4, 1000, 64
_DROP = ("PYTHONPATH", "VIRTUAL_ENV", "SPARK_HOME", "PYSPARK_SUBMIT_ARGS", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON",
         "RKS_TEST_HOOKS", "RKS_HOOK_DIR", "SPARK_REMOTE", "SPARK_CONNECT_MODE_ENABLED")


def tests_only_path(base: str) -> str:
    """A directory holding only a link to the repository's ``tests`` (the programs, tests/hooks.py): with it
    on ``PYTHONPATH`` and not the repository root, the package can only come from the installed wheel."""
    d = os.path.join(base, "pypath")
    os.makedirs(d, exist_ok=True)
    link = os.path.join(d, "tests")
    if not os.path.islink(link):
        os.symlink(os.path.join(REPO, "tests"), link)
    return d


def kafka_input(bootstrap: str) -> dict[str, Any]:
    """An input topic of :data:`ROWS` records (key = row number, value = tests/faults/streams.py's row)."""
    topic = f"compat-in-{uuid.uuid4().hex[:8]}"
    create_topic(bootstrap, topic, partitions=IN_PARTS)
    produce_all(bootstrap, topic, ({"key": str(i).encode(), "value": row_value(i, VALUE_SIZE),
                                    "partition": i % IN_PARTS} for i in range(ROWS)))
    return {"kind": "kafka", "bootstrap": bootstrap, "topic": topic, "per_trigger": PER_TRIGGER}


def file_input(directory: str) -> dict[str, Any]:
    """The same rows as parquet files, one batch per file (a release without Spark's Kafka connector)."""
    write_source(directory, ROWS, ROWS // PER_TRIGGER, value_size=VALUE_SIZE)
    return {"kind": "files", "dir": directory, "per_trigger": 1}


def output_topics(bootstrap: str, names: list[str]) -> dict[str, str]:
    out = {}
    for name in names:
        out[name] = f"compat-{name.replace('_', '-')}-{uuid.uuid4().hex[:8]}"
        create_topic(bootstrap, out[name], partitions=3)
    return out


def run_app(python: str, pythonpath: list[str], spec: dict[str, Any], hook_dir: str, timeout_s: float,
            extra_env: dict[str, str] | None = None) -> dict[str, Any]:
    """Run tests/programs/compat_app.py with ``python``; its ``results.json`` (``app_rc``, ``app_log`` added).

    ``spec["work"]`` is its directory (created here); the app's output goes to ``app.log`` there.
    """
    work = spec["work"]
    os.makedirs(work, exist_ok=True)
    spec_path = os.path.join(work, "spec.json")
    with open(spec_path, "w") as f:
        json.dump(spec, f)
    env = {k: v for k, v in os.environ.items() if k not in _DROP}
    env.update(env_for(hook_dir), PYTHONPATH=os.pathsep.join(pythonpath), PYSPARK_PYTHON=python,
               PYSPARK_DRIVER_PYTHON=python, SPARK_LOCAL_IP="127.0.0.1", **(extra_env or {}))
    log_path = os.path.join(work, "app.log")
    with open(log_path, "w") as log:
        proc = subprocess.Popen([python, "-m", "tests.programs.compat_app", spec_path], cwd=work, env=env,
                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            rc: int | None = proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            rc = None
        finally:  # its JVM, Python workers and Connect client with it
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait(30)
    path = os.path.join(work, "results.json")
    results = json.load(open(path)) if os.path.exists(path) else {}
    results.update(app_rc=rc, app_log=log_path)
    return results


def check_forced_drain(streamed: dict[str, Any], log_path: str, sink_prefix: str) -> dict[str, Any]:
    """Assert that tests/compat/scenarios.py's ``ForcedDrain`` happened and its batch settled through a drain.

    ``streamed`` is ``stream_twice``'s result: no run failed, the fault
    thread's steps all happened (the owner SIGKILLed with the driver parked
    before its settle's first drain job). The driver's log (``log_path``) has
    the settle's warning that the batch waited for its lane, which it writes
    only when a marker read found the lane uncommitted, before a drain job.
    """
    assert streamed["run1_error"] is None and streamed["run2_error"] is None, streamed
    assert streamed["faults"]["errors"] == [], streamed["faults"]
    forced = next(f for f in streamed["faults"]["faults"] if f["kind"] == "forced_drain")
    assert forced.get("owner_pid") and forced.get("killed_at"), forced
    with open(log_path, errors="replace") as f:
        log = f.read()
    waited = f"batch_id={forced['batch']} exactly_once waiting lanes="
    assert any(f"sink={sink_prefix} " in line for line in log.splitlines() if waited in line), \
        f"no settle drain of batch {forced['batch']} of sink {sink_prefix} in {log_path}"
    return forced
