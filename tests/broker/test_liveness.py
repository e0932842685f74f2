"""Tier 2: nothing waits forever on a client that does not answer, and nothing old keeps running."""

from __future__ import annotations

import threading
import time
import uuid

import confluent_kafka
import pyarrow as pa
import pytest
from confluent_kafka import KafkaError

from spark_recoverable_sink.deadline import Deadline
from spark_recoverable_sink.delivery.attempts import AttemptTracker
from spark_recoverable_sink.delivery.chunks import ChunkTracker, State
from spark_recoverable_sink.delivery.publisher import Publisher
from spark_recoverable_sink.task import runtime as runtime_mod
from spark_recoverable_sink.task.runtime import WorkerRuntime, get_runtime
from spark_recoverable_sink.task.writer import write_partition
from spark_recoverable_sink.wal.format import AttemptKey, ChunkKey
from spark_recoverable_sink.wal.records import DeadLetter
from spark_recoverable_sink.wal.slots import SlotLock

from ..kafka_helpers import create_topic, read_topic
from ..record_ids import ids_of
from .fake_clients import BlackHoleFirst
from .rows import batches
from .test_publisher import _config, _wait_wal_empty

pytestmark = pytest.mark.broker


def _tick_until(rt, done, timeout_s: float = 30.0) -> None:
    end = Deadline(timeout_s)
    with rt.publisher.task():
        while not done():
            assert not end.expired(), rt.publisher.chunk_states()
            rt.publisher.tick(0.05, backlog_chunks=None)


def test_round_without_reports_is_abandoned_and_retried_on_a_fresh_producer(broker, topic, tmp_path, monkeypatch):
    BlackHoleFirst.instances = []
    monkeypatch.setattr(confluent_kafka, "Producer", BlackHoleFirst)
    cfg = _config(broker.bootstrap, str(tmp_path), topic, ack_timeout_s=0.2, name="wd", delivery_engine="python")
    report = write_partition(cfg, 1, 0, 0, batches(0, 50, 10))
    assert report.pending == 50  # the wedged client took them and never answered
    rt = get_runtime(cfg)
    pub = rt.publisher
    # bound: message.timeout.ms (300 s by default) * 1.2 + 10 s; jump past it instead of waiting
    assert pub.round_timeout_s == pytest.approx(300 * 1.2 + 10)
    pub._clock = lambda: time.monotonic() + pub.round_timeout_s + 1
    _tick_until(rt, lambda: pub.in_flight() == 0)
    assert BlackHoleFirst.instances[0].purged and len(BlackHoleFirst.instances) >= 2
    got = read_topic(broker.bootstrap, topic, expected=50)
    want = ids_of("wd", "", 1, 0, batches(0, 50, 10), topic)
    assert len(set(want)) == 50
    assert got.distinct_ids() == set(want)
    _wait_wal_empty(cfg)


class _AlwaysFull:
    def __init__(self, conf):
        pass

    def produce(self, *a, **k):
        raise BufferError("queue full")

    def poll(self, timeout=0):
        return 0

    def __len__(self):
        return 0


def test_blocking_produce_is_bounded_and_the_record_retried(tmp_path):
    cfg = _config("127.0.0.1:1", str(tmp_path), "t", max_block_s=0)
    pub = Publisher(cfg, producer_factory=_AlwaysFull)
    assert pub.block_s == 1.0  # max(1 s, min(max_block_s, message.timeout.ms))
    at = AttemptTracker(None, AttemptKey(1, 0, 1))  # type: ignore[arg-type]
    t = ChunkTracker(None, ChunkKey(1, 0, 0, 1), 2, 10, at)  # type: ignore[arg-type]
    batch = pa.RecordBatch.from_pydict({"value": [b"a", b"b"]})
    th = threading.Thread(target=pub.produce_chunk, args=(t, batch), daemon=True)
    th.start()
    th.join(10)
    assert not th.is_alive(), "produce blocked past its bound"
    assert [(i, e.code()) for i, e in t.round.sync_failed] == [(0, KafkaError._QUEUE_FULL), (1, KafkaError._QUEUE_FULL)]
    pub.tick(0)
    assert t.state is State.RETRY_WAIT and [i for i, _e in t.failed] == [0, 1]  # retried from the WAL


def test_replaced_producer_is_purged_and_its_dead_letters_requeued(broker, topic, tmp_path, monkeypatch):
    BlackHoleFirst.instances = []
    monkeypatch.setattr(confluent_kafka, "Producer", BlackHoleFirst)
    dlt = f"dlt-{uuid.uuid4().hex[:8]}"
    create_topic(broker.bootstrap, dlt, partitions=1)
    cfg = _config(broker.bootstrap, str(tmp_path), topic, name="zomb", dead_letter_topic=dlt,
                  delivery_engine="python")
    rt = get_runtime(cfg)
    pub = rt.publisher
    d = DeadLetter("12" + "00" * 28, KafkaError.MSG_SIZE_TOO_LARGE, "too large", topic, None, b"k", b"v", (), None)
    with pub.task():
        pub.dead_letters.stored(rt.wal, b"\0" * 24, d)
        pub.tick(0)  # forwarded on the wedged producer: no report will ever come
        assert pub.dead_letters.busy
        pub._slot.request_replace("test: producer fenced")
        pub.tick(0)
    old = BlackHoleFirst.instances[0]
    assert old.purged and old.flushed == [1.0]  # purged, bounded flush, dropped
    _tick_until(rt, lambda: not pub.dead_letters.busy)
    got = read_topic(broker.bootstrap, dlt, expected=1)
    assert got.distinct_ids() == {d.record_id}


def test_new_config_of_a_sink_evicts_the_old_runtime_and_its_records_are_adopted(broker, topic, tmp_path,
                                                                               monkeypatch):
    BlackHoleFirst.instances = []
    monkeypatch.setattr(confluent_kafka, "Producer", BlackHoleFirst)
    old_cfg = _config(broker.bootstrap, str(tmp_path), topic, name="rot", ack_timeout_s=0.2,
                      kafka_conf={"client.id": "before-rotation"}, delivery_engine="python")
    report = write_partition(old_cfg, 1, 0, 0, batches(0, 30, 10))
    assert report.pending == 30
    old = get_runtime(old_cfg)
    old_thread, old_index = old.publisher.poller.thread, old.lock.index
    new_cfg = _config(broker.bootstrap, str(tmp_path), topic, name="rot", ack_timeout_s=0.2,
                      kafka_conf={"client.id": "after-rotation"}, delivery_engine="python")
    new = get_runtime(new_cfg)
    assert old_cfg not in runtime_mod._RUNTIMES and not old_thread.is_alive()
    assert BlackHoleFirst.instances[0].purged  # the old producer stopped sending
    if new.lock.index != old_index:  # the old slot was released: free, or adopted by now
        lock = SlotLock(new.sdir, old_index)
        assert old_index in new.adopted or lock.try_acquire()
        if old_index not in new.adopted:
            lock.release()
    new.adopt_orphans()
    got = read_topic(broker.bootstrap, topic, expected=30)
    want = ids_of("rot", "", 1, 0, batches(0, 30, 10), topic)
    assert len(set(want)) == 30
    assert got.distinct_ids() == set(want)


def test_failed_construction_leaks_no_poller(broker, topic, tmp_path, monkeypatch):
    def boom(self):
        raise OSError("no slot for you")

    monkeypatch.setattr(WorkerRuntime, "_own_slot", boom)
    cfg = _config(broker.bootstrap, str(tmp_path), topic, name="leak")
    with pytest.raises(OSError):
        get_runtime(cfg)
    assert not [th for th in threading.enumerate() if th.name == "rks-poller-leak"]
