"""Tier 3: the sink's tasks leave pandas out of the Python worker (spark_recoverable_sink/arrays.py).

PySpark's ``mapInArrow`` worker imports no pandas of its own; pyarrow imports
it on the first ``pa.array`` or ``pa.scalar`` of a process, 0.7 CPU-s and
39 MB per worker. tests/programs/worker_imports.py writes through Spark with
both guarantees in a fresh ``local[1]`` session and looks into a worker that
ran the sink's tasks.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid

import pytest

from ..conftest import REPO
from ..kafka_helpers import create_topic

pytestmark = pytest.mark.spark


def test_a_worker_that_ran_both_guarantees_has_not_imported_pandas(broker, tmp_path):
    topic = f"imports-{uuid.uuid4().hex[:6]}"
    create_topic(broker.bootstrap, topic, partitions=2)
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
    proc = subprocess.run([sys.executable, "-m", "tests.programs.worker_imports", broker.bootstrap, topic,
                           str(tmp_path / "wal")], cwd=REPO, env=env, capture_output=True, text=True, timeout=400)
    assert proc.returncode == 0, proc.stderr[-4000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got["acked"] == {"at_least_once": 2000, "exactly_once": 2000}, got
    probe = next((p for p in got["probed"] if p["pid"] in got["sink_pids"]), None)
    assert probe is not None, f"premise: the probe ran in a worker of the sink's tasks: {got}"
    assert not probe["pandas"], f"the worker that ran the sink's tasks imported pandas: {got}"
