"""Tier 2: an exception in any step of a poller pass loses nothing, also across a crash.

A subprocess writer runs with a hook that raises once at the chosen named
point, then dies without its close path (``os._exit``). A new runtime in this
process takes the dead writer's slot, recovers it, and the topic, read back
fully, must hold every record exactly by id.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from spark_recoverable_sink.task.runtime import get_runtime

from ..kafka_helpers import read_topic
from ..record_ids import ids_of
from .rows import batches
from .test_publisher import ROOT, _config, _wait_wal_empty

pytestmark = pytest.mark.broker

STEPS = ["poller.backlog", "poller.poll", "poller.account", "poller.account.chunk", "poller.watchdog",
         "poller.retry", "poller.prune", "prune.slot", "poller.forward"]
ROWS = 5000


@pytest.mark.parametrize("ack_timeout_s", [0, 30], ids=["async", "sync"])
@pytest.mark.parametrize("step", STEPS)
def test_exception_in_a_poller_step_then_crash_loses_nothing(broker, topic, tmp_path, step, ack_timeout_s):
    if step == "poller.backlog" and ack_timeout_s:
        pytest.skip("a task in sync mode produces inline: no backlog step runs")
    cfg = _config(broker.bootstrap, str(tmp_path / "wal"), topic, ack_timeout_s=ack_timeout_s, name="steps",
                  prune_interval_s=0.05)
    fired = tmp_path / "fired"
    opts = {"name": cfg.name, "kafka_conf": dict(cfg.kafka_conf_items), "wal_dir": cfg.wal_dir, "topic": cfg.topic,
            "ack_timeout_s": cfg.ack_timeout_s, "prune_interval_s": cfg.prune_interval_s}
    env = dict(os.environ, PYTHONPATH=ROOT, RKS_TEST_HOOKS="tests.programs.raise_once", RKS_RAISE_AT=step,
               RKS_RAISE_FIRED=str(fired))
    proc = subprocess.run([sys.executable, "-m", "tests.programs.writer_proc", json.dumps(opts), "4", "1",
                           str(ROWS), "40", "delivered"], env=env, cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert fired.exists(), f"step {step} never ran in the writer"
    assert "InjectedFault" in proc.stderr  # logged, not swallowed silently
    # restart: this process takes the dead writer's slot and recovers whatever it left
    rt = get_runtime(cfg)
    got = read_topic(broker.bootstrap, topic, expected=ROWS)
    want = ids_of("steps", "", 4, 1, batches(1, ROWS, 40), topic)
    assert len(set(want)) == ROWS
    assert got.distinct_ids() == set(want)
    _wait_wal_empty(cfg)
    assert rt.publisher.idle()
