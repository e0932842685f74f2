"""Tier 2: the write path against the real broker, without Spark.

Crashes are real process deaths (``os._exit`` in a child process, no cleanup).
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import threading
import time
import uuid

import pyarrow as pa
import pytest

from spark_recoverable_sink.config import SinkConfig
from spark_recoverable_sink.errors import WalFullError
from spark_recoverable_sink.task.runtime import get_runtime, reset_runtimes
from spark_recoverable_sink.task.writer import write_partition

from ..kafka_helpers import create_topic, header_dict, read_topic
from ..record_ids import ids_of
from .rows import batches

pytestmark = pytest.mark.broker

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _config(bootstrap: str, wal_dir: str, topic: str, **kw) -> SinkConfig:
    kafka = kw.pop("kafka_conf", {})
    return SinkConfig.build(kw.pop("name", "t2"), {"bootstrap.servers": bootstrap, **kafka}, wal_dir, topic=topic, **kw)


def _run_child(cfg: SinkConfig, batch: int, partition: int, rows: int, die_at: str, size: int = 50,
               fault_dir: str | None = None) -> subprocess.CompletedProcess:
    opts = {"name": cfg.name, "kafka_conf": dict(cfg.kafka_conf_items), "wal_dir": cfg.wal_dir, "topic": cfg.topic,
            "ack_timeout_s": cfg.ack_timeout_s}
    env = dict(os.environ, PYTHONPATH=ROOT)
    if fault_dir:
        from tests.hooks import env_for

        env.update(env_for(fault_dir))
    return subprocess.run([sys.executable, "-m", "tests.programs.writer_proc", json.dumps(opts), str(batch),
                           str(partition), str(rows), str(size), die_at], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=120)


def _wait_wal_empty(cfg: SinkConfig, timeout_s: float = 30.0) -> None:
    rt = get_runtime(cfg)
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        s = rt.wal.stats()
        if s.chunks == 0 and s.attempts == 0:
            return
        time.sleep(0.1)
    raise AssertionError(f"WAL not pruned: {rt.wal.stats().as_dict()}")


def test_rows_arrive_with_ids_and_wal_is_pruned(broker, topic, tmp_path):
    cfg = _config(broker.bootstrap, str(tmp_path), topic, ack_timeout_s=30)
    report = write_partition(cfg, 7, 2, 0, batches(2, 5000, 40))
    assert (report.rows, report.acked, report.pending, report.dead_lettered) == (5000, 5000, 0, 0)
    got = read_topic(broker.bootstrap, topic, expected=5000)
    want = ids_of("t2", "", 7, 2, batches(2, 5000, 40), topic)
    assert len(set(want)) == 5000
    assert got.distinct_ids() == set(want)
    assert got.duplicates() == 0
    by_id = got.by_id()
    assert by_id[want[123]].key == b"2-123"
    _wait_wal_empty(cfg)


def test_async_mode_returns_before_acks_and_delivers_later(broker, topic, tmp_path):
    cfg = _config(broker.bootstrap, str(tmp_path), topic, ack_timeout_s=0, name="async")
    report = write_partition(cfg, 1, 0, 0, batches(0, 20000, 40))
    assert report.rows == 20000 and report.acked + report.pending == 20000
    got = read_topic(broker.bootstrap, topic, expected=20000)
    assert len(got.distinct_ids()) == 20000
    _wait_wal_empty(cfg)


def test_async_poller_delivers_committed_chunks_while_a_long_task_still_writes(broker, topic, tmp_path):
    """An async task writing for longer than OVERLAP_AFTER_S gives the poll lock back: chunks get acked mid-task."""
    from spark_recoverable_sink.task.at_least_once import OVERLAP_AFTER_S

    cfg = _config(broker.bootstrap, str(tmp_path), topic, ack_timeout_s=0, name="overlap")
    seen: dict[str, int] = {}

    def gated():
        it = batches(0, 4000, 40)
        yield next(it)
        time.sleep(OVERLAP_AFTER_S + 0.1)  # the task has now been writing longer than the bound
        yield next(it)  # after this chunk's append, the task lends the lock to the poller
        pub = get_runtime(cfg).publisher
        end = time.monotonic() + 60
        while pub.in_flight() and time.monotonic() < end:  # the task waits in this generator meanwhile
            time.sleep(0.01)
        seen["in_flight"] = pub.in_flight()
        yield from it

    report = write_partition(cfg, 1, 0, 0, gated())
    assert seen == {"in_flight": 0}  # both chunks acked while the task was still in its loop
    assert report.rows == 4000
    got = read_topic(broker.bootstrap, topic, expected=4000)
    assert len(got.distinct_ids()) == 4000 and got.duplicates() == 0
    _wait_wal_empty(cfg)


def test_worker_killed_after_commit_before_acks_is_replayed(own_broker, tmp_path):
    """The child commits its attempt while the broker is frozen, then dies: only the WAL has the records."""
    topic = "replay"
    create_topic(own_broker.bootstrap, topic, 3)
    cfg = _config(own_broker.bootstrap, str(tmp_path), topic, ack_timeout_s=0, name="orphan")
    own_broker.pause()
    try:
        child = _run_child(cfg, 5, 1, 12000, "after_commit")
    finally:
        own_broker.resume()
    assert child.returncode == 0, child.stderr
    assert json.loads(child.stdout)["acked"] == 0
    # Nothing reached the broker: the producer's buffer died with the process.
    assert read_topic(own_broker.bootstrap, topic, idle_s=2).records == []
    # A new process-level runtime takes the dead worker's slot and replays it.
    report = write_partition(cfg, 6, 0, 0, iter([]))
    assert report.replayed == 12000
    got = read_topic(own_broker.bootstrap, topic, expected=12000)
    want = ids_of("orphan", "", 5, 1, batches(1, 12000, 50), topic)
    assert len(set(want)) == 12000
    assert got.distinct_ids() == set(want)
    _wait_wal_empty(cfg)


def test_orphan_adopted_while_own_slot_is_busy(broker, topic, tmp_path):
    """A live runtime (own slot 0) adopts a second slot whose owner died."""
    cfg = _config(broker.bootstrap, str(tmp_path), topic, ack_timeout_s=0, name="adopt")
    write_partition(cfg, 1, 0, 0, batches(0, 10, 10))  # this process now owns slot 0
    # A child takes slot 1, writes with the broker unreachable (bad port), commits, dies.
    dead_cfg = _config("127.0.0.1:1", str(tmp_path), topic, ack_timeout_s=0, name="adopt")
    child = _run_child(dead_cfg, 2, 4, 3000, "after_commit")
    assert child.returncode == 0, child.stderr
    report = write_partition(cfg, 3, 0, 0, iter([]))
    assert report.replayed == 3000
    got = read_topic(broker.bootstrap, topic, expected=3010)
    want = ids_of("adopt", "", 2, 4, batches(4, 3000, 50), topic)
    assert len(set(want)) == 3000
    assert set(want) <= got.distinct_ids()
    rt = get_runtime(cfg)
    end = time.monotonic() + 20
    while rt.adopter.adopted and time.monotonic() < end:  # released once drained
        time.sleep(0.1)
    assert not rt.adopter.adopted


def test_uncommitted_attempt_of_a_dead_worker_is_dropped(own_broker, tmp_path):
    topic = "dropped"
    create_topic(own_broker.bootstrap, topic, 1)
    cfg = _config(own_broker.bootstrap, str(tmp_path), topic, ack_timeout_s=0, name="midtask")
    own_broker.pause()
    try:
        child = _run_child(cfg, 9, 0, 10000, "mid_task:3000", fault_dir=str(tmp_path / "faults"))
    finally:
        own_broker.resume()
    assert child.returncode == 137, child.stderr
    report = write_partition(cfg, 10, 0, 0, iter([]))
    assert report.replayed == 0  # Spark re-runs an attempt that never committed
    _wait_wal_empty(cfg)


def test_broker_stall_longer_than_message_timeout_is_retried_from_wal(own_broker, tmp_path):
    topic = "stall"
    create_topic(own_broker.bootstrap, topic, 2)
    cfg = _config(own_broker.bootstrap, str(tmp_path), topic, ack_timeout_s=60, name="stall",
                  retry_backoff_s=0.2, retry_backoff_max_s=1.0,
                  kafka_conf={"message.timeout.ms": 2000, "request.timeout.ms": 1000})
    write_partition(cfg, 0, 0, 0, batches(0, 10, 10))  # connect first
    publisher = get_runtime(cfg).publisher
    own_broker.pause()

    def resume_once_retried() -> None:  # on an event the code reports, not after a guessed delay
        end = time.monotonic() + 50
        while publisher.retried_records == 0 and time.monotonic() < end:
            time.sleep(0.05)
        own_broker.resume()

    resumer = threading.Thread(target=resume_once_retried, daemon=True)
    resumer.start()
    try:
        report = write_partition(cfg, 1, 0, 0, batches(0, 4000, 40))
    finally:
        resumer.join(60)
        own_broker.resume()
    assert report.retried > 0
    assert report.acked == 4000 and report.pending == 0
    got = read_topic(own_broker.bootstrap, topic, expected=4010)
    want = ids_of("stall", "", 1, 0, batches(0, 4000, 40), topic)
    assert len(set(want)) == 4000
    assert set(want) <= got.distinct_ids()


def test_poison_record_dead_lettered_to_topic_with_reason(broker, tmp_path):
    topic, dlq = f"p-{uuid.uuid4().hex[:6]}", f"dlq-{uuid.uuid4().hex[:6]}"
    create_topic(broker.bootstrap, topic, 1)
    create_topic(broker.bootstrap, dlq, 1)
    cfg = _config(broker.bootstrap, str(tmp_path), topic, ack_timeout_s=30, name="poison",
                  dead_letter_topic=dlq, kafka_conf={"message.max.bytes": 20000})
    rows = [b"ok-%d" % i for i in range(100)]
    rows[42] = b"x" * 50000
    batch = pa.RecordBatch.from_pydict({"value": rows})
    report = write_partition(cfg, 3, 0, 0, iter([batch]))
    assert (report.acked, report.dead_lettered, report.pending) == (99, 1, 0)
    ids = ids_of("poison", "", 3, 0, [batch], topic)
    assert len(set(ids)) == 100
    got = read_topic(broker.bootstrap, topic, expected=99)
    assert got.distinct_ids() == {ids[i] for i in range(100) if i != 42}
    dead = read_topic(broker.bootstrap, dlq, expected=1)
    assert len(dead.records) == 1
    h = header_dict(dead.records[0])
    assert h["rks-id"] == bytes.fromhex(ids[42])
    assert b"size" in h["rks-error"].lower() and h["rks-topic"] == topic.encode()
    # the payload is what the topic refuses: the DLQ gets id and reason, the WAL keeps the bytes
    assert dead.records[0].value is None and h["rks-payload-omitted"] == b"50000"
    rt = get_runtime(cfg)
    end = time.monotonic() + 10
    while time.monotonic() < end:
        stored = rt.wal.dead_letters()
        if stored and stored[0][1].forwarded:
            break
        time.sleep(0.1)
    assert [d.record_id for _k, d in stored] == [ids[42]] and stored[0][1].forwarded
    assert stored[0][1].value == b"x" * 50000


def test_poison_without_dead_letter_topic_is_offered_until_the_driver_confirms_it(broker, topic, tmp_path):
    cfg = _config(broker.bootstrap, str(tmp_path), topic, ack_timeout_s=30, name="poison2",
                  kafka_conf={"message.max.bytes": 20000})
    rows = [b"ok"] * 10 + [b"y" * 30000]
    batch = pa.RecordBatch.from_pydict({"value": rows})
    report = write_partition(cfg, 1, 0, 0, iter([batch]), run="r1")
    assert report.dead_lettered == 1
    poison_id = ids_of("poison2", "r1", 1, 0, [batch], topic)[10]
    assert [rid for rid, _err, _tok in report.dead_letters] == [poison_id]
    assert "size" in report.dead_letters[0][1].lower()
    # That report may be lost with its job (another task failed it): the next
    # task of this worker offers the dead letter again, still unreported in the WAL.
    again = write_partition(cfg, 2, 0, 0, iter([]), run="r1")
    assert again.dead_letters == report.dead_letters
    stored = [(d.record_id, d.reported) for _k, d in get_runtime(cfg).wal.dead_letters()]
    assert stored == [(poison_id, False)]
    # A worker that dies offers it again from the WAL (here: the runtime is closed and reopened).
    reset_runtimes()
    reopened = write_partition(cfg, 3, 0, 0, iter([]), run="r1")
    assert reopened.dead_letters == report.dead_letters
    # The driver holds it once a job succeeded: the next job confirms its token.
    token = report.dead_letters[0][2]
    confirmed = write_partition(cfg, 4, 0, 0, iter([]), run="r1", confirmed=(token,))
    assert confirmed.dead_letters == ()
    assert [(d.record_id, d.reported) for _k, d in get_runtime(cfg).wal.dead_letters()] == [(poison_id, True)]
    reset_runtimes()
    assert write_partition(cfg, 5, 0, 0, iter([]), run="r1").dead_letters == ()


def test_wal_full_blocks_then_raises_and_keeps_what_it_accepted(own_broker, tmp_path):
    topic = "full"
    create_topic(own_broker.bootstrap, topic, 1)
    cfg = _config(own_broker.bootstrap, str(tmp_path), topic, ack_timeout_s=0, name="full",
                  max_wal_bytes=1024 * 1024, max_block_s=1.0)
    write_partition(cfg, 0, 0, 0, batches(0, 10, 10))
    own_broker.pause()
    accepted = 0
    t0 = time.monotonic()
    try:
        with pytest.raises(WalFullError) as ei:
            def counted():
                nonlocal accepted
                for b in batches(0, 20000, 1000, chunk=200):
                    yield b
                    accepted += b.num_rows
            write_partition(cfg, 1, 0, 0, counted())
        assert time.monotonic() - t0 >= 1.0
        assert "max_wal_bytes" in str(ei.value) and "Nothing was dropped" in str(ei.value)
    finally:
        own_broker.resume()
    accepted -= 200  # the last batch yielded was refused
    assert accepted > 0
    got = read_topic(own_broker.bootstrap, topic, expected=accepted + 10)
    want = ids_of("full", "", 1, 0, batches(0, 20000, 1000, chunk=200), topic)[:accepted]
    assert len(set(want)) == accepted
    assert set(want) <= got.distinct_ids()


def test_secrets_never_logged(broker, topic, tmp_path, caplog):
    secret = "pa55-" + uuid.uuid4().hex
    cfg = _config(broker.bootstrap, str(tmp_path), topic, ack_timeout_s=10, name="secret",
                  kafka_conf={"sasl.password": secret, "sasl.username": "u"})
    with caplog.at_level(logging.DEBUG):
        report = write_partition(cfg, 1, 0, 0, batches(0, 100, 10))
    assert report.acked == 100
    assert secret not in caplog.text
    assert secret not in json.dumps(report.to_row())
    assert secret not in repr(cfg)
