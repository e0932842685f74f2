"""Exactly-once units against the real broker: one transaction per (run, batch, partition), with its marker.

Every check reads the whole topic with ``isolation.level=read_committed``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid

import pytest

from spark_recoverable_sink import ExactlyOnceMismatchError
from spark_recoverable_sink.config import SinkConfig
from spark_recoverable_sink.deadline import Deadline
from spark_recoverable_sink.delivery.exactly_once.lane import abort_lingering, sink_lanes
from spark_recoverable_sink.delivery.exactly_once.marker_reads import lane_markers
from spark_recoverable_sink.delivery.exactly_once.markers import (
    MAX_BATCH,
    decode_offset,
    decode_record,
    encode_offset,
    encode_record,
)
from spark_recoverable_sink.delivery.exactly_once.names import LANE_ID_MAX, lane_id, parse_lane_id
from spark_recoverable_sink.task.runtime import get_runtime, reset_runtimes
from spark_recoverable_sink.task.writer import write_partition

from ..kafka_helpers import create_topic, read_topic, wait_for_uncommitted
from ..record_ids import ids_of
from .rows import batches

pytestmark = pytest.mark.broker

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RC = "read_committed"


def _eo(bootstrap: str, wal_dir: str, topic: str, **kw) -> SinkConfig:
    kafka = {"bootstrap.servers": bootstrap, **kw.pop("kafka_conf", {})}
    return SinkConfig.build(kw.pop("name", f"eo-{uuid.uuid4().hex[:6]}"), kafka, wal_dir, topic=topic,
                            guarantee="exactly_once", **kw)


def _child(cfg: SinkConfig, batch: int, partition: int, rows: int, run: str, hook_dir: str | None = None,
           die_at: str = "after_commit") -> subprocess.CompletedProcess:
    opts = {"name": cfg.name, "kafka_conf": dict(cfg.kafka_conf_items), "wal_dir": cfg.wal_dir, "topic": cfg.topic,
            "ack_timeout_s": cfg.ack_timeout_s, "guarantee": cfg.guarantee, "run": run}
    env = dict(os.environ, PYTHONPATH=ROOT)
    if hook_dir:
        from tests.hooks import env_for

        env.update(env_for(hook_dir))
    return subprocess.run([sys.executable, "-m", "tests.programs.writer_proc", json.dumps(opts), str(batch),
                           str(partition), str(rows), "50", die_at], env=env, cwd=ROOT, capture_output=True,
                          text=True, timeout=120)


def _spawn(cfg: SinkConfig, batch: int, partition: int, rows: int, run: str, hook_dir: str,
           report: bool = False) -> subprocess.Popen:
    """One attempt at (batch, partition) in a process of its own (``report``: its stdout, whose last line is it)."""
    opts = {"name": cfg.name, "kafka_conf": dict(cfg.kafka_conf_items), "wal_dir": cfg.wal_dir, "topic": cfg.topic,
            "ack_timeout_s": cfg.ack_timeout_s, "guarantee": cfg.guarantee, "run": run}
    from tests.hooks import env_for

    env = dict(os.environ, PYTHONPATH=ROOT, **env_for(hook_dir))
    return subprocess.Popen([sys.executable, "-m", "tests.programs.writer_proc", json.dumps(opts), str(batch),
                             str(partition), str(rows), "50", "after_commit"], env=env, cwd=ROOT, text=True,
                            stdout=subprocess.PIPE if report else subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _assert_exactly(got, cfg: SinkConfig, run: str, units: dict[tuple[int, int], int]) -> None:
    """The topic holds exactly the ids of ``units``: (batch, partition) -> rows of ``batches(partition, rows, 50)``."""
    want = sorted(i for (b, p), n in units.items() for i in ids_of(cfg.name, run, b, p, batches(p, n, 50), cfg.topic))
    ids = sorted(r.rid for r in got.records)
    assert len(ids) == len(set(ids)), f"{len(ids) - len(set(ids))} duplicates"
    assert ids == want, f"got {len(ids)} records, want {len(want)}"


def test_marker_encoding_round_trips():
    m = decode_offset(encode_offset(123456, 2**64 - 3))
    assert (m.batch, m.digest32) == (123456, (2**64 - 3) & 0xFFFFFFFF) and m.proves(123456, 2**64 - 3)
    assert not m.proves(123456, 2**64 - 4) and not m.proves(123455, 2**64 - 3)
    assert decode_offset(encode_offset(0, 0)).batch == 0 and decode_offset(encode_offset(MAX_BATCH, 1)).batch == MAX_BATCH
    assert decode_offset(-1001) is None and decode_offset(0) is None and decode_offset(None) is None
    with pytest.raises(ValueError):
        encode_offset(MAX_BATCH + 1, 0)
    rec, ms = decode_record(encode_record(7, 500, 2**63 + 9, "run-1", 1700000000123))
    assert (rec.batch, rec.rows, rec.full_digest, ms, rec.source) == (7, 500, 2**63 + 9, 1700000000123, "record")
    assert rec.proves(7, 2**63 + 9) and not rec.proves(7, 9)  # a record checks all 64 bits
    raw = bytearray(encode_record(7, 500, 9, "r", 1))
    raw[10] ^= 1
    for bad in (bytes(raw), b"RKSM"):  # never trusted blindly
        with pytest.raises(ValueError, match="checksum"):
            decode_record(bad)
    assert lane_id("orders", "3ffbea5019c44624", 4) == "rks-eo.orders:3ffbea5019c44624:4"
    # sink and run joined by a separator neither may hold: names that joined alike before are apart now
    assert lane_id("orders", "eu.prod", 0) != lane_id("orders.eu", "prod", 0)
    assert parse_lane_id(lane_id("orders.eu", "prod", 7)) == ("orders.eu", "prod", 7)
    assert parse_lane_id("rks-eo.orders.eu.prod.0") is None  # not a lane id
    longest = lane_id("s" * 100, "r" * 64, 2**31 - 1)
    assert len(longest) == LANE_ID_MAX <= 249  # within every Kafka name limit (transactional.id, group.id)
    with pytest.raises(ValueError):
        lane_id("orders", "eu:prod", 0)


def test_clean_units_are_visible_once_and_their_lanes_marked(broker, topic, tmp_path):
    cfg = _eo(broker.bootstrap, str(tmp_path), topic, ack_timeout_s=30)
    run = "r1"
    for b in (0, 1):
        for p in (0, 1):
            rep = write_partition(cfg, b, p, 0, batches(p, 700, 50, chunk=300), run=run)
            assert (rep.rows, rep.acked, rep.pending) == (700, 700, 0)
    _assert_exactly(read_topic(broker.bootstrap, topic, expected=2800, isolation=RC), cfg, run,
                    {(b, p): 700 for b in (0, 1) for p in (0, 1)})
    markers = lane_markers(cfg, run, [0, 1, 2])
    assert markers[0].batch == markers[1].batch == 1 and markers[2] is None
    s = get_runtime(cfg).wal.stats()
    assert (s.chunks, s.attempts) == (0, 0), s.as_dict()  # pruned once committed


def test_a_rerun_of_a_committed_unit_is_skipped_and_a_different_one_refused(broker, topic, tmp_path, caplog):
    cfg = _eo(broker.bootstrap, str(tmp_path), topic, ack_timeout_s=30)
    assert write_partition(cfg, 5, 0, 0, batches(0, 500, 50), run="r").acked == 500
    backwards = reversed(list(batches(0, 500, 50, chunk=70)))  # the same rows in another order and other batches
    with caplog.at_level("WARNING"):
        again = write_partition(cfg, 5, 0, 1, backwards, run="r")  # skipped: proven by the digest of its ids
    assert (again.acked, again.skipped, again.pending) == (0, 500, 0)
    assert "skipped, not published again" in caplog.text
    with pytest.raises(ExactlyOnceMismatchError) as e:
        write_partition(cfg, 5, 0, 2, batches(0, 499, 50), run="r")  # a re-run with other rows
    assert (e.value.batch, e.value.lane, e.value.rows, e.value.committed_batch, e.value.run) == (5, 0, 499, 5, "r")
    assert "another digest" in str(e.value) and "same records" in str(e.value)
    _assert_exactly(read_topic(broker.bootstrap, topic, expected=500, isolation=RC), cfg, "r", {(5, 0): 500})
    s = get_runtime(cfg).wal.stats()
    assert (s.chunks, s.attempts) == (0, 0), s.as_dict()  # the refused attempt is not kept either


def test_worker_killed_after_the_kafka_commit_is_skipped_by_the_adopter(broker, topic, tmp_path, hooks):
    cfg = _eo(broker.bootstrap, str(tmp_path), topic, ack_timeout_s=30)
    crash = hooks.crash("eo.committed")
    done = _child(cfg, 3, 1, 800, "r", hook_dir=hooks.dir)
    assert crash.fired() is not None, done.stderr[-2000:]
    # The unit is in Kafka and still in the dead worker's WAL: the next task's worker adopts the slot.
    rep = write_partition(cfg, 4, 1, 0, batches(1, 10, 50), run="r")
    assert rep.replayed == 800
    got = read_topic(broker.bootstrap, topic, expected=810, isolation=RC)
    _assert_exactly(got, cfg, "r", {(3, 1): 800, (4, 1): 10})
    assert get_runtime(cfg).units.skipped_rows == 800
    assert get_runtime(cfg).units.pending_rows() == 0


def test_worker_killed_before_anything_is_produced_is_retried_once(broker, topic, tmp_path, hooks):
    """Killed once its first chunk is in the WAL, before its transaction begins (its attempt still open)."""
    cfg = _eo(broker.bootstrap, str(tmp_path), topic, ack_timeout_s=30)
    crash = hooks.crash("eo.before_transaction")
    _child(cfg, 3, 0, 800, "r", hook_dir=hooks.dir)
    assert crash.fired() is not None
    assert read_topic(broker.bootstrap, topic, idle_s=1.0, timeout_s=5, isolation=RC).records == []
    # Spark re-runs the failed task (here on this process, which adopts the dead worker's slot first)
    rep = write_partition(cfg, 3, 0, 1, batches(0, 800, 50), run="r")
    assert rep.acked == 800
    _assert_exactly(read_topic(broker.bootstrap, topic, expected=800, isolation=RC), cfg, "r", {(3, 0): 800})


def test_worker_killed_mid_transaction_leaves_nothing_visible(broker, topic, tmp_path, hooks):
    cfg = _eo(broker.bootstrap, str(tmp_path), topic, ack_timeout_s=30)
    parked = hooks.park("eo.produced_chunk", rows=1000)  # its first chunk is in the open transaction
    child = _spawn(cfg, 3, 2, 3000, "r", hooks.dir)
    try:
        pid = parked.wait()["pid"]
        wait_for_uncommitted(broker.bootstrap, topic, 3, 2)  # the chunk is on the broker, in the open transaction
        os.kill(pid, signal.SIGKILL)
    finally:
        child.wait(60)
    # Spark re-runs the killed task: it adopts the dead worker's slot, its lane's new producer fences the dead
    # one, the broker aborts the open transaction, and the unit commits once: produced by the re-run (the dead
    # worker's attempt was still open, so it is dropped), or recovered from the slot and then skipped by the
    # re-run (the dead worker had committed its attempt in the WAL and was publishing it from there).
    rep = write_partition(cfg, 3, 2, 1, batches(2, 3000, 50), run="r")
    assert (rep.acked + rep.skipped, rep.pending) == (3000, 0), rep
    _assert_exactly(read_topic(broker.bootstrap, topic, expected=3000, isolation=RC), cfg, "r", {(3, 2): 3000})
    # The killed transaction's records are in the log, aborted: only read_uncommitted readers see them.
    assert len(read_topic(broker.bootstrap, topic, expected=3001, idle_s=1.0).records) > 3000


def test_broker_down_keeps_the_unit_pending_then_commits_it_once(own_broker, tmp_path):
    create_topic(own_broker.bootstrap, "eo-out", partitions=2)
    cfg = _eo(own_broker.bootstrap, str(tmp_path), "eo-out", ack_timeout_s=30,
              kafka_conf={"transaction.timeout.ms": 5000, "message.timeout.ms": 4000})
    assert write_partition(cfg, 0, 0, 0, batches(0, 100, 50), run="r").acked == 100
    own_broker.pause()
    try:
        cfg2 = cfg  # same runtime: the lane's producer is initialised, its next transaction stalls
        rep = write_partition(SinkConfig.build(cfg2.name, dict(cfg2.kafka_conf_items), cfg2.wal_dir, topic=cfg2.topic,
                                               guarantee="exactly_once", ack_timeout_s=2.0), 1, 0, 0,
                              batches(0, 300, 50), run="r")
        assert (rep.acked, rep.pending) == (0, 300)
        assert any("not committed after" in p and "batch=1" in p for p in rep.problems), rep.problems
        pending_rt = get_runtime(SinkConfig.build(cfg2.name, dict(cfg2.kafka_conf_items), cfg2.wal_dir,
                                                  topic=cfg2.topic, guarantee="exactly_once", ack_timeout_s=2.0))
        pending_rt.publisher.prune()  # what the poller thread does every second: it must not touch the unit
        assert list(pending_rt.wal.attempts().values())[0].committed, "the pending unit lost its attempt record"
    finally:
        own_broker.resume()
    rt = get_runtime(SinkConfig.build(cfg.name, dict(cfg.kafka_conf_items), cfg.wal_dir, topic=cfg.topic,
                                      guarantee="exactly_once", ack_timeout_s=2.0))
    deadline = Deadline(120)
    while rt.units.retry_pending(Deadline(10)) > 0:
        assert not deadline.expired(), "the unit was never committed after the broker came back"
    got = read_topic(own_broker.bootstrap, "eo-out", expected=400, isolation=RC)
    _assert_exactly(got, cfg, "r", {(0, 0): 100, (1, 0): 300})


def test_abort_lingering_initialises_every_lane_of_the_sink(broker, topic, tmp_path):
    cfg = _eo(broker.bootstrap, str(tmp_path), topic, ack_timeout_s=30)
    for p in (0, 1):
        write_partition(cfg, 0, p, 0, batches(p, 10, 50), run="rr")
    lanes = sink_lanes(cfg)
    assert lanes == [lane_id(cfg.name, "rr", 0), lane_id(cfg.name, "rr", 1)]
    assert abort_lingering(cfg) == lanes
    # the lanes go on: the fenced producers are replaced, the markers read again
    for p in (0, 1):
        assert write_partition(cfg, 1, p, 0, batches(p, 10, 50), run="rr").acked == 10
    _assert_exactly(read_topic(broker.bootstrap, topic, expected=40, isolation=RC), cfg, "rr",
                    {(b, p): 10 for b in (0, 1) for p in (0, 1)})
    with pytest.raises(ValueError):
        abort_lingering(cfg, ["rks-eo.other.rr.0"])


def test_a_run_id_reused_for_new_data_fails_instead_of_reporting_it_acked(broker, topic, tmp_path):
    """write(run_id="job") for batches 0-3, then new data under the same run id: never "already in Kafka"."""
    cfg = _eo(broker.bootstrap, str(tmp_path), topic, ack_timeout_s=30)
    for b in range(4):
        assert write_partition(cfg, b, 0, 0, batches(0, 100 + b, 50), run="job").acked == 100 + b
    for b, n in ((0, 100), (1, 777)):  # batch 0 with its row count unchanged, batch 1 with another
        with pytest.raises(ExactlyOnceMismatchError) as e:
            write_partition(cfg, b, 0, 0, batches(0, n, 60), run="job")  # new values
        assert e.value.run == "job" and e.value.committed_batch == 3 and "was used before" in str(e.value)
        assert "new run id" in str(e.value)
    _assert_exactly(read_topic(broker.bootstrap, topic, expected=406, isolation=RC), cfg, "job",
                    {(b, 0): 100 + b for b in range(4)})


def test_a_marker_outlives_its_expired_offset(broker, topic, tmp_path, caplog):
    from confluent_kafka.admin import AdminClient

    cfg = _eo(broker.bootstrap, str(tmp_path), topic, ack_timeout_s=30, offsets_retention_s=1.0)
    assert write_partition(cfg, 9, 1, 0, batches(1, 300, 50), run="r").acked == 300
    lid = lane_id(cfg.name, "r", 1)
    reset_runtimes()  # the worker goes away; its lane's offset then expires (deleted here, as the broker does)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    for _g, fut in admin.delete_consumer_groups([lid], request_timeout=30).items():
        fut.result(60)
    assert lane_markers(cfg, "r", [1]) == {1: None}
    time.sleep(1.5)  # older than offsets_retention_s: the compacted marker record stands in for the offset
    with caplog.at_level("WARNING"):
        again = write_partition(cfg, 9, 1, 1, batches(1, 300, 50), run="r")  # the batch re-run after a restart
    assert (again.acked, again.skipped) == (0, 300) and "marker offset expired" in caplog.text
    _assert_exactly(read_topic(broker.bootstrap, topic, expected=300, isolation=RC), cfg, "r", {(9, 1): 300})


def test_a_unit_longer_than_its_window_resumes_and_commits(own_broker, tmp_path):
    """Each try may only run a fifth of a second; the unit needs many: it resumes where the last try stopped."""
    create_topic(own_broker.bootstrap, "eo-long", partitions=1)
    cfg = _eo(own_broker.bootstrap, str(tmp_path), "eo-long", ack_timeout_s=2.0)
    own_broker.pause()  # the task commits its unit to the WAL; nothing reaches Kafka
    try:
        done = _child(cfg, 0, 0, 200_000, "r")
        assert done.returncode == 0, done.stderr[-2000:]
    finally:
        own_broker.resume()
    short = SinkConfig.build(cfg.name, dict(cfg.kafka_conf_items), cfg.wal_dir, topic=cfg.topic,
                             guarantee="exactly_once", ack_timeout_s=1.0)
    rt = get_runtime(short)  # adopts the unit
    tries = 0
    with rt.publisher.task():
        while rt.units.retry_pending(Deadline(0.2)) > 0:
            tries += 1
            assert tries < 300, "the unit never committed: each try started it over"
    got = read_topic(own_broker.bootstrap, "eo-long", expected=200_000, isolation=RC)
    _assert_exactly(got, cfg, "r", {(0, 0): 200_000})


def test_a_record_refused_for_good_refuses_its_unit_instead_of_pending_forever(broker, topic, tmp_path):
    import pyarrow as pa

    cfg = _eo(broker.bootstrap, str(tmp_path), topic, ack_timeout_s=20, kafka_conf={"message.max.bytes": 20_000})
    rows = [{"key": b"k%d" % i, "value": b"v" * (50_000 if i == 137 else 20)} for i in range(300)]
    rep = write_partition(cfg, 2, 0, 0, iter([pa.RecordBatch.from_pylist(rows)]), run="r")
    assert (rep.acked, rep.pending, rep.dead_lettered) == (0, 0, 300), rep
    big = ids_of(cfg.name, "r", 2, 0, [pa.RecordBatch.from_pylist(rows)], topic)[137]
    first_rid, first_err, _token = rep.dead_letters[0]
    assert first_rid == big and "too large" in first_err.lower(), rep.dead_letters[0]
    assert all("was refused for good" in e for _r, e, _t in rep.dead_letters[1:])
    assert read_topic(broker.bootstrap, topic, idle_s=1.0, timeout_s=5, isolation=RC).records == []
    stored = get_runtime(cfg).wal.dead_letters()
    assert len(stored) == 300 and get_runtime(cfg).wal.stats().chunks == 0  # every record kept, as a dead letter


def test_a_request_kafka_refuses_for_a_future_timestamp_refuses_the_unit_at_once(broker, tmp_path):
    """INVALID_TIMESTAMP (a topic's ``message.timestamp.after.max.ms``) is Kafka's answer for good.

    Before every code had a fate (delivery/codes.py) the unit was retried
    until the task's deadline and left pending: here it is refused within
    seconds, the record named with Kafka's reason, nothing visible.
    """
    import time

    import pyarrow as pa

    topic = f"eo-ts-{uuid.uuid4().hex[:8]}"
    create_topic(broker.bootstrap, topic, partitions=1, config={"message.timestamp.after.max.ms": "3600000"})
    cfg = _eo(broker.bootstrap, str(tmp_path), topic, ack_timeout_s=60)
    now = int(time.time() * 1000)
    rows = [{"key": b"k%d" % i, "value": b"v%d" % i, "timestamp": now + (2 * 3600 * 1000 if i == 77 else 0)}
            for i in range(300)]
    batch = pa.RecordBatch.from_pylist(rows)
    t0 = time.monotonic()
    rep = write_partition(cfg, 2, 0, 0, iter([batch]), run="r")
    took = time.monotonic() - t0
    assert (rep.acked, rep.pending, rep.dead_lettered) == (0, 0, 300), rep
    assert took < 30, f"took {took:.1f}s: retried instead of refused"
    future = ids_of(cfg.name, "r", 2, 0, [batch], topic)[77]
    named = {rid: err for rid, err, _t in rep.dead_letters}
    assert "INVALID_TIMESTAMP" in named[future] or "timestamp" in named[future].lower(), named[future]
    assert read_topic(broker.bootstrap, topic, idle_s=1.0, timeout_s=5, isolation=RC).records == []


def test_a_lane_that_moved_to_another_worker_is_reinitialised_before_its_inline_transaction(
        broker, topic, tmp_path, monkeypatch, caplog):
    from spark_recoverable_sink.delivery.exactly_once import commit as transactions

    cfg = _eo(broker.bootstrap, str(tmp_path / "a"), topic, ack_timeout_s=30)
    assert write_partition(cfg, 0, 0, 0, batches(0, 100, 50), run="r").acked == 100
    other = _eo(broker.bootstrap, str(tmp_path / "b"), topic, ack_timeout_s=30, name=cfg.name)
    assert _child(other, 1, 0, 100, "r").returncode == 0  # another worker commits the lane's next batch
    from_wal = []
    real = transactions.produce_unit
    monkeypatch.setattr(transactions, "produce_unit", lambda *a: (from_wal.append(1), real(*a))[1])
    with caplog.at_level("INFO"):
        assert write_partition(cfg, 2, 0, 0, batches(0, 100, 50), run="r").acked == 100
    assert from_wal == [], "the fenced producer's inline transaction failed: the unit was produced again from the WAL"
    assert "re-initialised" in caplog.text
    _assert_exactly(read_topic(broker.bootstrap, topic, expected=300, isolation=RC), cfg, "r",
                    {(b, 0): 100 for b in range(3)})
