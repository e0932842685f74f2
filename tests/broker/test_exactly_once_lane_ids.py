"""Lane ids on the real broker: no two sinks share one, and lanes named the former way are adopted, not restarted.

Lanes were ``rks-eo.<sink>.<run>.<n>`` (sink ``orders`` with run ``eu.prod``
and sink ``orders.eu`` with run ``prod`` shared one); they are
``rks-eo.<sink>:<run>:<n>``. A process of the former version is played by
``tests/programs/writer_proc`` with ``former_lane_names`` (it names lanes as
that version did). Every check reads the data back ``read_committed``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid

import pytest

from spark_recoverable_sink import MarkerError
from spark_recoverable_sink.config import SinkConfig
from spark_recoverable_sink.deadline import Deadline
from spark_recoverable_sink.delivery.exactly_once.lanes import lane_markers
from spark_recoverable_sink.delivery.exactly_once.markers import lane_id, legacy_lane_id
from spark_recoverable_sink.ops.cli import main
from spark_recoverable_sink.task.runtime import get_runtime
from spark_recoverable_sink.task.writer import write_partition

from ..kafka_helpers import create_topic, read_topic
from .rows import batches
from .test_exactly_once import RC, ROOT, _assert_exactly, _eo

pytestmark = pytest.mark.broker


def _former_child(cfg: SinkConfig, batch: int, partition: int, rows: int, run: str,
                  hook_dir: str) -> subprocess.CompletedProcess:
    """One task of the former version (lanes named ``rks-eo.<sink>.<run>.<n>``) in a process of its own."""
    from tests.hooks import env_for

    opts = {"name": cfg.name, "kafka_conf": dict(cfg.kafka_conf_items), "wal_dir": cfg.wal_dir, "topic": cfg.topic,
            "ack_timeout_s": cfg.ack_timeout_s, "guarantee": cfg.guarantee, "marker_topic": cfg.marker_topic,
            "run": run, "former_lane_names": True}
    env = dict(os.environ, PYTHONPATH=ROOT, **env_for(hook_dir))
    return subprocess.run([sys.executable, "-m", "tests.programs.writer_proc", json.dumps(opts), str(batch),
                           str(partition), str(rows), "50", "after_commit"], env=env, cwd=ROOT, capture_output=True,
                          text=True, timeout=120)


def test_two_sinks_whose_former_lane_names_joined_alike_commit_independently(broker, tmp_path):
    base = f"lc{uuid.uuid4().hex[:6]}"
    a_topic, b_topic = f"{base}-a", f"{base}-b"
    for t in (a_topic, b_topic):
        create_topic(broker.bootstrap, t, partitions=2)
    a = _eo(broker.bootstrap, str(tmp_path), a_topic, name=base, ack_timeout_s=30)
    b = _eo(broker.bootstrap, str(tmp_path), b_topic, name=f"{base}.eu", ack_timeout_s=30)
    runs = {a.name: "eu.prod", b.name: "prod"}
    assert legacy_lane_id(a.name, runs[a.name], 0) == legacy_lane_id(b.name, runs[b.name], 0)  # one lane, before
    rows = {a.name: lambda bt: 100 + bt, b.name: lambda bt: 200 + bt}
    seen: dict[tuple[str, int], object] = {}
    for batch in range(3):
        for p in (0, 1):
            for cfg in (a, b):  # interleaved: each commit would have fenced the other's producer, and moved its marker
                run = runs[cfg.name]
                rep = write_partition(cfg, batch, p, 0, batches(p, rows[cfg.name](batch), 50), run=run)
                assert (rep.acked, rep.skipped, rep.pending) == (rows[cfg.name](batch), 0, 0), (cfg.name, batch, rep)
                lane = get_runtime(cfg).units.committer.lanes.known(lane_id(cfg.name, run, p))
                assert seen.setdefault((cfg.name, p), lane) is lane, "a lane's producer was replaced (fenced)"
    for cfg in (a, b):
        want = {(bt, p): rows[cfg.name](bt) for bt in range(3) for p in (0, 1)}
        got = read_topic(broker.bootstrap, cfg.topic, expected=sum(want.values()), isolation=RC)
        _assert_exactly(got, cfg, runs[cfg.name], want)
        assert {p: m.batch for p, m in lane_markers(cfg, runs[cfg.name], [0, 1]).items()} == {0: 2, 1: 2}


def test_units_of_the_former_lane_naming_are_skipped_or_published_once_after_the_upgrade(broker, topic, tmp_path,
                                                                                         hooks):
    """Before the upgrade: lane 0 committed batch 3, its batch 4 died after the WAL commit, before Kafka's; lane 1's
    batch 4 died after Kafka's commit, before its WAL prune. After it: the re-run of batch 4 and batch 5."""
    cfg = _eo(broker.bootstrap, str(tmp_path), topic, ack_timeout_s=30)
    run = "q1"
    done = _former_child(cfg, 3, 0, 300, run, hooks.dir)
    assert done.returncode == 0, done.stderr[-2000:]
    # (lane 1 first: the lane 0 task adopts its dead slot and dies before touching it: both units stay in WALs)
    for batch, p, point in ((4, 1, "eo.committed"), (4, 0, "eo.before_commit")):
        crash = hooks.crash(point, batch=batch, partition=p)
        died = _former_child(cfg, batch, p, 300, run, hooks.dir)
        assert crash.fired() is not None, died.stderr[-2000:]
    assert lane_markers(cfg, run, [0, 1]) == {0: None, 1: None}  # nothing under the lanes' current names yet
    # Upgraded: Spark re-runs batch 4 (its foreachBatch never returned). The task adopts the dead slots: lane 0's
    # unit is published once (its former marker is at 3), lane 1's is skipped (its former marker proves it), as
    # is the re-run's own unit of lane 1.
    rerun = write_partition(cfg, 4, 1, 1, batches(1, 300, 50), run=run)
    assert (rerun.acked, rerun.skipped, rerun.pending) == (0, 300, 0), rerun
    assert rerun.replayed == 600
    rt = get_runtime(cfg)
    deadline = Deadline(120)
    while rt.units.retry_pending(Deadline(10)) > 0:  # recovered units the task did not need to wait for
        assert not deadline.expired(), rt.units.waiting()
    assert rt.units.skipped_rows == 600  # the recovered lane 1 unit and the re-run's own
    assert {p: m.batch for p, m in lane_markers(cfg, run, [0, 1]).items()} == {0: 4, 1: 4}
    for p in (0, 1):
        assert write_partition(cfg, 5, p, 0, batches(p, 50, 50), run=run).acked == 50
    want = {(3, 0): 300, (4, 0): 300, (4, 1): 300, (5, 0): 50, (5, 1): 50}
    _assert_exactly(read_topic(broker.bootstrap, topic, expected=1000, isolation=RC), cfg, run, want)
    assert {p: m.batch for p, m in lane_markers(cfg, run, [0, 1]).items()} == {0: 5, 1: 5}


def test_a_former_marker_that_cannot_be_attributed_is_refused_until_the_operator_adopts_it(broker, topic, tmp_path,
                                                                                           hooks):
    """Sink ``<x>.eu`` run ``prod``: its former lanes are also those of sink ``<x>`` run ``eu.prod``. Their record,
    which names the run, is gone: the sink does not guess whose the marker is; ``rks adopt-lanes`` says it."""
    from click.testing import CliRunner
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient

    mt = f"mk-lanes-{uuid.uuid4().hex[:8]}"
    create_topic(broker.bootstrap, mt, partitions=1, config={"cleanup.policy": "compact,delete"})
    cfg = _eo(broker.bootstrap, str(tmp_path), topic, name=f"lx{uuid.uuid4().hex[:6]}.eu", marker_topic=mt,
              ack_timeout_s=30)
    run, former = "prod", legacy_lane_id(cfg.name, "prod", 0)
    done = _former_child(cfg, 2, 0, 200, run, hooks.dir)  # batch 2 committed under the former name
    assert done.returncode == 0, done.stderr[-2000:]
    end = max(r.offset for r in read_topic(broker.bootstrap, mt).records) + 1
    admin = AdminClient({"bootstrap.servers": broker.bootstrap, "allow.auto.create.topics": "false"})
    (fut,) = admin.delete_records([TopicPartition(mt, 0, end)]).values()  # the records are gone, the offset stays
    assert fut.result(30).low_watermark == end
    with pytest.raises(MarkerError) as e:  # the re-run of batch 2 after the upgrade
        write_partition(cfg, 2, 0, 1, batches(0, 200, 50), run=run)
    assert e.value.lane == former and f"rks adopt-lanes --sink {cfg.name} --run {run}" in str(e.value), str(e.value)
    assert get_runtime(cfg).wal.stats().attempts == 0  # the task's attempt went with its error
    conf = tmp_path / "kafka.json"
    conf.write_text(json.dumps({"bootstrap.servers": broker.bootstrap}))
    r = CliRunner().invoke(main, ["adopt-lanes", "--sink", cfg.name, "--run", run, "--kafka-conf", str(conf),
                                  "--topic", topic, "--marker-topic", mt])
    assert r.exit_code == 0, r.stderr
    assert f"lane={lane_id(cfg.name, run, 0)} former={former} batch=2" in r.stdout, r.stdout
    again = write_partition(cfg, 2, 0, 2, batches(0, 200, 50), run=run)
    assert (again.acked, again.skipped, again.pending) == (0, 200, 0), again
    _assert_exactly(read_topic(broker.bootstrap, topic, expected=200, isolation=RC), cfg, run, {(2, 0): 200})
