"""Tier 2: first-day mistakes against the real broker, without Spark.

Measured on Apache Kafka with librdkafka: a topic is created on
first use unless the client sets ``allow.auto.create.topics=false``; then the
delivery fails with ``UNKNOWN_TOPIC_OR_PART`` after
``topic.metadata.propagation.max.ms`` and later produce calls are refused at
once with ``_UNKNOWN_TOPIC``. A refused connection is reported through
``error_cb`` as ``_TRANSPORT`` then ``_ALL_BROKERS_DOWN`` within milliseconds.
"""

from __future__ import annotations

import time
import uuid

import pyarrow as pa
import pytest

from devtools.kafka_broker import free_port
from spark_recoverable_sink.config import SinkConfig
from spark_recoverable_sink.delivery.contact import first_contact_failure
from spark_recoverable_sink.task.runtime import get_runtime, reset_runtimes
from spark_recoverable_sink.task.writer import write_partition

from ..kafka_helpers import create_topic

pytestmark = pytest.mark.broker


def _config(bootstrap: str, wal_dir: str, topic: str, **kw) -> SinkConfig:
    kafka = kw.pop("kafka_conf", {})
    return SinkConfig.build(kw.pop("name", "first"), {"bootstrap.servers": bootstrap, **kafka}, wal_dir,
                            topic=topic, **kw)


def _values(n: int, size: int = 10) -> pa.RecordBatch:
    return pa.RecordBatch.from_pydict({"value": [b"%0*d" % (size, i) for i in range(n)]})


def test_no_broker_at_the_address_is_reported_at_once_and_nothing_is_dropped(tmp_path):
    address = f"127.0.0.1:{free_port()}"  # nothing listens there
    cfg = _config(address, str(tmp_path), "t", ack_timeout_s=120)
    t0 = time.monotonic()
    report = write_partition(cfg, 1, 0, 0, iter([_values(5)]))
    # all brokers are known down from the start: the task does not wait its whole ack timeout
    assert time.monotonic() - t0 < 60
    assert (report.rows, report.acked, report.pending, report.broker_reached) == (5, 0, 5, 0)
    assert address in report.last_error and "refused" in report.last_error.lower()
    assert first_contact_failure([report]) == (5, report.last_error)
    assert get_runtime(cfg).wal.stats().chunks == 1  # accepted records stay in the WAL


def test_a_broker_reached_once_then_gone_keeps_todays_behaviour(own_broker, tmp_path):
    topic = f"t-{uuid.uuid4().hex[:8]}"
    create_topic(own_broker.bootstrap, topic, 1)
    cfg = _config(own_broker.bootstrap, str(tmp_path), topic, ack_timeout_s=30)
    report = write_partition(cfg, 1, 0, 0, iter([_values(5)]))
    assert (report.acked, report.broker_reached) == (5, 1)
    reset_runtimes()  # a worker restart: the memory of having reached a broker is on disk
    own_broker.stop()
    short = _config(own_broker.bootstrap, str(tmp_path), topic, ack_timeout_s=2)
    report = write_partition(short, 2, 0, 0, iter([_values(5)]))
    assert (report.pending, report.broker_reached) == (5, 1)
    assert first_contact_failure([report]) is None  # an outage: wait and retry from the WAL


def test_a_topic_that_does_not_exist_is_dead_lettered_naming_it(broker, tmp_path):
    missing = f"missing-{uuid.uuid4().hex[:8]}"
    cfg = _config(broker.bootstrap, str(tmp_path), missing, ack_timeout_s=20,
                  kafka_conf={"allow.auto.create.topics": "false", "topic.metadata.propagation.max.ms": "1000"})
    report = write_partition(cfg, 1, 0, 0, iter([_values(3)]))
    assert (report.acked, report.pending, report.dead_lettered) == (0, 0, 3)  # not retried forever
    assert len(report.dead_letters) == 3
    for _rid, reason, _t in report.dead_letters:
        assert f"topic {missing!r} does not exist" in reason
    assert report.broker_reached == 0 and first_contact_failure([report]) is None  # the broker answered


def test_a_partition_out_of_range_says_how_many_the_topic_has(broker, tmp_path):
    topic = f"t-{uuid.uuid4().hex[:8]}"
    create_topic(broker.bootstrap, topic, 3)
    cfg = _config(broker.bootstrap, str(tmp_path), topic, ack_timeout_s=20)
    batch = pa.RecordBatch.from_pydict({"value": [b"a", b"b"], "partition": pa.array([1, 7], pa.int32())})
    report = write_partition(cfg, 1, 0, 0, iter([batch]))
    assert (report.acked, report.dead_lettered) == (1, 1)
    (_rid, reason, _token), = report.dead_letters
    assert "partition column is 7" in reason and f"topic {topic!r} has 3 partition(s), 0..2" in reason


def test_a_value_over_the_producers_limit_names_message_max_bytes(broker, tmp_path):
    topic = f"t-{uuid.uuid4().hex[:8]}"
    create_topic(broker.bootstrap, topic, 1)
    cfg = _config(broker.bootstrap, str(tmp_path), topic, ack_timeout_s=20,
                  kafka_conf={"message.max.bytes": "20000"})
    batch = pa.RecordBatch.from_pydict({"value": [b"ok", b"x" * 50000]})
    report = write_partition(cfg, 1, 0, 0, iter([batch]))
    assert (report.acked, report.dead_lettered) == (1, 1)
    (_rid, reason, _token), = report.dead_letters
    assert "over the producer's message.max.bytes=20000" in reason and "kafka_conf" in reason
