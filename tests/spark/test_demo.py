"""Tier 3: ``make demo``'s job itself (templates/demo.py with conf/demo.json), run as the README runs it.

The demo streams its batches through the sink, reads its topic back and
prints a verdict; its exit code is 0 only when every reported row arrived
under its batch's ids, with no record lost and none copied under another id
(templates/demo_readback.py). This runs it as a user does, from the shipped conf,
in a directory of its own, against the test broker (``KAFKA_BOOTSTRAP``, as
the demo allows; ``make demo`` starts a broker of its own the same way the
tests do), and asserts the verdict and the numbers it printed.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

pytestmark = pytest.mark.spark

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_the_demo_passes_its_own_read_back(broker, tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("RKS_")}  # no test hooks: a user's run
    env.update(KAFKA_BOOTSTRAP=broker.bootstrap, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
    done = subprocess.run([sys.executable, os.path.join(ROOT, "templates", "demo.py"), "--conf",
                           os.path.join(ROOT, "conf", "demo.json")], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=600)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-6000:]
    assert re.search(r"^RESULT: OK, all 300,000 rows arrived", done.stdout, re.M), out[-6000:]
    numbers = dict(re.findall(r"^  (\w+)\s+([\d,]+)$", done.stdout, re.M))
    assert numbers["rows_sent"] == numbers["distinct_ids"] == numbers["distinct_values"] == "300,000", numbers
    assert numbers["lost"] == numbers["unexpected_ids"] == numbers["missing_values"] == "0", numbers
