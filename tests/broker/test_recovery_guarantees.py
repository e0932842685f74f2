"""Tier 2: what recovery does with a slot depends on how each attempt was accepted, never on who recovers it.

An attempt records the guarantee it was accepted under: at-least-once
records are delivered (never skipped by an exactly-once marker), exactly-once
units are published only in a transaction (even by an at-least-once process),
dead letters are offered whatever the recovering process is, and a damaged
chunk is set aside alone while the rest of its slot is delivered.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid

import lmdb
import pytest

from spark_recoverable_sink.config import SinkConfig
from spark_recoverable_sink.deadline import Deadline
from spark_recoverable_sink.delivery.exactly_once.marker_reads import lane_markers
from spark_recoverable_sink.ops.inspect import chunks_set_aside
from spark_recoverable_sink.task.runtime import get_runtime
from spark_recoverable_sink.task.writer import write_partition

from ..kafka_helpers import create_topic, read_topic
from ..record_ids import ids_of
from .rows import batches

pytestmark = pytest.mark.broker

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RC = "read_committed"


@pytest.fixture
def own_broker(tmp_path):
    """The tests' own broker, whose session outlives their freezes (never a restart here).

    A test here keeps the broker SIGSTOPped while a child process writes (its
    Python start included): under a loaded make test that outlasted the test
    broker's 3 s session (devtools/kafka_broker.py, chosen for restarts), so
    the resumed broker fenced and unfenced itself, and its coordinators were
    still loading when the test's bound ran out.
    """
    from devtools.kafka_broker import KafkaBroker

    b = KafkaBroker(str(tmp_path / "kafka"), properties={"broker.session.timeout.ms": "60000"}).start()
    yield b
    b.stop()


def _cfg(bootstrap: str, wal_dir: str, topic: str, name: str, **kw) -> SinkConfig:
    kafka = {"bootstrap.servers": bootstrap, **kw.pop("kafka_conf", {})}
    return SinkConfig.build(name, kafka, wal_dir, topic=topic, **kw)


def _child(cfg: SinkConfig, batch: int, partition: int, rows: int, run: str, size: int = 50) -> dict:
    """``write_partition`` in a worker process that then dies without cleanup; returns its report row."""
    opts = {"name": cfg.name, "kafka_conf": dict(cfg.kafka_conf_items), "wal_dir": cfg.wal_dir, "topic": cfg.topic,
            "ack_timeout_s": cfg.ack_timeout_s, "guarantee": cfg.guarantee, "run": run}
    done = subprocess.run([sys.executable, "-m", "tests.programs.writer_proc", json.dumps(opts), str(batch),
                           str(partition), str(rows), str(size), "after_commit"], env=dict(os.environ, PYTHONPATH=ROOT),
                          cwd=ROOT, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def _deliver(cfg: SinkConfig) -> int:
    """A worker of ``cfg`` on this host: adopts, then delivers what it holds; returns what is still pending."""
    rt = get_runtime(cfg)
    with rt.publisher.task():
        rt.adopt_orphans()
        return rt.delivery.deliver(Deadline(90))


def test_records_accepted_at_least_once_are_delivered_after_the_sink_turns_exactly_once(own_broker, tmp_path):
    """8,000 records pending in the WAL; the same sink then runs exactly-once and a later batch of the lane commits first."""
    bs, topic, name = own_broker.bootstrap, "al-then-eo", f"switch-{uuid.uuid4().hex[:6]}"
    create_topic(bs, topic, partitions=2)
    wal = str(tmp_path / "wal")
    own_broker.pause()  # the at-least-once task commits its attempt in the WAL; nothing reaches Kafka
    try:
        row = _child(_cfg(bs, wal, topic, name, ack_timeout_s=1.0), 0, 0, 8000, "r")
    finally:
        own_broker.resume()
    assert (row["rows"], row["acked"]) == (8000, 0)
    # another executor, already exactly-once, commits batch 1 of the same lane (run r, partition 0) first
    _child(_cfg(bs, str(tmp_path / "other"), topic, name, guarantee="exactly_once", ack_timeout_s=30), 1, 0, 100, "r")
    eo = _cfg(bs, wal, topic, name, guarantee="exactly_once", ack_timeout_s=30)
    assert _deliver(eo) == 0
    got = read_topic(bs, topic, expected=8100, isolation=RC)
    ids = got.distinct_ids()
    assert set(ids_of(name, "r", 0, 0, batches(0, 8000, 50), topic)) <= ids, "at-least-once records were skipped"
    assert set(ids_of(name, "r", 1, 0, batches(0, 100, 50), topic)) <= ids and got.duplicates() == 0


def test_an_exactly_once_unit_recovered_by_an_at_least_once_process_is_published_in_a_transaction(own_broker, tmp_path):
    bs, topic, name = own_broker.bootstrap, "eo-then-al", f"back-{uuid.uuid4().hex[:6]}"
    create_topic(bs, topic, partitions=1)
    wal = str(tmp_path / "wal")
    eo = _cfg(bs, wal, topic, name, guarantee="exactly_once", ack_timeout_s=2.0)
    own_broker.pause()
    try:
        row = _child(eo, 4, 0, 500, "r")
    finally:
        own_broker.resume()
    assert (row["rows"], row["acked"], row["pending"]) == (500, 0, 500)
    al = _cfg(bs, wal, topic, name, ack_timeout_s=5.0)  # the sink runs at-least-once now (or `rks replay` does)
    assert _deliver(al) == 0
    got = read_topic(bs, topic, expected=500, isolation=RC)
    assert sorted(r.rid for r in got.records) == sorted(ids_of(name, "r", 4, 0, batches(0, 500, 50), topic))
    assert lane_markers(eo, "r", [0])[0].batch == 4  # committed in its lane's transaction, with its marker


def test_dead_letters_stored_at_least_once_are_offered_by_an_exactly_once_recovery(broker, topic, tmp_path):
    name, wal = f"dl-{uuid.uuid4().hex[:6]}", str(tmp_path / "wal")
    too_small = {"message.max.bytes": 1000}
    row = _child(_cfg(broker.bootstrap, wal, topic, name, ack_timeout_s=10, kafka_conf=too_small), 1, 0, 5, "r",
                 size=3000)  # every record too large: dead letters in the WAL, never confirmed by a driver
    assert row["dead_lettered"] == 5
    eo = _cfg(broker.bootstrap, wal, topic, name, guarantee="exactly_once", ack_timeout_s=10, kafka_conf=too_small)
    rep = write_partition(eo, 2, 1, 0, batches(1, 10, 50), run="r")
    offered = {rid for rid, _err, _token in rep.dead_letters}
    assert offered == set(ids_of(name, "r", 1, 0, batches(0, 5, 3000), topic)), rep.dead_letters


def test_a_damaged_chunk_is_set_aside_alone_and_the_rest_of_its_slot_delivered(own_broker, tmp_path):
    bs, topic, name = own_broker.bootstrap, "damaged-chunk", f"dmg-{uuid.uuid4().hex[:6]}"
    create_topic(bs, topic, partitions=1)
    wal = str(tmp_path / "wal")
    cfg = _cfg(bs, wal, topic, name, ack_timeout_s=1.0)
    own_broker.pause()
    try:
        _child(cfg, 3, 0, 3000, "r")  # three chunks of 1,000 records, committed, unacked
    finally:
        own_broker.resume()
    slot = os.path.join(wal, name, "slot-00000")
    env = lmdb.open(slot, max_dbs=4)
    db = env.open_db(b"chunks")
    with env.begin(write=True) as txn:
        keys = [k for k, _v in txn.cursor(db=db)]
        assert len(keys) == 3
        damaged = bytearray(txn.get(keys[1], db=db))
        damaged[-40] ^= 0xFF
        txn.put(keys[1], bytes(damaged), db=db)
    env.close()
    rep = write_partition(cfg, 4, 0, 0, iter([]), run="r")  # a worker of the sink takes the slot over
    assert rep.replayed == 2000
    assert _deliver(cfg) == 0
    got = read_topic(bs, topic, expected=2000, isolation=RC)
    want = ids_of(name, "r", 3, 0, batches(0, 3000, 50), topic)
    assert sorted(got.distinct_ids()) == sorted(want[:1000] + want[2000:]) and got.duplicates() == 0
    [aside] = chunks_set_aside(wal, name)
    with open(aside["file"], "rb") as f:
        assert f.read() == bytes(damaged)  # its bytes kept, as they were
    assert "checksum" in aside["why"]
    assert any(aside["file"] in p for p in get_runtime(cfg).problems())
