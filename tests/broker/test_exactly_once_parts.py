"""Exactly-once units too large for one transaction, on the real broker: committed in parts (delivery/exactly_once/parts.py).

A broker aborts a transaction left open longer than ``transaction.timeout.ms``.
A lane's unit that takes longer than that to produce (the first batch after
a long stop: millions of records per lane) was aborted on every try, until
the settle bound stopped the query. Here producing is slowed at the sink's
named point ``eo.produced_chunk`` (a sleep per record produced), so that a
40,000-record unit takes 4 s against a 2 s transaction timeout, on a broker
that looks for timed-out transactions every 500 ms: its first try, whole, is
aborted by the broker, and the next goes in parts of 0.25 s. Every check
reads the topic with ``read_committed``.
"""

from __future__ import annotations

import time

import pytest

from spark_recoverable_sink import ExactlyOnceMismatchError, MarkerError, _points
from spark_recoverable_sink.delivery.exactly_once import subunits
from spark_recoverable_sink.delivery.exactly_once.marker_reads import lane_markers
from spark_recoverable_sink.delivery.admin import client_conf
from spark_recoverable_sink.delivery.exactly_once.markers import encode_offset
from spark_recoverable_sink.delivery.exactly_once.names import lane_id
from spark_recoverable_sink.task.runtime import get_runtime, reset_runtimes
from spark_recoverable_sink.task.writer import write_partition

from ..kafka_helpers import create_topic, read_topic
from ..record_ids import ids_of
from .rows import batches
from .test_exactly_once import RC, _assert_exactly, _eo

pytestmark = pytest.mark.broker

ROWS = 40_000
PER_RECORD_S = 100e-6  # 4 s for the whole unit
SHORT = {"transaction.timeout.ms": 2000, "message.timeout.ms": 2000}


@pytest.fixture
def quick_abort_broker(tmp_path):
    """A broker that aborts a timed-out transaction within 500 ms of its timeout (Kafka's default: 10 s)."""
    from devtools.kafka_broker import KafkaBroker

    b = KafkaBroker(str(tmp_path / "kafka"),
                    properties={"transaction.abort.timed.out.transaction.cleanup.interval.ms": "500"}).start()
    yield b
    b.stop()


@pytest.fixture
def own_hook():
    """Install a hook of this test's in this process (``own_hook(fn)``); the session's own (tests/hooks.py, which
    later tests of this process park with) still sees every point, and is alone again after the test."""
    session = _points._hook

    def install(fn):
        def both(name, coords):
            fn(name, coords)
            if session is not None:
                session(name, coords)
        _points.install(both)

    yield install
    _points.install(session)
    reset_runtimes()


@pytest.fixture
def parts_seen(monkeypatch, own_hook):
    """Producing slowed; a unit of more than 200 KiB of WAL chunks whose try failed goes in parts (this unit: about
    16, 0.25 s each). Its first try is whole (it is far below what the transaction timeout takes at PARTS_RATE)."""
    monkeypatch.setattr(subunits, "SUB_UNIT_BYTES", 200 << 10)
    seen: list[dict] = []

    def hook(name, coords):
        if name == "eo.produced_chunk":  # (a chunk of 1,000 records where a build gives no count)
            time.sleep(coords.get("records", 1000) * PER_RECORD_S)
        elif name == "eo.committing_part":
            seen.append(coords)
    own_hook(hook)
    return seen


def test_a_unit_longer_to_produce_than_the_transaction_timeout_commits_in_parts(quick_abort_broker, tmp_path,
                                                                               parts_seen):
    create_topic(quick_abort_broker.bootstrap, "big", partitions=3)
    cfg = _eo(quick_abort_broker.bootstrap, str(tmp_path / "w"), "big", ack_timeout_s=25, kafka_conf=SHORT)
    rep = write_partition(cfg, 0, 0, 0, batches(0, ROWS, 50), run="r")
    assert (rep.acked, rep.pending) == (ROWS, 0), rep.problems
    counts = {c["parts"] for c in parts_seen}
    assert len(counts) == 1 and counts.pop() >= 8, parts_seen
    done = [c["part"] for c in parts_seen]  # one transaction per part, in order (a part the broker aborted: again)
    assert sorted(set(done)) == list(range(parts_seen[0]["parts"])) and done == sorted(done), done
    _assert_exactly(read_topic(quick_abort_broker.bootstrap, "big", expected=ROWS, isolation=RC), cfg, "r",
                    {(0, 0): ROWS})
    marker = lane_markers(cfg, "r", [0])[0]
    assert marker is not None and marker.batch == 0 and marker.partial is None  # the last part: the complete marker


class _Crash(Exception):
    pass


def _crash_at(part: int):
    def hook(name, coords):
        if name == "eo.produced_chunk":
            time.sleep(coords.get("records", 1000) * PER_RECORD_S)
        elif name == "eo.committing_part" and coords["part"] == part:
            raise _Crash(f"crashed before committing part {part}")
    return hook


def _crashed_at(broker, tmp_path, own_hook, batch: int, part: int):
    """A worker writes ``batch`` and dies before committing ``part``; returns (its config, the records visible then,
    a config of the re-run's worker: the same sink, another WAL)."""
    create_topic(broker.bootstrap, "big", partitions=3)
    first = _eo(broker.bootstrap, str(tmp_path / "a"), "big", ack_timeout_s=25, kafka_conf=SHORT)
    own_hook(_crash_at(part))
    with pytest.raises(_Crash):
        write_partition(first, batch, 0, 0, batches(0, ROWS, 50), run="r")
    # (not the lane's marker: the open part's transaction, its offset sent, stays open until the lane's next init,
    # and a read_committed offset read of it gives no answer meanwhile)
    before = len(read_topic(broker.bootstrap, "big", isolation=RC).records)
    reset_runtimes()  # the crashed worker is gone
    again = _eo(broker.bootstrap, str(tmp_path / "b"), "big", ack_timeout_s=25, kafka_conf=SHORT, name=first.name)
    return first, before, again


def test_a_rerun_after_some_parts_committed_publishes_only_the_rest(quick_abort_broker, tmp_path, parts_seen,
                                                                    own_hook):
    first, before, again = _crashed_at(quick_abort_broker, tmp_path, own_hook, 7, 3)
    assert 0 < before < ROWS // 2  # parts 0-2 of about 16
    seen = []
    own_hook(lambda n, c: seen.append(c["part"]) if n == "eo.committing_part" else None)
    reordered = reversed(list(batches(0, ROWS, 50, chunk=700)))  # the same records, split and ordered otherwise
    rep = write_partition(again, 7, 0, 1, reordered, run="r")
    assert (rep.acked, rep.pending) == (ROWS, 0), rep.problems
    assert seen and seen[0] == 3 and seen == list(range(3, seen[-1] + 1)), seen  # parts 0-2 were not sent again
    _assert_exactly(read_topic(quick_abort_broker.bootstrap, "big", expected=ROWS, isolation=RC), first, "r",
                    {(7, 0): ROWS})
    marker = lane_markers(first, "r", [0])[0]
    assert marker is not None and marker.batch == 7 and marker.partial is None  # complete: the settle is done


def test_a_rerun_with_other_records_after_some_parts_committed_is_refused_and_writes_nothing(
        quick_abort_broker, tmp_path, parts_seen, own_hook):
    first, before, again = _crashed_at(quick_abort_broker, tmp_path, own_hook, 3, 2)
    assert 0 < before < ROWS  # parts 0 and 1
    own_hook(lambda n, c: None)
    with pytest.raises(ExactlyOnceMismatchError) as e:
        write_partition(again, 3, 0, 1, batches(0, ROWS // 2, 50), run="r")  # half of them: some were in part 0 or 1
    assert "buckets 0..1" in str(e.value)
    assert len(read_topic(quick_abort_broker.bootstrap, "big", isolation=RC).records) == before


def test_a_record_refused_for_good_in_a_part_dead_letters_that_part_and_the_rest_only(broker, topic, tmp_path,
                                                                                   monkeypatch, own_hook):
    """The parts committed before the refusal stay in Kafka; every other record is dead-lettered; none is in both."""
    import pyarrow as pa

    monkeypatch.setattr(subunits, "SUB_UNIT_BYTES", 40 << 10)
    seen: list[int] = []
    own_hook(lambda n, c: seen.append(c["part"]) if n == "eo.committing_part" else None)
    cfg = _eo(broker.bootstrap, str(tmp_path), topic, ack_timeout_s=20, kafka_conf={"message.max.bytes": 20_000})
    # record 2778: its bucket is not 0 for any count of parts from 3 to 11 (this unit: about 7)
    monkeypatch.setattr(subunits, "PARTS_RATE", 2 << 10)  # 120 KiB in 60 s: this unit goes in parts at once
    rows = [{"key": b"k%d" % i, "value": b"v" * (50_000 if i == 2778 else 20)} for i in range(4000)]
    chunks = [pa.RecordBatch.from_pylist(rows[i:i + 500]) for i in range(0, 4000, 500)]
    rep = write_partition(cfg, 2, 0, 0, iter(chunks), run="r")
    assert seen and seen == list(range(len(seen))), seen  # parts 0..j-1 committed, then part j refused
    assert rep.pending == 0 and rep.acked + rep.dead_lettered == 4000 and rep.acked > 0, rep
    got = read_topic(broker.bootstrap, topic, expected=rep.acked, isolation=RC)
    in_kafka = {r.rid for r in got.records}
    assert len(in_kafka) == len(got.records) == rep.acked
    dead = {d.record_id for _k, d in get_runtime(cfg).wal.dead_letters()}
    assert len(dead) == rep.dead_lettered and not dead & in_kafka  # each record in one place
    big = ids_of(cfg.name, "r", 2, 0, chunks, topic)[2778]
    assert big in dead and any(rid == big and "too large" in err.lower() for rid, err, _t in rep.dead_letters)


def test_a_lane_offset_whose_metadata_is_not_a_partial_marker_is_refused_not_read_as_complete(broker, topic,
                                                                                              tmp_path):
    """The lane groups' offsets are the sink's alone: metadata another client committed there (or a newer version's)
    stops the lane, with :class:`MarkerError`; it is never read as "no partial marker" (a complete one)."""
    from confluent_kafka import Consumer, TopicPartition

    cfg = _eo(broker.bootstrap, str(tmp_path), topic, ack_timeout_s=20)
    rep = write_partition(cfg, 4, 0, 0, batches(0, 100, 10), run="r")
    assert (rep.acked, rep.pending) == (100, 0), rep.problems
    complete = lane_markers(cfg, "r", [0])[0]
    assert complete is not None and complete.batch == 4 and complete.partial is None
    conf = client_conf(cfg)
    conf.update({"group.id": lane_id(cfg.name, "r", 0), "enable.auto.commit": "false"})
    c = Consumer(conf)
    try:  # the same offset, with metadata of another client's
        (tp,) = c.commit(offsets=[TopicPartition(cfg.marker_topic, 0, encode_offset(4, complete.digest32),
                                                 metadata="theirs")], asynchronous=False)
        assert tp.error is None, tp.error
    finally:
        c.close()
    with pytest.raises(MarkerError, match="metadata is not a partial marker") as e:
        lane_markers(cfg, "r", [0])
    assert e.value.lane == lane_id(cfg.name, "r", 0)
