"""Tier 2: exactly-once through a broker SIGKILLed and restarted on its log, mid-unit (both delivery engines).

The task is parked at ``task.mid_task`` (its transaction begun, a chunk
produced into it), the broker is SIGKILLed, the task released, and the
broker restarted on the same log 6 s later. librdkafka's
``send_offsets_to_transaction()`` can then block past its timeout (the group
coordinator went away: librdkafka #5456, #5511); the sink bounds that call
(``delivery.engine.bounded``), replaces the wedged producer and tries the
unit again. Measured before the bound: in about one run in three the task
stayed blocked in that call for minutes, far past its ``ack_timeout_s``.

A second test lets the open transaction, with records in the log, expire
while the broker is down: the restarted broker aborts it without writing
its ABORT markers (see the test), and the lane's new producer must close
those records (its sweep) before it commits the unit again.
"""

from __future__ import annotations

import threading
import time

import pytest

from spark_recoverable_sink.deadline import Deadline
from spark_recoverable_sink.delivery.engine import BOUND_GRACE_S
from spark_recoverable_sink.native import library
from spark_recoverable_sink.task.runtime import get_runtime
from spark_recoverable_sink.task.writer import write_partition

from ..kafka_helpers import create_topic, read_topic, wait_for_uncommitted
from ..record_ids import ids_of
from .rows import batches
from .test_exactly_once import _eo

pytestmark = pytest.mark.broker


ENGINES = ["python", pytest.param("native", marks=pytest.mark.skipif(
    not library.available(), reason=f"the native extension is not built here: {library.why_unavailable()}"))]
ACK_TIMEOUT_S = 20.0


def _unit_through_a_broker_restart(broker, tmp_path, hooks, engine, outage_s: float = 6.0,
                                   on_broker: bool = False) -> tuple[list[str], list[str]]:
    """Batch 0 committed; batch 1's task parked mid-unit, the broker SIGKILLed, restarted on its log ``outage_s`` later.

    ``on_broker``: the kill waits until records of batch 1's open
    transaction are in the topic's log (read_uncommitted).

    Asserts the task returns within its window and that no row stays pending
    once the worker's retries ran; returns (ids read back read_committed, ids written).
    """
    create_topic(broker.bootstrap, "eo-restart", partitions=3)
    cfg = _eo(broker.bootstrap, str(tmp_path), "eo-restart", ack_timeout_s=ACK_TIMEOUT_S, delivery_engine=engine,
              kafka_conf={"message.timeout.ms": 5000, "retry.backoff.ms": 200, "transaction.timeout.ms": 10000})
    assert write_partition(cfg, 0, 0, 0, batches(0, 5000, 1000), run="r").acked == 5000
    parked = hooks.park("task.mid_task", batch__ge=1)
    out: dict = {}
    task = threading.Thread(target=lambda: out.update(rep=write_partition(cfg, 1, 0, 0, batches(0, 5000, 1000),
                                                                          run="r")))
    task.start()
    parked.wait(60)
    if on_broker:
        wait_for_uncommitted(broker.bootstrap, "eo-restart", 1, 0)
    broker.kill()
    parked.release()
    time.sleep(outage_s)  # the outage's length, not a synchronisation
    broker.start()
    # The task keeps its window: the ack wait, plus one client step that may start at its end and is bounded.
    task.join(ACK_TIMEOUT_S + 30.0 + BOUND_GRACE_S + 15.0)
    assert not task.is_alive(), "the task is still blocked, far past its ack window"
    units = get_runtime(cfg).units
    end = time.monotonic() + 120
    while units.pending_rows() and time.monotonic() < end:  # what the worker's poller does between tasks
        units.retry_pending(Deadline(10.0))
        time.sleep(0.2)
    assert units.pending_rows() == 0, out.get("rep")
    got = read_topic(broker.bootstrap, "eo-restart", expected=10000, isolation="read_committed")
    want = ids_of(cfg.name, "r", 0, 0, batches(0, 5000, 1000), cfg.topic) + \
        ids_of(cfg.name, "r", 1, 0, batches(0, 5000, 1000), cfg.topic)
    return [r.rid for r in got.records], want


@pytest.mark.parametrize("engine", ENGINES)
def test_a_unit_caught_by_a_broker_restart_returns_in_time_and_is_delivered(own_broker, tmp_path, hooks, engine):
    ids, want = _unit_through_a_broker_restart(own_broker, tmp_path, hooks, engine)
    assert len(set(want)) == 10000 and set(ids) == set(want), "rows lost"
    assert len(ids) == len(want), f"{len(ids) - len(set(ids))} rows twice under exactly-once"


@pytest.mark.parametrize("engine", ENGINES)
def test_a_transaction_the_restarted_broker_aborts_without_markers_is_closed_before_the_lane_commits(
        own_broker, tmp_path, hooks, engine):
    """The open transaction, with records in the log, expires while the broker is down (13 s > its 10 s timeout).

    The restarted broker aborts it in its first seconds, while its previous
    incarnation is still registered; when the controller fences that
    incarnation the partitions lose their leader, and the broker skips the
    ABORT markers ("Couldn't find leader endpoint for partitions ... likely
    deleted already", Apache Kafka 4.4.0, single node) yet records the
    transaction as aborted. The records stay open in the log under the
    lane's producer id, and the lane's next COMMIT on those partitions
    would close them as committed: read twice. The sink's new producer closes
    them first (an aborted sweep transaction, ``delivery/exactly_once/sweep.py``).
    """
    ids, want = _unit_through_a_broker_restart(own_broker, tmp_path, hooks, engine, outage_s=13.0, on_broker=True)
    assert sorted(ids) == sorted(want), f"{len(ids) - len(set(ids))} rows twice under exactly-once"
