"""Tier 2: exactly-once through a broker SIGKILLed and restarted on its log, mid-unit (both delivery engines).

The task is parked at ``task.mid_task`` (its transaction begun, a chunk
produced into it), the broker is SIGKILLed, the task released, and the
broker restarted on the same log 6 s later. librdkafka's
``send_offsets_to_transaction()`` can then block past its timeout (the group
coordinator went away: librdkafka #5456, #5511); the sink bounds that call
(``delivery.engine.bounded``), replaces the wedged producer and tries the
unit again. Measured before the bound: in about one run in three the task
stayed blocked in that call for minutes, far past its ``ack_timeout_s``.

Known defect, not fixed yet (so the test runs only with
``RKS_KNOWN_DEFECTS=1``; DESIGN.md, "What stands in the way of more"): in
about one run in three the restarted broker's coordinator no longer knows
that the dead producer's open transaction wrote to a partition, so no abort
marker closes those records; the lane's next producer (same producer id, a
later epoch) commits its own transaction on that partition, and
read_committed readers see the dead transaction's records with it:
duplicates (seen: 355 to 2,000 of 5,000 rows).
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

from ..kafka_helpers import create_topic, read_topic
from ..known_defects import eo_broker_restart
from ..record_ids import ids_of
from .rows import batches
from .test_exactly_once import _eo

pytestmark = pytest.mark.broker


ENGINES = ["python", pytest.param("native", marks=pytest.mark.skipif(
    not library.available(), reason=f"the native extension is not built here: {library.why_unavailable()}"))]
ACK_TIMEOUT_S = 20.0


def _unit_through_a_broker_restart(broker, tmp_path, hooks, engine) -> tuple[list[str], list[str]]:
    """Batch 0 committed; batch 1's task parked mid-unit, the broker SIGKILLed, restarted on its log 6 s later.

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
    broker.kill()
    parked.release()
    time.sleep(6.0)  # the outage's length, not a synchronisation
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
    assert set(ids) == set(want) and len(set(want)) == 10000  # nothing lost


@eo_broker_restart
@pytest.mark.parametrize("engine", ENGINES)
def test_a_unit_caught_by_a_broker_restart_is_committed_once(own_broker, tmp_path, hooks, engine):
    ids, want = _unit_through_a_broker_restart(own_broker, tmp_path, hooks, engine)
    assert sorted(ids) == sorted(want), f"{len(ids) - len(set(ids))} rows twice under exactly-once"
