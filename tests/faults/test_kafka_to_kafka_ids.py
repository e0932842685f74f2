"""Scenario 18: Kafka → Spark → Kafka at-least-once: record ids survive the Kafka source's re-run of a batch.

``templates/kafka_to_kafka.py`` (run by spark-submit, ``guarantee=at_least_once``,
``record_ids`` left at its default) copies the input while the test bounces
it from outside, at a named point the job reaches:

1. the whole query (spark-submit's process group) is SIGKILLed while a task
   of batch 1 is parked part-way through its input, once some of that task's
   records are in the output topic;
2. it is restarted from its checkpoint: Spark's Kafka source re-runs batch 1
   from its offset log (with a Kafka-partition -> Spark-partition split of
   its own), and the restarted workers replay what the dead ones left in the
   WAL.

The output holds some input records twice (the premise: part of batch 1 was
written by both runs). A consumer that de-duplicates on the ``rks-id`` header,
as the README tells it to, must see every input record exactly once: twins
carry one id, and no two different records share one.
"""

from __future__ import annotations

import json
import time
import uuid
from collections import defaultdict
from typing import Any

import pytest

from ..kafka_helpers import create_topic, read_topic
from .k2k import Job, k2k_conf, produce_source

pytestmark = pytest.mark.spark

N, IN_PARTS, OUT_PARTS, PER_TRIGGER = 40_000, 4, 3, 10_000


def _coords(value: bytes | None) -> tuple[int, int]:
    v = json.loads(value or b"{}")
    return v["partition"], v["offset"]


def _wait_for_output(bootstrap: str, topic: str, at_least: int, timeout_s: float) -> int:
    """How many records ``topic`` holds, once at least ``at_least`` (bounded by ``timeout_s``)."""
    deadline = time.monotonic() + timeout_s
    while True:
        n = len(read_topic(bootstrap, topic, idle_s=0.5, timeout_s=10).records)
        if n >= at_least or time.monotonic() > deadline:
            return n
        time.sleep(0.5)


def test_18_kafka_to_kafka_at_least_once_ids_survive_a_restart_mid_batch(own_broker: Any, tmp_path: Any,
                                                                         hooks: Any, scenario: Any) -> None:
    from devtools.jvm import spark_kafka_connector_jars

    scenario.scenario = "18_kafka_to_kafka_ids_at_least_once"
    scenario.title = "Kafka -> Spark -> Kafka at-least-once: record ids across a restart mid-batch"
    scenario.fault = "kill -9 of spark-submit's process group while a task of batch 1 is parked part-way"

    bootstrap = own_broker.bootstrap
    source, out = f"ids-in-{uuid.uuid4().hex[:6]}", f"ids-out-{uuid.uuid4().hex[:6]}"
    create_topic(bootstrap, source, partitions=IN_PARTS)
    create_topic(bootstrap, out, partitions=OUT_PARTS)
    produce_source(bootstrap, source, N, IN_PARTS, keys=1000)
    conf = k2k_conf(tmp_path, bootstrap, source, out, PER_TRIGGER, sink={"name": f"k2k-ids-{uuid.uuid4().hex[:6]}"})
    job = Job(tmp_path, conf, hooks.dir, spark_kafka_connector_jars(), bootstrap)
    try:
        # Fault: batch 1 cut part-way through a task (some of its records produced), the whole query killed
        mid = hooks.park("task.mid_task", batch=1, rows__ge=1000)
        job.start()
        mid.wait(240)
        written = _wait_for_output(bootstrap, out, PER_TRIGGER + 1000, 60)  # batch 0, and batch 1's first rows
        assert written > PER_TRIGGER, f"premise: batch 1's first records in the output before the kill ({written})"
        job.kill()
        mid.release()
        job.start()
        assert job.wait(600) == 0, f"the restarted job failed (log: job-{job.runs}.log)"
    finally:
        if job.proc is not None and job.proc.poll() is None:
            job.kill()

    got = read_topic(bootstrap, out, expected=N)
    twins: dict[str, set[tuple[int, int]]] = defaultdict(set)
    for r in got.records:
        assert r.rid is not None, f"a record without an id: {r}"
        twins[r.rid].add(_coords(r.value))
    assert len(got.records) > N, "premise: the restart wrote part of batch 1 twice"
    shared = {rid: sorted(c) for rid, c in twins.items() if len(c) > 1}
    assert not shared, f"{len(shared)} id(s) carried by different input records, e.g. {list(shared.items())[:3]}"
    seen = [next(iter(c)) for c in twins.values()]  # what a consumer that de-duplicates on the id keeps
    scenario.rows_sent, scenario.records_read, scenario.distinct_ids = N, len(got.records), len(twins)
    scenario.lost, scenario.duplicates = N - len(set(seen)), len(got.records) - len(twins)
    assert len(seen) == len(set(seen)), f"{len(seen) - len(set(seen))} input records under two ids"
    assert set(seen) == {(i % IN_PARTS, i // IN_PARTS) for i in range(N)}, f"{N - len(set(seen))} records missing"
