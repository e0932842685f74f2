"""The marker topic on the real broker: checked before it is used, read from its log start, watched while in use.

Each test has a marker topic of its own (``marker_topic``), so what one does
to it (auto-created, records deleted, deleted outright) touches no other.
Every check of the data reads it back ``read_committed``.
"""

from __future__ import annotations

import time
import uuid

import pytest

from spark_recoverable_sink import errors
from spark_recoverable_sink.delivery.exactly_once.markers import decode_record
from spark_recoverable_sink.delivery.exactly_once.names import lane_id
from spark_recoverable_sink.task.runtime import get_runtime, reset_runtimes
from spark_recoverable_sink.task.writer import write_partition

from ..kafka_helpers import create_topic, read_topic
from .rows import batches
from .test_exactly_once import RC, _assert_exactly, _eo

pytestmark = pytest.mark.broker


def _admin(bootstrap: str):
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": bootstrap, "allow.auto.create.topics": "false"})  # lookups create nothing


def _policy(bootstrap: str, name: str) -> str:
    from confluent_kafka.admin import ConfigResource

    admin = _admin(bootstrap)  # kept alive until the answer came
    (fut,) = admin.describe_configs([ConfigResource("topic", name)]).values()
    return fut.result(30)["cleanup.policy"].value


def _exists(bootstrap: str, name: str) -> bool:
    t = _admin(bootstrap).list_topics(name, timeout=10).topics.get(name)
    return t is not None and t.error is None and bool(t.partitions)


def _topic_id(bootstrap: str, name: str) -> str:
    from confluent_kafka import TopicCollection

    admin = _admin(bootstrap)
    return str(admin.describe_topics(TopicCollection([name]))[name].result(30).topic_id)


def _auto_create(bootstrap: str, name: str) -> None:
    """``name`` created as a broker's auto-creation makes it (a producer's metadata request): broker defaults."""
    from confluent_kafka import Producer

    Producer({"bootstrap.servers": bootstrap}).list_topics(name, timeout=10)  # librdkafka's producer asks for it
    end = time.monotonic() + 30
    while not _exists(bootstrap, name):
        assert time.monotonic() < end, f"{name} was not auto-created (auto.create.topics.enable?)"
        time.sleep(0.1)  # waiting for the broker's creation, bounded


def _delete(bootstrap: str, name: str) -> None:
    """Delete ``name`` and wait until the broker no longer knows it."""
    admin = _admin(bootstrap)
    for _t, fut in admin.delete_topics([name], operation_timeout=30).items():
        fut.result(60)
    end = time.monotonic() + 30
    while _exists(bootstrap, name):
        assert time.monotonic() < end, f"{name} still listed 30 s after its deletion"
        time.sleep(0.1)  # waiting for the deletion to reach the metadata, bounded


def _wait_offset_gone(bootstrap: str, group: str, name: str) -> None:
    """Wait until ``group`` has no committed offset on ``name``'s partition 0 (Kafka deletes them with the topic)."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        end = time.monotonic() + 30
        while c.committed([TopicPartition(name, 0)], timeout=10)[0].offset >= 0:
            assert time.monotonic() < end, f"{group}'s offset on {name} outlived the topic by 30 s"
            time.sleep(0.1)  # waiting for the coordinator to drop them, bounded
    finally:
        c.close()


def test_an_auto_created_marker_topic_is_refused_before_anything_is_produced(broker, topic, tmp_path):
    """A ``cleanup.policy=delete`` marker topic loses lanes' markers to retention: refused at the first batch."""
    mt = f"mk-auto-{uuid.uuid4().hex[:8]}"
    _auto_create(broker.bootstrap, mt)
    assert _policy(broker.bootstrap, mt) == "delete"
    cfg = _eo(broker.bootstrap, str(tmp_path), topic, ack_timeout_s=30, marker_topic=mt)
    with pytest.raises(errors.ConfigError) as e:
        write_partition(cfg, 0, 0, 0, batches(0, 200, 50), run="r")
    text = str(e.value)
    assert e.value.option == "marker_topic" and mt in text and "cleanup.policy=delete" in text, text
    assert "cleanup.policy=compact" in text and "kafka-configs" in text, text  # the fix, spelled out
    assert read_topic(broker.bootstrap, topic, idle_s=1.0, timeout_s=10).records == []  # not even uncommitted
    s = get_runtime(cfg).wal.stats()
    assert (s.chunks, s.attempts) == (0, 0), s.as_dict()  # the task's attempt went with its error
    assert _policy(broker.bootstrap, mt) == "delete"  # the sink changes no topic's configuration
    from spark_recoverable_sink.delivery.exactly_once.topic import marker_topic_id

    with pytest.raises(errors.ConfigError, match="cleanup.policy=delete"):
        marker_topic_id(cfg, 30.0)  # the driver's check at a query's first batch says the same
    # The operator's fix is taken at the next batch: a refusal is not remembered.
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource

    res = ConfigResource("topic", mt, incremental_configs=[
        ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.SET)])
    admin = _admin(broker.bootstrap)
    for _r, fut in admin.incremental_alter_configs([res]).items():
        fut.result(30)
    assert write_partition(cfg, 0, 0, 1, batches(0, 200, 50), run="r").acked == 200
    _assert_exactly(read_topic(broker.bootstrap, topic, expected=200, isolation=RC), cfg, "r", {(0, 0): 200})


def test_a_marker_record_past_a_moved_log_start_still_stands_in_for_its_offset(broker, topic, tmp_path, caplog):
    """The marker topic's first records deleted (its log start moved): a lane's latest record is still found."""
    from confluent_kafka import Consumer, TopicPartition

    mt = f"mk-start-{uuid.uuid4().hex[:8]}"
    create_topic(broker.bootstrap, mt, partitions=1, config={"cleanup.policy": "compact,delete"})
    cfg = _eo(broker.bootstrap, str(tmp_path), topic, ack_timeout_s=30, marker_topic=mt, offsets_retention_s=1.0)
    for b, p in ((0, 1), (0, 0), (1, 0)):
        assert write_partition(cfg, b, p, 0, batches(p, 100, 50), run="r").acked == 100
    lid = lane_id(cfg.name, "r", 0)
    records = read_topic(broker.bootstrap, mt, isolation=RC).records
    (latest,) = [r for r in records if r.key == lid.encode() and decode_record(r.value)[0].batch == 1]
    assert any(r.offset < latest.offset for r in records if r.key is not None)  # records before it, to delete
    admin = _admin(broker.bootstrap)
    (fut,) = admin.delete_records([TopicPartition(mt, 0, latest.offset)]).values()
    assert fut.result(30).low_watermark == latest.offset
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "watermarks"})
    try:
        assert c.get_watermark_offsets(TopicPartition(mt, 0), timeout=10)[0] == latest.offset  # offset 0 is gone
    finally:
        c.close()
    reset_runtimes()  # a new worker; the lane's offset then expires (deleted here, as the broker does)
    for _g, f in admin.delete_consumer_groups([lid], request_timeout=30).items():
        f.result(60)
    time.sleep(max(0.0, decode_record(latest.value)[1] / 1000 + 1.05 - time.time()))  # older than the retention
    with caplog.at_level("WARNING"):
        again = write_partition(cfg, 1, 0, 1, batches(0, 100, 50), run="r")  # the batch re-run after a restart
    assert (again.acked, again.skipped) == (0, 100), again
    assert "marker offset expired" in caplog.text
    _assert_exactly(read_topic(broker.bootstrap, topic, expected=300, isolation=RC), cfg, "r",
                    {(0, 1): 100, (0, 0): 100, (1, 0): 100})


def test_a_marker_topic_deleted_mid_run_stops_its_lanes_naming_it(broker, topic, tmp_path):
    """Deleting the marker topic deletes every lane's marker offset with it: the sink stops, recreating nothing."""
    mt = f"mk-gone-{uuid.uuid4().hex[:8]}"
    cfg = _eo(broker.bootstrap, str(tmp_path), topic, ack_timeout_s=20, marker_topic=mt)
    for p in (0, 1):
        assert write_partition(cfg, 0, p, 0, batches(p, 100, 50), run="r").acked == 100  # creates it, compacted
    assert _policy(broker.bootstrap, mt) == "compact"
    checked = _topic_id(broker.bootstrap, mt)
    _delete(broker.bootstrap, mt)
    for p in (0, 1):  # measured: the lanes' marker offsets went with the topic (the records did, with its log)
        _wait_offset_gone(broker.bootstrap, lane_id(cfg.name, "r", p), mt)
    # The worker that committed lane 0 finds its marker gone back: it checks the topic and stops.
    with pytest.raises(errors.RecoverableSinkError) as e:
        write_partition(cfg, 1, 0, 0, batches(0, 100, 50), run="r")
    assert isinstance(e.value, errors.MarkerError), repr(e.value)
    assert e.value.marker_topic == mt and mt in str(e.value) and "deleted" in str(e.value), str(e.value)
    # A worker that never saw it, given the topic the driver checked: it does not create it again either.
    reset_runtimes()
    with pytest.raises(errors.MarkerError, match=mt):
        write_partition(cfg, 1, 1, 0, batches(1, 100, 50), run="r", marker_topic_id=checked)
    assert not _exists(broker.bootstrap, mt)  # nothing of the sink created it again
    _assert_exactly(read_topic(broker.bootstrap, topic, expected=200, isolation=RC), cfg, "r",
                    {(0, 0): 100, (0, 1): 100})
    s = get_runtime(cfg).wal.stats()
    assert (s.chunks, s.attempts) == (0, 0), s.as_dict()  # the failed tasks kept nothing


@pytest.mark.parametrize("bad", ["checksum", "format", "garbage"])
def test_an_unreadable_latest_marker_record_stops_its_lane_and_no_older_one_stands_in(broker, topic, tmp_path, bad):
    """Marker records are read as strictly as the offset's metadata. The lane committed batch 0 (its record A), then
    batch 1, whose record X reads damaged (``checksum``), of a format this version does not know (``format``: a
    newer version's) or as no marker at all (``garbage``); the lane's offset has expired. Taking the newest record
    that decodes, A, as the marker said "batch 0", and the re-run of batch 1 was published again. Now the lane
    stops with :class:`MarkerError` naming it and X's offset: the task fails, having published nothing."""
    import struct
    import zlib

    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient

    from spark_recoverable_sink.delivery.exactly_once.markers import encode_record

    mt = f"mk-bad-{uuid.uuid4().hex[:8]}"
    cfg = _eo(broker.bootstrap, str(tmp_path), topic, ack_timeout_s=30, marker_topic=mt, offsets_retention_s=1.0)
    assert write_partition(cfg, 0, 0, 0, batches(0, 100, 50), run="r").acked == 100  # record A: batch 0
    lid = lane_id(cfg.name, "r", 0)
    x = encode_record(1, 100, 2**63 + 1, "r", int(time.time() * 1000))  # batch 1's record, as it should read
    if bad == "checksum":
        x = x[:12] + bytes([x[12] ^ 0x01]) + x[13:]
    elif bad == "format":
        body = x[:4] + struct.pack(">H", 9) + x[6:-4]
        x = body + struct.pack(">I", zlib.crc32(body))
    else:
        x = b"not a marker record"
    p = Producer({"bootstrap.servers": broker.bootstrap})
    p.produce(mt, x, lid.encode())
    assert p.flush(30) == 0
    (x_offset,) = [r.offset for r in read_topic(broker.bootstrap, mt, isolation=RC).records if r.value == x]
    reset_runtimes()  # a new worker; the lane's offset expires (deleted here, as the broker does)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    for _g, f in admin.delete_consumer_groups([lid], request_timeout=30).items():
        f.result(60)
    time.sleep(1.05)  # A (and X) older than offsets_retention_s: a record then stands in for the offset
    with pytest.raises(errors.RecoverableSinkError) as e:
        write_partition(cfg, 1, 0, 0, batches(0, 100, 50), run="r")
    assert isinstance(e.value, errors.MarkerError), repr(e.value)
    assert e.value.lane == lid and lid in str(e.value) and f"offset {x_offset}" in str(e.value), str(e.value)
    assert e.value.marker_topic == mt
    _assert_exactly(read_topic(broker.bootstrap, topic, expected=100, isolation=RC), cfg, "r", {(0, 0): 100})
    s = get_runtime(cfg).wal.stats()
    assert (s.chunks, s.attempts) == (0, 0), s.as_dict()  # the failed task kept nothing: Spark runs it again
