"""A lane whose task lands on another worker than its last unit: what its new producer reads, on the real broker.

Spark hands a task the Python worker that went idle first, so a lane's unit
often runs in another worker than the lane's last one ("hops"). Its new
producer is initialised and swept (:func:`...delivery.exactly_once.sweep.sweep`:
one aborted transaction over the lane's partitions and its group offset).
A read of the lane's marker just after that abort waits until the aborted
offset commit is stable (measured: 60-170 ms of each hop), so the marker is
read once, after the init and before the sweep, which commits nothing.
"""

from __future__ import annotations

import pytest

from spark_recoverable_sink.delivery.exactly_once import commit as transactions
from spark_recoverable_sink.delivery.exactly_once.marker_reads import MarkerReader
from spark_recoverable_sink.task.writer import write_partition

from ..kafka_helpers import read_topic
from .rows import batches
from .test_exactly_once import RC, _assert_exactly, _child, _eo

pytestmark = pytest.mark.broker


def test_a_lane_that_hopped_reads_its_marker_once_and_not_after_its_sweep(broker, topic, tmp_path, monkeypatch):
    cfg = _eo(broker.bootstrap, str(tmp_path / "a"), topic, ack_timeout_s=30)
    assert write_partition(cfg, 0, 0, 0, batches(0, 100, 50), run="r").acked == 100
    other = _eo(broker.bootstrap, str(tmp_path / "b"), topic, ack_timeout_s=30, name=cfg.name)
    assert _child(other, 1, 0, 100, "r").returncode == 0  # the lane's next unit ran in another worker
    events: list[str] = []
    real_sweep, real_read = transactions.sweep, MarkerReader.from_offset

    def sweep(*a, **k):
        events.append("sweep")
        return real_sweep(*a, **k)

    def read(self, *a, **k):
        events.append("read")
        return real_read(self, *a, **k)

    monkeypatch.setattr(transactions, "sweep", sweep)
    monkeypatch.setattr(MarkerReader, "from_offset", read)
    assert write_partition(cfg, 2, 0, 0, batches(0, 100, 50), run="r").acked == 100  # back in this worker
    assert "sweep" in events, events
    after = events[events.index("sweep") + 1:]
    assert after == [], f"the marker was read after the new producer's sweep: {events}"
    _assert_exactly(read_topic(broker.bootstrap, topic, expected=300, isolation=RC), cfg, "r",
                    {(b, 0): 100 for b in range(3)})


def test_a_lane_new_to_a_worker_reads_partitions_with_the_worker_s_admin_client(broker, topic, tmp_path, monkeypatch):
    """A lane's new producer sweeps the partitions of its topics, read with a metadata request: the worker's admin
    client of the sink is made once and kept, not one per new producer (a librdkafka instance and its connection:
    about 50 ms of each lane that moved to this worker, measured outside Spark)."""
    from confluent_kafka import admin as kafka_admin

    made: list[int] = []
    real_init = kafka_admin.AdminClient.__init__

    def counted(self, conf, **kwargs):
        made.append(1)
        real_init(self, conf, **kwargs)

    cfg = _eo(broker.bootstrap, str(tmp_path), topic, ack_timeout_s=30)
    assert write_partition(cfg, 0, 0, 0, batches(0, 100, 50), run="r").acked == 100  # lane 0: this worker's first
    monkeypatch.setattr(kafka_admin.AdminClient, "__init__", counted)
    assert write_partition(cfg, 0, 1, 0, batches(1, 100, 50), run="r").acked == 100  # lane 1: a new producer, swept
    assert made == [], f"{len(made)} admin clients made for lane 1's new producer"
    _assert_exactly(read_topic(broker.bootstrap, topic, expected=200, isolation=RC), cfg, "r", {(0, 0): 100, (0, 1): 100})
