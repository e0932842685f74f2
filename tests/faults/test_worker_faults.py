"""Scenarios 1, 2, 12: a Python worker dies, or the driver stops the query, in the middle of a run.

Spark local[2,3] from the session fixture, the session broker, a streaming
query over parquet files whose rows carry their row number as key.
"""

from __future__ import annotations

import time

import pytest

from spark_recoverable_sink import RecoverableKafkaSink

from .conftest import ENGINES, engine_suffix, new_topic, sink_name
from .procs import alive, kill9, started
from .readback import LiveReader, keys_of, read_back
from .slots import explain_missing
from .streams import BatchProbe, task_reports, start_stream, write_source

pytestmark = pytest.mark.spark


@pytest.mark.parametrize("engine", ENGINES)
def test_01_python_worker_sigkill_mid_task(spark, broker, tmp_path, scenario, hooks, engine):
    """A pyspark worker is SIGKILLed by pid while parked mid-task, its attempt open in its WAL slot."""
    scenario.scenario = "01_worker_sigkill_mid_task" + engine_suffix(engine)
    scenario.title = f"Python worker SIGKILLed mid-task ({engine} engine)"
    scenario.fault = ("kill -9 of the pyspark worker parked at task.mid_task (batch >= 1, first Arrow batch "
                      "in the WAL and produced, attempt OPEN)")
    n, files = 40000, 8
    src, wal = str(tmp_path / "src"), str(tmp_path / "wal")
    write_source(src, n, files, value_size=300)
    topic = new_topic(broker.bootstrap)
    name = sink_name("f01")
    sink = RecoverableKafkaSink(name, {"bootstrap.servers": broker.bootstrap}, topic=topic, wal_dir=wal,
                                ack_timeout_s=30.0, delivery_engine=engine)
    probe = BatchProbe(sink)
    reader = LiveReader(broker.bootstrap, topic).start()
    try:
        parked = hooks.park("task.mid_task", batch__ge=1)
        q = start_stream(spark, src, probe, str(tmp_path / "chk"), files_per_trigger=2)
        at = parked.wait(120)
        pid = at["pid"]
        since = started(pid)
        fault_at = kill9(pid)
        parked.release()  # nobody is left to read it: the process is gone
        scenario.figures["killed_pid"], scenario.figures["killed_at"] = pid, at["coords"]
        q.awaitTermination(300)
        assert q.exception() is None, q.exception()
        assert not alive(pid, since)  # that process: its pid may run another one by now
        full_at = reader.wait_for(keys_of(range(n)), 90)
        t = read_back(broker.bootstrap, topic, range(n), reader)
    finally:
        reader.stop()
    scenario.apply(t)
    scenario.recovery(fault_at, full_at)
    parts = task_reports(sink)
    rerun = [p for p in parts if p.spark_attempt > 0]
    scenario.figures.update(batches=len(sink.reports), tasks_rerun=len(rerun),
                            replayed=sum(p.replayed for p in parts), pending_at_task_end=sum(p.pending for p in parts),
                            per_kafka_partition=t.per_partition, reader_errors=t.errors[:5])
    if t.lost:
        # Which case is it? Records still in a WAL (accepted, pending: nobody came for them, e.g. the
        # worker that held them was closed idle after the query ended), or in neither Kafka nor any WAL (a loss).
        why = explain_missing(t, wal, name, parts)
        scenario.notes.append(why[:1500])
        assert why.startswith("PENDING"), why
        # Within the guarantee; the documented way to deliver it at the end of a bounded job:
        drained = sink.drain(spark, timeout_s=60)
        scenario.figures.update(drain_replayed=drained.replayed, drain_pending=drained.pending)
        t = read_back(broker.bootstrap, topic, range(n))
        scenario.apply(t)
        assert t.lost == 0, f"still missing after {why[:7]}: {explain_missing(t, wal, name, parts)}"
    assert sum(r.rows for r in sink.reports) >= n
    assert rerun, "the killed task was not re-run by Spark (was the worker really mid-task?)"


@pytest.mark.parametrize("engine", ENGINES)
def test_02_python_worker_dies_after_commit_before_acks(spark, broker, tmp_path, scenario, hooks, engine):
    """The first worker to commit a task exits (os._exit) right after the commit, ack_timeout_s=0."""
    scenario.scenario = "02_worker_dies_after_commit" + engine_suffix(engine)
    scenario.title = f"Python worker dies after commit, before acks ({engine} engine)"
    scenario.fault = "crash at task.after_commit: os._exit right after the attempt is committed (ack_timeout_s=0)"
    n, files = 30000, 6
    src, wal = str(tmp_path / "src"), str(tmp_path / "wal")
    write_source(src, n, files, value_size=300)
    topic = new_topic(broker.bootstrap)
    name = sink_name("f02")
    sink = RecoverableKafkaSink(name, {"bootstrap.servers": broker.bootstrap}, topic=topic, wal_dir=wal,
                                ack_timeout_s=0.0, delivery_engine=engine)
    probe = BatchProbe(sink)
    crash = hooks.crash("task.after_commit", after_rows=1)
    reader = LiveReader(broker.bootstrap, topic).start()
    try:
        q = start_stream(spark, src, probe, str(tmp_path / "chk"), files_per_trigger=2)
        q.awaitTermination(300)
        assert q.exception() is None, q.exception()
        fired = crash.fired()
        assert fired, "the after_commit fault never fired"
        fault_at = fired["time"]
        full_at = reader.wait_for(keys_of(range(n)), 90)
        t = read_back(broker.bootstrap, topic, range(n), reader)
    finally:
        reader.stop()
    scenario.apply(t)
    scenario.recovery(fault_at, full_at)
    parts = task_reports(sink)
    replayed = sum(p.replayed for p in parts)
    scenario.figures.update(replayed=replayed, tasks_rerun=sum(p.spark_attempt > 0 for p in parts))
    assert t.lost == 0, f"lost {t.lost} rows, e.g. {t.lost_sample}"
    assert replayed > 0, "no task report shows the orphaned slot's committed records replayed"


@pytest.mark.parametrize("engine", ENGINES)
def test_12_driver_stops_and_restarts_query_from_checkpoint(spark, broker, tmp_path, scenario, hooks, engine):
    """query.stop() while a task of batch 2 is parked mid-task, then a new query on the same checkpoint and WAL."""
    scenario.scenario = "12_query_stop_restart" + engine_suffix(engine)
    scenario.title = f"Driver stops and restarts the query mid-run ({engine} engine)"
    scenario.fault = ("StreamingQuery.stop() while a task of batch >= 2 is parked at task.mid_task (attempt OPEN), "
                      "restart from the checkpoint")
    n, files = 40000, 8
    src, wal, chk = str(tmp_path / "src"), str(tmp_path / "wal"), str(tmp_path / "chk")
    write_source(src, n, files, value_size=300)
    topic = new_topic(broker.bootstrap)
    name = sink_name("f12")
    conf = {"bootstrap.servers": broker.bootstrap}
    sink1 = RecoverableKafkaSink(name, conf, topic=topic, wal_dir=wal, ack_timeout_s=30.0,
                                 delivery_engine=engine)
    probe1 = BatchProbe(sink1)
    reader = LiveReader(broker.bootstrap, topic).start()
    try:
        parked = hooks.park("task.mid_task", batch__ge=2)
        q1 = start_stream(spark, src, probe1, chk, files_per_trigger=1)
        at = parked.wait(120)
        interrupted = at["coords"]["batch"]
        fault_at = time.time()
        q1.stop()  # Spark cancels the parked task (and ends its worker); the query stops mid-batch
        stopped_in = time.time() - fault_at
        parked.release()  # if the worker outlived the cancel, let it go
        sink2 = RecoverableKafkaSink(name, conf, topic=topic, wal_dir=wal, ack_timeout_s=30.0,
                                 delivery_engine=engine)
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
    assert interrupted not in [r.batch_id for r in sink1.reports], "the parked batch completed in the first run"
    assert probe2.calls[0] == interrupted, (probe2.calls, interrupted)
