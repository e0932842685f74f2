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
import logging
import os
import re
import select
import signal
import subprocess
import sys

import pytest

from spark_recoverable_sink.task.writer import write_partition

from ..kafka_helpers import read_topic, wait_for_uncommitted
from .rows import batches
from .test_exactly_once import RC, ROOT, _assert_exactly, _eo, _spawn

pytestmark = pytest.mark.broker


def _rerun_beside_a_frozen_attempt(cfg, broker, topic, hooks, batch: int, partition: int, rows: int,
                                   at: tuple[str, dict], on_broker: bool = False) -> None:
    """An attempt at (batch, partition) in its own process, SIGSTOPped at ``at`` (a point and its filter); the
    task re-run here must commit the unit; the stale attempt, SIGCONTed, must then skip it (fenced, its lane's
    marker proving it). ``on_broker``: the freeze waits until its open transaction holds records on the broker.
    """
    parked = hooks.park(at[0], **at[1])
    stale = _spawn(cfg, batch, partition, rows, "r", hooks.dir, report=True)
    stale_out = None
    try:
        pid = parked.wait()["pid"]
        if on_broker:
            wait_for_uncommitted(broker.bootstrap, topic, batch, partition)
        os.kill(pid, signal.SIGSTOP)
        parked.release()  # it runs on only when SIGCONTed
        rerun = write_partition(cfg, batch, partition, 1, batches(partition, rows, 50), run="r")  # "elsewhere"
        assert (rerun.acked, rerun.pending) == (rows, 0), rerun
        os.kill(pid, signal.SIGCONT)
        stale_out, _ = stale.communicate(timeout=90)
    finally:
        if stale.poll() is None:
            os.kill(stale.pid, signal.SIGCONT)
            stale.kill()
    assert stale.returncode == 0
    report = json.loads(stale_out.strip().splitlines()[-1])
    assert report["acked"] == 0 and report["pending"] == 0, report  # nothing of it committed: proven, skipped


def test_a_frozen_attempt_resumed_after_its_rerun_committed_is_fenced_and_skips(broker, topic, tmp_path, hooks):
    cfg = _eo(broker.bootstrap, str(tmp_path), topic, ack_timeout_s=30)
    _rerun_beside_a_frozen_attempt(cfg, broker, topic, hooks, 3, 2, 3000, ("eo.produced_chunk", {"rows": 1000}),
                                   on_broker=True)
    _assert_exactly(read_topic(broker.bootstrap, topic, expected=3000, isolation=RC), cfg, "r", {(3, 2): 3000})


@pytest.mark.parametrize("lane_here", ["new", "ready"])
def test_a_rerun_fences_a_frozen_attempt_whose_marker_offset_is_pending_and_commits_in_its_window(
        broker, topic, tmp_path, hooks, lane_here):
    """The stale attempt is frozen after sending its marker offset, its transaction open (``eo.committing``).

    Read ``read_committed``, the lane's group offset is unstable until that
    transaction ends (60 s, librdkafka's transaction.timeout.ms). The re-run's
    marker read before it (re)initialises the lane (``new``: this process never
    used the lane; ``ready``: it committed the batch before on it) took the
    whole window (30 s here): the unit stayed pending, and after a broker
    restart had aborted such a transaction without its markers, for good
    (scenario 06, exactly-once, native engine). Now that read is bounded, the
    re-run's init fences the stale producer, and the unit commits in its window.
    """
    cfg = _eo(broker.bootstrap, str(tmp_path), topic, ack_timeout_s=30)
    if lane_here == "ready":
        assert write_partition(cfg, 4, 0, 0, batches(0, 2000, 50), run="r").acked == 2000
    _rerun_beside_a_frozen_attempt(cfg, broker, topic, hooks, 5, 0, 2000,
                                   ("eo.committing", {"batch": 5, "lane": 0}))
    units = {(5, 0): 2000, **({(4, 0): 2000} if lane_here == "ready" else {})}
    _assert_exactly(read_topic(broker.bootstrap, topic, expected=sum(units.values()), isolation=RC), cfg, "r", units)


def test_two_live_attempts_at_one_unit_fence_each_other_in_turn_and_commit_it_once(broker, topic, tmp_path, hooks):
    """A speculative duplicate: two attempts at one unit, each on its own worker and WAL, both alive throughout.

    Both are parked before their commit, with their transactions open: A first, then B, whose producer
    fenced A's. A is released: its commit is refused (fenced), it tries again on a new producer (which
    fences B's) and commits. B is released: its commit is refused, and its lane's marker proves the unit
    committed: it skips it. The interleaving where they alternate, each fencing the other once.
    """
    cfg_a = _eo(broker.bootstrap, str(tmp_path / "a"), topic, ack_timeout_s=60)
    cfg_b = _eo(broker.bootstrap, str(tmp_path / "b"), topic, ack_timeout_s=60, name=cfg_a.name)
    park_a = hooks.park("eo.before_commit", batch=4, lane=1)
    a = _spawn(cfg_a, 4, 1, 3000, "r", hooks.dir, report=True)
    b = None
    try:
        park_a.wait()
        park_b = hooks.park("eo.before_commit", batch=4, lane=1)  # armed once A holds the first: B claims it
        b = _spawn(cfg_b, 4, 1, 3000, "r", hooks.dir, report=True)
        park_b.wait()
        park_a.release()
        a_out, _ = a.communicate(timeout=90)
        park_b.release()
        b_out, _ = b.communicate(timeout=90)
    finally:
        for proc in (a, b):
            if proc is not None and proc.poll() is None:
                proc.kill()
    assert (a.returncode, b.returncode) == (0, 0)
    first, second = (json.loads(out.strip().splitlines()[-1]) for out in (a_out, b_out))
    assert (first["acked"], first["pending"]) == (3000, 0), first  # fenced once, committed on a new producer
    assert (second["acked"], second["pending"]) == (0, 0), second  # fenced by A's retry, then proven and skipped
    _assert_exactly(read_topic(broker.bootstrap, topic, expected=3000, isolation=RC), cfg_a, "r", {(4, 1): 3000})


def test_a_commit_caught_by_a_broker_freeze_is_finalized_by_a_new_producer_once(own_broker, tmp_path, hooks, caplog):
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
        assert not deadline.expired(), "the unit was never finalized after the broker came back"
    _assert_exactly(read_topic(own_broker.bootstrap, "eo-freeze", expected=2000, isolation=RC), cfg, "r",
                    {(1, 0): 2000})


def test_a_unit_its_task_gave_up_on_frees_its_lane_once_another_worker_moved_the_lane_on(own_broker, tmp_path,
                                                                                           hooks):
    """Item 4's sequence with real processes: worker A's own unit left pending, its lane moved on by worker B.

    A (its own process, its own WAL) writes batch 5 of lane 0; the broker is
    SIGSTOPped while A commits, so A's task returns with its unit pending (its
    task gave up). A is SIGSTOPped (a frozen executor) and the broker resumed;
    B (this process, another WAL: the re-run elsewhere) writes batch 5 and 6 of
    the same lane. A is SIGCONTed and writes batch 7 of that lane. Its old unit
    can no longer be proven in Kafka nor committed (the marker shows batch 6):
    it is set aside (kept in A's WAL, reported), and batch 7 commits instead
    of waiting behind it forever. Read back read_committed: batches 5, 6, 7
    each exactly once.
    """
    from ..kafka_helpers import create_topic

    create_topic(own_broker.bootstrap, "eo-gaveup", partitions=2)
    # ack_timeout_s bounds both of A's tasks: batch 5 returns pending after it (the broker is frozen), batch 7
    # must replace A's fenced producer, set batch 5 aside and commit within it (one configuration: A's runtime
    # and its book live on between the two tasks, as on a Spark worker).
    a_cfg = _eo(own_broker.bootstrap, str(tmp_path / "a"), "eo-gaveup", ack_timeout_s=8.0,
                kafka_conf={"transaction.timeout.ms": 20000, "message.timeout.ms": 15000})
    b_cfg = _eo(own_broker.bootstrap, str(tmp_path / "b"), "eo-gaveup", name=a_cfg.name, ack_timeout_s=30.0)
    go = str(tmp_path / "go")
    committing = hooks.park("eo.before_commit", batch=5)
    opts = {"name": a_cfg.name, "kafka_conf": dict(a_cfg.kafka_conf_items), "wal_dir": a_cfg.wal_dir,
            "topic": a_cfg.topic, "ack_timeout_s": a_cfg.ack_timeout_s, "guarantee": a_cfg.guarantee, "run": "r"}
    from tests.hooks import env_for

    env = dict(os.environ, PYTHONPATH=ROOT, **env_for(hooks.dir))
    err_path = tmp_path / "a.stderr"
    with open(err_path, "w") as err:
        a = subprocess.Popen([sys.executable, "-m", "tests.programs.writer_proc", json.dumps(opts), "5", "0", "1000",
                              "50", f"then:7:{go}"], env=env, cwd=ROOT, text=True, stdout=subprocess.PIPE, stderr=err)

    def a_said() -> str:
        return err_path.read_text()[-3000:]

    try:
        committing.wait(60)
        own_broker.pause()
        committing.release()
        ready, _, _ = select.select([a.stdout], [], [], 90)  # its first task returns within ack_timeout_s
        line = a.stdout.readline() if ready else ""
        assert line, f"worker A printed no report for batch 5 (exit {a.poll()}): {a_said()}"
        first = json.loads(line)  # its task returned: the unit pending, given up by its task
        assert (first["acked"], first["pending"]) == (0, 1000), first
        os.kill(a.pid, signal.SIGSTOP)
        own_broker.resume()
        for batch in (5, 6):
            rep = write_partition(b_cfg, batch, 0, 0, batches(0, 1000, 50), run="r")
            assert rep.acked + rep.skipped == 1000 and rep.pending == 0, rep
        os.kill(a.pid, signal.SIGCONT)
        open(go, "w").close()
        out, _ = a.communicate(timeout=90)
    finally:
        own_broker.resume()
        if a.poll() is None:
            os.kill(a.pid, signal.SIGCONT)
            a.kill()
            a.wait(30)
    assert a.returncode == 0 and out.strip(), f"worker A exit {a.returncode}: {a_said()}"
    later = json.loads(out.strip().splitlines()[-1])
    assert (later["acked"], later["pending"]) == (1000, 0), later  # not held behind the unit it gave up on
    assert any("set aside" in p and "batch 5" in p for p in json.loads(later["problems"])), later["problems"]
    _assert_exactly(read_topic(own_broker.bootstrap, "eo-gaveup", expected=3000, isolation=RC), a_cfg, "r",
                    {(5, 0): 1000, (6, 0): 1000, (7, 0): 1000})


@pytest.mark.parametrize("warm", [False, True], ids=["fresh-worker", "worker-that-held-the-lane"])
def test_a_lane_a_killed_worker_left_in_its_commit_is_taken_over_within_one_ack_window(broker, topic, tmp_path,
                                                                                        hooks, caplog, warm):
    """A worker SIGKILLed between its marker and ``commit_transaction``: the lane's group offset is unstable until
    the transaction ends, so a marker read before the new producer's init gets no answer. The re-run must not wait
    that read out more than once, nor for longer than a share of its window: its init aborts the dead transaction
    (60 s from expiring on its own), and the unit commits within one 10 s window. ``warm``: the re-running worker
    held the lane (batch 2): its ready producer's read goes unanswered, and the lane's new producer does not wait
    for another."""
    cfg = _eo(broker.bootstrap, str(tmp_path), topic, ack_timeout_s=10.0)
    units = {(3, 2): 3000}
    if warm:
        assert write_partition(cfg, 2, 2, 0, batches(2, 500, 50), run="r").acked == 500
        units[(2, 2)] = 500
    parked = hooks.park("eo.committing", batch=3, lane=2)
    child = _spawn(cfg, 3, 2, 3000, "r", hooks.dir)
    try:
        pid = parked.wait()["pid"]
        wait_for_uncommitted(broker.bootstrap, topic, 3, 2)
        os.kill(pid, signal.SIGKILL)
    finally:
        child.wait(60)
    with caplog.at_level(logging.INFO, logger="spark_recoverable_sink.delivery.exactly_once.marker_reads"):
        rep = write_partition(cfg, 3, 2, 1, batches(2, 3000, 50), run="r")
    assert (rep.acked + rep.skipped, rep.pending) == (3000, 0), rep
    waits = [float(m.group(1)) for r in caplog.records
             if (m := re.search(r"marker not read in ([0-9.]+)s before the lane's init", r.getMessage()))]
    # At most one read waited out, and briefly. A fresh worker whose own attempt opens its inline transaction first
    # initialises the lane before any read (its init aborts the dead transaction): then no read waits at all.
    assert len(waits) <= 1 and all(w <= cfg.ack_timeout_s / 3 for w in waits), f"unanswered reads waited {waits} s"
    _assert_exactly(read_topic(broker.bootstrap, topic, expected=sum(units.values()), isolation=RC), cfg, "r", units)
