"""Tier 2: a stale attempt that is still alive never commits a unit twice (Apache Kafka, real processes).

The first attempt at a unit runs in its own process (``tests/programs/writer_proc``),
is parked with its transaction open and a chunk of it in the log, and is
SIGSTOPped (an executor frozen by a long GC pause or a suspended VM); the
task is re-run here (as Spark would elsewhere) and commits the unit. Then the
stale attempt is SIGCONTed: its producer was fenced by the re-run's, its open
transaction aborted, and when it tries again its lane's marker shows the
unit committed: it skips it. Read back read_committed, every row once.
"""

from __future__ import annotations

import json
import os
import signal

import pytest

from spark_recoverable_sink.task.writer import write_partition

from ..kafka_helpers import read_topic, wait_for_uncommitted
from .rows import batches
from .test_exactly_once import RC, _assert_exactly, _eo, _spawn

pytestmark = pytest.mark.broker


def test_a_frozen_attempt_resumed_after_its_rerun_committed_is_fenced_and_skips(broker, topic, tmp_path, hooks):
    cfg = _eo(broker.bootstrap, str(tmp_path), topic, ack_timeout_s=30)
    parked = hooks.park("eo.produced_chunk", rows=1000)
    stale = _spawn(cfg, 3, 2, 3000, "r", hooks.dir, report=True)
    stale_out = None
    try:
        pid = parked.wait()["pid"]
        wait_for_uncommitted(broker.bootstrap, topic, 3, 2)  # its open transaction holds records on the broker
        os.kill(pid, signal.SIGSTOP)
        parked.release()  # it runs on only when SIGCONTed
        rerun = write_partition(cfg, 3, 2, 1, batches(2, 3000, 50), run="r")  # the task re-run "elsewhere"
        assert (rerun.acked, rerun.pending) == (3000, 0), rerun
        os.kill(pid, signal.SIGCONT)
        stale_out, _ = stale.communicate(timeout=90)
    finally:
        if stale.poll() is None:
            os.kill(stale.pid, signal.SIGCONT)
            stale.kill()
    assert stale.returncode == 0
    report = json.loads(stale_out.strip().splitlines()[-1])
    assert report["acked"] == 0 and report["pending"] == 0, report  # nothing of it committed: proven, skipped
    _assert_exactly(read_topic(broker.bootstrap, topic, expected=3000, isolation=RC), cfg, "r", {(3, 2): 3000})


def test_a_commit_caught_by_a_broker_freeze_is_settled_by_a_new_producer_once(own_broker, tmp_path, hooks, caplog):
    """The broker SIGSTOPped while the unit's commit_transaction is in flight, SIGCONTed once the commit timed out.

    The commit's outcome is unknown to the client; retried on the same
    producer its EndTxn could land on the lane's next transaction. The lane's
    producer is dropped; the next one's init_transactions completes or aborts
    the transaction, and the marker says which: the unit ends in Kafka once.
    """
    import threading
    import time

    from spark_recoverable_sink.deadline import Deadline
    from spark_recoverable_sink.task.runtime import get_runtime

    from ..kafka_helpers import create_topic

    create_topic(own_broker.bootstrap, "eo-freeze", partitions=2)
    cfg = _eo(own_broker.bootstrap, str(tmp_path), "eo-freeze", ack_timeout_s=6.0,
              kafka_conf={"transaction.timeout.ms": 30000})
    committing = hooks.park("eo.committing", batch=1)
    out: dict = {}
    task = threading.Thread(target=lambda: out.update(rep=write_partition(cfg, 1, 0, 0, batches(0, 2000, 50),
                                                                          run="r")))
    task.start()
    committing.wait(60)
    own_broker.pause()
    committing.release()
    task.join(60)
    assert not task.is_alive()
    time.sleep(2.0)  # the freeze outlasts the commit's timeout (the task's window): its outcome is unknown
    own_broker.resume()
    assert out["rep"].pending == 2000, out["rep"]
    assert "commit/abort without outcome" in caplog.text
    units = get_runtime(cfg).units
    deadline = Deadline(120)
    while units.retry_pending(Deadline(10)) > 0:
        assert not deadline.expired(), "the unit was never settled after the broker came back"
    _assert_exactly(read_topic(own_broker.bootstrap, "eo-freeze", expected=2000, isolation=RC), cfg, "r",
                    {(1, 0): 2000})
