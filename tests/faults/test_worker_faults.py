"""Scenarios 1, 2, 12: a Python worker dies, or the driver stops the query, in the middle of a run.

Spark local[2,3] from the session fixture, the session broker, a streaming
query over parquet files whose rows carry their row number as key.
"""

from __future__ import annotations

import glob
import os
import time

import pytest

from spark_recoverable_sink import RecoverableKafkaSink, _faults

from .conftest import new_topic, sink_name
from .harness import (
    BatchProbe,
    LiveReader,
    find_worker_mid_task,
    keys_of,
    kill9,
    partition_reports,
    read_back,
    spark_python_workers,
    start_stream,
    write_source,
)

pytestmark = pytest.mark.spark


def test_01_python_worker_sigkill_mid_task(spark, broker, tmp_path, scenario):
    """A pyspark worker is SIGKILLed by pid while one of its task attempts is open in its WAL slot."""
    scenario.scenario, scenario.title = "01_worker_sigkill_mid_task", "Python worker SIGKILLed mid-task"
    scenario.fault = "kill -9 of the pyspark worker holding a slot with an OPEN attempt (batch >= 1)"
    n, files = 40000, 8
    src, wal = str(tmp_path / "src"), str(tmp_path / "wal")
    write_source(src, n, files, value_size=300)
    topic = new_topic(broker.bootstrap)
    name = sink_name("f01")
    sink = RecoverableKafkaSink(name, {"bootstrap.servers": broker.bootstrap}, topic=topic, wal_dir=wal,
                                ack_timeout_s=30.0)
    probe = BatchProbe(sink)
    reader = LiveReader(broker.bootstrap, topic).start()
    try:
        q = start_stream(spark, src, probe, str(tmp_path / "chk"), files_per_trigger=2)
        hit = find_worker_mid_task(wal, name, spark_python_workers, timeout_s=120, min_batch=1)
        assert hit is not None, "never saw a worker in the middle of a task"
        pid, slot = hit
        fault_at = kill9(pid)
        scenario.figures["killed_pid"], scenario.figures["killed_slot"] = pid, slot
        q.awaitTermination(300)
        assert q.exception() is None, q.exception()
        full_at = reader.wait_for(keys_of(range(n)), 90)
        t = read_back(broker.bootstrap, topic, range(n), reader)
    finally:
        reader.stop()
    scenario.apply(t)
    scenario.recovery(fault_at, full_at)
    parts = partition_reports(sink)
    rerun = [p for p in parts if p.spark_attempt > 0]
    scenario.figures.update(batches=len(sink.reports), tasks_rerun=len(rerun),
                            replayed=sum(p.replayed for p in parts))
    assert t.lost == 0, f"lost {t.lost} rows, e.g. {t.lost_sample}"
    assert sum(r.rows for r in sink.reports) >= n
    assert rerun, "the killed task was not re-run by Spark (was the worker really mid-task?)"


def test_02_python_worker_dies_after_commit_before_acks(spark, broker, tmp_path, scenario, fault_dir):
    """The first worker to commit a task exits (os._exit) right after the commit, ack_timeout_s=0."""
    scenario.scenario, scenario.title = "02_worker_dies_after_commit", "Python worker dies after commit, before acks"
    scenario.fault = "after_commit hook: os._exit right after the attempt is committed (ack_timeout_s=0)"
    n, files = 30000, 6
    src, wal = str(tmp_path / "src"), str(tmp_path / "wal")
    write_source(src, n, files, value_size=300)
    topic = new_topic(broker.bootstrap)
    name = sink_name("f02")
    sink = RecoverableKafkaSink(name, {"bootstrap.servers": broker.bootstrap}, topic=topic, wal_dir=wal,
                                ack_timeout_s=0.0)
    probe = BatchProbe(sink)
    _faults.arm(fault_dir, "after_commit", 1)
    reader = LiveReader(broker.bootstrap, topic).start()
    try:
        q = start_stream(spark, src, probe, str(tmp_path / "chk"), files_per_trigger=2)
        q.awaitTermination(300)
        assert q.exception() is None, q.exception()
        fired = glob.glob(os.path.join(fault_dir, "after_commit.fired.*"))
        assert fired, "the after_commit fault never fired"
        fault_at = max(os.stat(f).st_mtime for f in fired)
        full_at = reader.wait_for(keys_of(range(n)), 90)
        t = read_back(broker.bootstrap, topic, range(n), reader)
    finally:
        reader.stop()
        for f in glob.glob(os.path.join(fault_dir, "after_commit.fired.*")):
            os.unlink(f)
    scenario.apply(t)
    scenario.recovery(fault_at, full_at)
    parts = partition_reports(sink)
    replayed = sum(p.replayed for p in parts)
    scenario.figures.update(replayed=replayed, tasks_rerun=sum(p.spark_attempt > 0 for p in parts))
    assert t.lost == 0, f"lost {t.lost} rows, e.g. {t.lost_sample}"
    assert replayed > 0, "no task report shows the orphaned slot's committed records replayed"


def test_12_driver_stops_and_restarts_query_from_checkpoint(spark, broker, tmp_path, scenario):
    """query.stop() while a batch is being written, then a new query on the same checkpoint and WAL."""
    scenario.scenario, scenario.title = "12_query_stop_restart", "Driver stops and restarts the query mid-run"
    scenario.fault = "StreamingQuery.stop() while a task attempt is open, restart from the checkpoint"
    n, files = 40000, 8
    src, wal, chk = str(tmp_path / "src"), str(tmp_path / "wal"), str(tmp_path / "chk")
    write_source(src, n, files, value_size=300)
    topic = new_topic(broker.bootstrap)
    name = sink_name("f12")
    conf = {"bootstrap.servers": broker.bootstrap}
    sink1 = RecoverableKafkaSink(name, conf, topic=topic, wal_dir=wal, ack_timeout_s=30.0)
    probe1 = BatchProbe(sink1)
    reader = LiveReader(broker.bootstrap, topic).start()
    try:
        q1 = start_stream(spark, src, probe1, chk, files_per_trigger=1)
        hit = find_worker_mid_task(wal, name, spark_python_workers, timeout_s=120, min_batch=2)
        assert hit is not None, "never saw a task in progress"
        interrupted = probe1.current
        fault_at = time.time()
        q1.stop()
        stopped_in = time.time() - fault_at
        sink2 = RecoverableKafkaSink(name, conf, topic=topic, wal_dir=wal, ack_timeout_s=30.0)
        probe2 = BatchProbe(sink2)
        q2 = start_stream(spark, src, probe2, chk, files_per_trigger=1)
        q2.awaitTermination(300)
        assert q2.exception() is None, q2.exception()
        full_at = reader.wait_for(keys_of(range(n)), 90)
        t = read_back(broker.bootstrap, topic, range(n), reader)
    finally:
        reader.stop()
    scenario.apply(t)
    scenario.recovery(fault_at, full_at)
    scenario.figures.update(interrupted_batch=interrupted, first_run_batches=probe1.calls,
                            second_run_batches=probe2.calls, stop_seconds=round(stopped_in, 2),
                            first_run_errors=probe1.errors[:3])
    assert t.lost == 0, f"lost {t.lost} rows (a gap), e.g. {t.lost_sample}"
    assert probe2.calls, "the restarted query ran no batch"
    assert probe2.calls[0] <= (interrupted if interrupted is not None else probe1.calls[-1]) + 1
