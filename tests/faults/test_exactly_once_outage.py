"""Scenario 20: exactly-once restarted after an outage longer than the brokers keep offsets, on more cores.

``templates/kafka_to_kafka.py`` (spark-submit, ``guarantee=exactly_once``,
``exactly_once_lanes`` left at ``"auto"``) copies a Kafka topic of 9
partitions on ``local[2]``: more inputs than a lane each would take on 2
cores, so the run pins 2 lanes, re-split by key. In batch 1, lane 0 commits and lane 1 is
parked before its commit; the whole query is SIGKILLed there. The broker
keeps committed offsets one minute (``offsets.retention.minutes=1``, looked
for every second), the sink is told so (``offsets_retention_s=60``), and the
test waits until the lane plan's offset and lane 0's marker offset are gone
(premise). The query is then restarted from its checkpoint on ``local[4]``:
Spark re-runs batch 1.

An "auto" run with no plan would split batch 1 otherwise on the cores of now
(a lane per input, or 4 lanes by key), and new lanes would publish records
lane 0 already committed. The
run's plan record (which compaction keeps) must pin it to its 2 lanes, and
lane 0's marker record must stand in for its expired offset. Judged by a
``read_committed`` reader: every input record exactly once (or, had the lane
count not been provable, a clear error before any record of the batch).
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

import pytest

from ..kafka_helpers import create_topic, read_topic
from .brokers import HurtableBroker
from .k2k import Job, k2k_conf, produce_source

pytestmark = pytest.mark.spark

# 9 input partitions on 2 cores: more than INPUT_LANES_PER_CORE per core, so "auto" re-splits by key into the
# cores' lanes (a lane per input would not depend on the cores at all); on 4 cores it would take a lane per input
N, IN_PARTS, OUT_PARTS, PER_TRIGGER = 18_000, 9, 3, 4_500
RETENTION_S = 60  # the broker's offsets.retention.minutes=1, told to the sink
EXPIRY_BOUND_S = 240.0  # the offsets' retention, the broker's expiry pass and the restart's slack


def _offset(bootstrap: str, group: str, topic: str) -> int | None:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": "false",
                  "isolation.level": "read_committed"})
    try:
        (tp,) = c.committed([TopicPartition(topic, 0)], timeout=10)
        return tp.offset if tp.offset >= 0 else None
    finally:
        c.close()


def test_20_exactly_once_restarted_past_the_offsets_retention_on_more_cores(tmp_path: Any, hooks: Any,
                                                                           scenario: Any) -> None:
    from devtools.jvm import spark_kafka_connector_jars
    from spark_recoverable_sink.delivery.exactly_once.markers import decode_offset
    from spark_recoverable_sink.delivery.exactly_once.plan import decode_plan

    scenario.scenario = "20_exactly_once_restart_past_offsets_retention"
    scenario.title = "Exactly-once restarted after its offsets expired, on twice the cores"
    scenario.fault = ("kill -9 of spark-submit's process group with lane 0 of batch 1 committed and lane 1 parked "
                      "before its commit; offsets expired (retention 1 min); restarted on local[4]")
    broker = HurtableBroker(str(tmp_path / "kafka"), proxied=False, properties={
        "offsets.retention.minutes": "1", "offsets.retention.check.interval.ms": "1000"}).start()
    job = None
    try:
        source, out = f"out-in-{uuid.uuid4().hex[:6]}", f"out-out-{uuid.uuid4().hex[:6]}"
        create_topic(broker.bootstrap, source, partitions=IN_PARTS)
        create_topic(broker.bootstrap, out, partitions=OUT_PARTS)
        produce_source(broker.bootstrap, source, N, IN_PARTS, keys=1000)
        name = f"eo-out-{uuid.uuid4().hex[:6]}"
        marker_topic = "rks-markers"
        conf = k2k_conf(tmp_path, broker.bootstrap, source, out, PER_TRIGGER,
                        sink={"name": name, "guarantee": "exactly_once", "exactly_once_lanes": None,
                              "offsets_retention_s": float(RETENTION_S), "settle_timeout_s": 300.0})
        job = Job(tmp_path, conf, hooks.dir, spark_kafka_connector_jars(), broker.bootstrap)

        # The fault: lane 0 of batch 1 committed, lane 1 parked before its commit, the whole query killed
        committed = hooks.park("eo.committed", batch=1, lane=0, timeout_s=300)
        held = hooks.park("eo.before_commit", batch=1, lane=1, timeout_s=600)
        job.start("local[2,3]")
        committed.wait(240)
        committed.release()
        held.wait(240)
        with open(tmp_path / "chk" / "metadata") as f:  # the query's id: the run of its record ids and lanes
            run = json.load(f)["id"].replace("-", "")[:16]
        plan = decode_plan(_offset(broker.bootstrap, f"rks-eo-plan.{name}:{run}", marker_topic))
        assert plan is not None and plan.lanes == 2, f"premise: auto on 2 cores pinned 2 lanes ({plan})"
        lane0 = decode_offset(_offset(broker.bootstrap, f"rks-eo.{name}:{run}:0", marker_topic))
        assert lane0 is not None and lane0.batch == 1, f"premise: lane 0 committed batch 1 ({lane0})"
        job.kill()
        held.release()

        # Premise: the plan's and lane 0's offsets expire (the broker deletes them a minute after their commit)
        plan_group = f"rks-eo-plan.{name}:{run}"
        deadline = time.monotonic() + EXPIRY_BOUND_S
        while any(_offset(broker.bootstrap, g, marker_topic) is not None
                  for g in (plan_group, f"rks-eo.{name}:{run}:0")):
            assert time.monotonic() < deadline, "premise: the broker never expired the plan's and lane 0's offsets"
            time.sleep(2.0)

        job.start("local[4,3]")  # Spark re-runs batch 1 from its offset log, on twice the cores
        assert job.wait(600) == 0, f"the restarted job failed (log: job-{job.runs}.log)"
        log = job.log()
        assert "lane plan offset expired: its record stands in (2 lanes" in log, "the plan came from its record"
        assert "ExactlyOnceMismatchError" not in log
        got = read_topic(broker.bootstrap, out, expected=N, isolation="read_committed")
        coords = [(lambda v: (v["partition"], v["offset"]))(json.loads(r.value)) for r in got.records]
        distinct = set(coords)
        scenario.rows_sent, scenario.records_read, scenario.distinct_ids = N, len(coords), len(distinct)
        scenario.lost, scenario.duplicates = N - len(distinct), len(coords) - len(distinct)
        assert scenario.duplicates == 0, f"{scenario.duplicates} input records twice for read_committed readers"
        assert distinct == {(i % IN_PARTS, i // IN_PARTS) for i in range(N)}, f"{scenario.lost} input records lost"
    finally:
        if job is not None and job.proc is not None and job.proc.poll() is None:
            job.kill()
        broker.stop()
