"""Tier 3: exactly-once refuses to commit a unit whose input it cannot prove whole (spark_recoverable_sink/task/input_end.py).

The proof reads the Python worker's input past the task's last Arrow batch,
found through the ``main(infile, outfile)`` frame of PySpark's ``worker.py``.
A PySpark whose worker is elsewhere (a vendor runtime, the next refactor)
has no such frame. tests/programs/vendor_runtime.py runs a fresh Spark
application whose workers run a copy of this PySpark's ``worker.py`` under
another module name, set with Spark's own ``spark.python.worker.module``: the
sink's tasks run unchanged, in real Python workers, and find no frame.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid

import pytest

from ..conftest import REPO
from ..kafka_helpers import create_topic, read_topic

pytestmark = pytest.mark.spark


def test_exactly_once_refuses_a_task_whose_pyspark_worker_frame_is_absent_and_commits_nothing(broker, tmp_path):
    import pyspark

    alo, eo = f"vendor-alo-{uuid.uuid4().hex[:6]}", f"vendor-eo-{uuid.uuid4().hex[:6]}"
    for topic in (alo, eo):
        create_topic(broker.bootstrap, topic, partitions=2)
    runtime = tmp_path / "runtime"
    runtime.mkdir()
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
    proc = subprocess.run([sys.executable, "-m", "tests.programs.vendor_runtime", broker.bootstrap, alo, eo,
                           str(tmp_path / "wal"), str(runtime)], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=500)
    assert proc.returncode == 0, proc.stderr[-4000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    # Premises: the tasks ran in the renamed copy of PySpark's worker, and it is a working worker.
    assert any(f.endswith("pyspark_vendor_runtime.py") for f in got["mains"]), got
    assert not any(f.endswith(os.path.join("pyspark", "worker.py")) for f in got["mains"]), got
    assert got["acked"].get("at_least_once") == 2000, got  # at-least-once proves nothing of the input: as before
    # Exactly-once: refused, naming the PySpark build, and nothing committed.
    err = got["errors"].get("exactly_once", "")
    assert "exactly_once" not in got["acked"], f"exactly-once committed on an input it could not prove whole: {got}"
    assert f"PySpark {pyspark.__version__}" in err and "worker.py" in err, err
    assert "pyspark_vendor_runtime.py" in err, err  # the frame it did find, for whoever supports that runtime
    committed = read_topic(broker.bootstrap, eo, idle_s=1.0, timeout_s=20, isolation="read_committed")
    assert committed.records == [], f"{len(committed.records)} records committed"
