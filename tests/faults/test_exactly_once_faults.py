"""Scenarios 15, 16: exactly-once through a broker outage, and through workers killed inside open transactions.

Read back with ``isolation.level=read_committed``: every row exactly once,
and the query never fails. 15: the broker SIGSTOPped for longer than
``ack_timeout_s`` and the transaction timeout; the batch caught by the outage
stays open (its units wait in the WALs) until the broker is back, and the
transaction the broker aborted is redone. 16: Python workers SIGKILLed with
their transaction open and records of it on the broker; the broker aborts
those transactions (their records stay in the log, invisible to
read_committed readers) and the re-run tasks commit every row once.
"""

from __future__ import annotations

import time

import pytest

from spark_recoverable_sink import RecoverableKafkaSink

from ..kafka_helpers import wait_for_uncommitted
from .conftest import ENGINES, engine_suffix, new_topic, sink_name
from .procs import alive, kill9, started
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


@pytest.mark.parametrize("engine", ENGINES)
def test_16_exactly_once_workers_sigkilled_inside_open_transactions(spark, broker, tmp_path, scenario, hooks,
                                                                     engine):
    """Three Python workers SIGKILLed, each with its transaction open and records of it on the broker."""
    scenario.scenario = "16_exactly_once_kills_in_transactions" + engine_suffix(engine)
    scenario.title = f"Exactly-once: 3 Python workers SIGKILLed inside open transactions ({engine} engine)"
    scenario.fault = ("kill -9 of the pyspark worker parked at eo.produced_chunk (its first chunk produced into "
                      "its open transaction, killed once its records are on the broker), in 3 successive batches")
    n, files, kills = 24000, 6, 3
    src, wal = str(tmp_path / "src"), str(tmp_path / "wal")
    write_source(src, n, files, value_size=200)
    topic = new_topic(broker.bootstrap)
    sink = RecoverableKafkaSink(sink_name("f16"), {"bootstrap.servers": broker.bootstrap}, topic=topic,
                                wal_dir=wal, ack_timeout_s=30.0, guarantee="exactly_once", delivery_engine=engine)
    probe = BatchProbe(sink)
    killed: list[dict] = []
    starts: list[int | None] = []  # each killed process's start time: its pid may be reused later
    parked = hooks.park("eo.produced_chunk", batch__ge=1)
    q = start_stream(spark, src, probe, str(tmp_path / "chk"), files_per_trigger=1)
    try:
        for k in range(kills):
            at = parked.wait(120)
            # its chunk on the broker, inside the open transaction. One file per trigger: a batch is one task, one
            # lane named by its file, whose ids are scoped by the file's name (not by the Spark partition)
            wait_for_uncommitted(broker.bootstrap, topic, at["coords"]["batch"], None)
            since = started(at["pid"])
            fault_at = kill9(at["pid"])
            parked.release()  # nobody is left to read it: the process is gone
            killed.append({"pid": at["pid"], "coords": at["coords"], "at": fault_at})
            starts.append(since)
            if k + 1 < kills:  # the next kill in a later batch: each killed task is re-run once, in peace
                parked = hooks.park("eo.produced_chunk", batch__ge=at["coords"]["batch"] + 1)
    finally:
        parked.release()
    q.awaitTermination(300)
    assert q.exception() is None, q.exception()
    t = read_back(broker.bootstrap, topic, range(n), isolation="read_committed")
    raw = read_back(broker.bootstrap, topic, range(n), isolation="read_uncommitted")
    scenario.apply(t)
    scenario.recovery(killed[0]["at"], max(probe.ended.values()))
    scenario.figures.update(killed=killed, records_in_log=raw.records_read,
                            aborted_rows_in_log=raw.records_read - t.records_read)
    assert len(killed) == kills and not any(map(alive, (k["pid"] for k in killed), starts))  # a pid may run another
    assert (t.lost, t.duplicates) == (0, 0), f"lost {t.lost}, duplicates {t.duplicates}: {t.lost_sample}"
    # The killed transactions' records are in the log, aborted: read_uncommitted sees them, read_committed not.
    assert raw.duplicates > 0, "no record of a killed transaction reached the broker: the kills missed"
