"""Scenario 15: exactly-once through a broker outage longer than ``ack_timeout_s`` and the transaction timeout.

Read back with ``isolation.level=read_committed``: every row exactly once,
and the query never fails; the batch caught by the outage stays open (its
units wait in the WALs) until the broker is back.
"""

from __future__ import annotations

import time

import pytest

from spark_recoverable_sink import RecoverableKafkaSink

from .conftest import ENGINES, engine_suffix, new_topic, sink_name
from .proxy import SINK_CLIENT_ID
from .readback import read_back
from .streams import BatchProbe, start_stream, write_source

pytestmark = pytest.mark.spark


@pytest.mark.parametrize("engine", ENGINES)
def test_15_exactly_once_through_a_broker_outage(spark, own_broker, tmp_path, scenario, hooks, engine):
    scenario.scenario = "15_exactly_once_outage" + engine_suffix(engine)
    scenario.title = f"Exactly-once: broker SIGSTOPped 15 s mid-batch ({engine} engine)"
    scenario.fault = ("SIGSTOP the broker while a task of batch 1 is parked after its WAL commit, before its "
                      "transaction (ack_timeout_s=1, transaction.timeout.ms=6000), release it, SIGCONT 15 s later")
    n, files, outage_s = 12000, 4, 15.0
    src, wal = str(tmp_path / "src"), str(tmp_path / "wal")
    write_source(src, n, files, value_size=200)
    topic = new_topic(own_broker.bootstrap)
    conf = {"bootstrap.servers": own_broker.bootstrap, "client.id": SINK_CLIENT_ID,
            "message.timeout.ms": 4000, "transaction.timeout.ms": 6000}
    sink = RecoverableKafkaSink(sink_name("f15"), conf, topic=topic, wal_dir=wal, ack_timeout_s=1.0,
                                guarantee="exactly_once", delivery_engine=engine)
    probe = BatchProbe(sink)
    parked = hooks.park("eo.before_transaction", batch__ge=1)
    q = start_stream(spark, src, probe, str(tmp_path / "chk"), files_per_trigger=1)
    try:
        parked.wait(120)
        own_broker.pause()
        fault_at = time.time()
        parked.release()  # its transaction starts against a stopped broker
        time.sleep(outage_s)  # the outage's length, not a synchronisation
        open_during = sorted(b for b in probe.started if b not in probe.ended)
        own_broker.resume()
    finally:
        parked.release()
        own_broker.resume()
    q.awaitTermination(300)
    assert q.exception() is None, q.exception()
    t = read_back(own_broker.bootstrap, topic, range(n), isolation="read_committed")
    scenario.apply(t)
    scenario.figures.update(outage_s=outage_s, batches_open_during_outage=open_during,
                            pending_at_task_end=sum(r.pending for r in sink.reports),
                            batch_seconds={r.batch_id: round(r.seconds, 1) for r in sink.reports})
    scenario.recovery(fault_at, max(probe.ended.values()))
    assert sum(r.pending for r in sink.reports) > 0, "no task returned with its unit pending: the outage missed"
    assert open_during, "no batch was waiting for its transactions during the outage"
    assert (t.lost, t.duplicates) == (0, 0), f"lost {t.lost}, duplicates {t.duplicates}: {t.lost_sample}"
