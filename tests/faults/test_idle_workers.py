"""Scenario 14: a bounded async job ends with records pending, and the workers holding them go away.

Spark closes a Python worker that stayed idle for a minute (``PythonWorkerFactory``,
``IDLE_WORKER_TIMEOUT_NS``: one minute, not configurable in Spark 4.3), and its
background thread goes with it. ``tests/programs/idle_worker.py`` measures that for
real (3-minute broker outage); here the close is done from outside (kill -9 of the
workers holding the sink's slots: what is left is the same, no process holds the
records) so that the scenario runs in seconds. Checked: the driver says how many
records are pending and how to deliver them; nobody delivers them by itself; the
documented ways (``sink.drain(spark)``, the next run of the same sink name and
``wal_dir``) deliver every one of them.
"""

from __future__ import annotations

import logging

import pytest

from spark_recoverable_sink import RecoverableKafkaSink
from tests.kafka_helpers import read_topic

from .conftest import ENGINES, engine_suffix, new_topic, sink_name
from .procs import kill9, wait_dead
from .proxy import SINK_CLIENT_ID
from .readback import read_back
from .slots import slot_holders
from .streams import BatchProbe, start_stream, write_source

pytestmark = pytest.mark.spark


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("how", ["drain", "next_run"])
def test_14_pending_records_of_closed_idle_workers_are_reported_and_delivered(
        spark, proxied_broker, tmp_path, scenario, caplog, how, engine):
    scenario.scenario = f"14_idle_workers_closed_{how}" + engine_suffix(engine)
    scenario.title = {"drain": "Async job ends, broker down, its workers closed: sink.drain()",
                      "next_run": "Async job ends, broker down, its workers closed: the next run"}[how] + \
        f" ({engine} engine)"
    scenario.fault = ("the proxy refuses the sink's connections; a bounded async query (ack_timeout_s=0) ends "
                      "with every record pending; the workers holding the sink's slots are ended (as Spark "
                      "closes idle workers); the network is back")
    n, files = 6000, 2
    src, wal = str(tmp_path / "src"), str(tmp_path / "wal")
    write_source(src, n, files, value_size=200)
    topic = new_topic(proxied_broker.bootstrap)
    name = sink_name("f14")
    conf = {"bootstrap.servers": proxied_broker.bootstrap, "client.id": SINK_CLIENT_ID, "message.timeout.ms": 3000}
    # The broker is unreachable from the sink's very first batch: without wait_for_broker the first-contact
    # check would fail the query (BrokerUnreachableError) instead of letting the records wait in the WAL.
    sink = RecoverableKafkaSink(name, conf, topic=topic, wal_dir=wal, ack_timeout_s=0.0, retry_backoff_max_s=1.0,
                                wait_for_broker=True, delivery_engine=engine)
    proxied_broker.proxy.refuse()  # reset before their first request reaches the broker: nothing of the sink gets there
    try:
        with caplog.at_level(logging.WARNING, logger="spark_recoverable_sink.sink"):
            q = start_stream(spark, src, BatchProbe(sink), str(tmp_path / "chk"), files_per_trigger=1)
            q.awaitTermination(300)
        assert q.exception() is None, q.exception()
        pending = sum(r.pending for r in sink.reports)
        warned = [r.getMessage() for r in caplog.records if "pending=" in r.getMessage()]
        holders = sorted({pid for pid in slot_holders(wal, name).values() if pid is not None})
        # What Spark does to a worker idle for a minute, done now: the records' holders go away.
        for pid in holders:
            kill9(pid)
        assert all(wait_dead(pid, 30) for pid in holders)
    finally:
        proxied_broker.proxy.restore()
    # Nobody is left to deliver them: no process holds a runtime of this sink.
    nobody = read_topic(proxied_broker.bootstrap, topic, idle_s=3.0, timeout_s=10)
    if how == "drain":
        drained = sink.drain(spark, timeout_s=60)
        scenario.figures.update(drain_replayed=drained.replayed, drain_pending=drained.pending,
                                drain_workers=drained.workers)
    else:
        again = RecoverableKafkaSink(name, conf, topic=topic, wal_dir=wal, ack_timeout_s=30.0,
                                     delivery_engine=engine)
        rep = again.write(spark.createDataFrame([("next-run", b"x")], "key string, value binary"), batch_id=10**6)
        scenario.figures.update(next_run_replayed=rep.replayed)
    t = read_back(proxied_broker.bootstrap, topic, range(n), wait_s=60)
    scenario.apply(t)
    scenario.figures.update(pending_at_query_end=pending, workers_ended=len(holders),
                            delivered_before_drain_or_next_run=len(nobody.records), warning=warned[-1:])
    assert pending == n, f"the broker was down: every record should be pending, reports say {pending}"
    assert holders, "no worker held a slot of the sink after the query"
    assert warned, "the driver did not warn that records are pending in the WALs"
    assert "pending=" in warned[-1] and "sink.drain(spark)" in warned[-1] and wal in warned[-1], warned[-1]
    assert len(nobody.records) == 0, "records arrived with no process of the sink alive?"
    if how == "drain":
        assert drained.replayed == n and drained.pending == 0, drained
    else:
        assert rep.replayed == n, rep
    assert t.lost == 0, f"lost {t.lost} rows, e.g. {t.lost_sample}"
