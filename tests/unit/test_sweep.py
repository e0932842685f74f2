"""Tier 1: a new lane producer's sweep (no broker: a recording producer). The broker tier proves it closes records.

tests/broker/test_exactly_once_restart.py shows, on Apache Kafka, the records
a restarted broker left without markers and the sweep closing them; here,
what the sweep sends and how it fails.
"""

from __future__ import annotations

from types import SimpleNamespace

import pyarrow as pa
import pytest

from spark_recoverable_sink.config import SinkConfig
from spark_recoverable_sink.delivery.exactly_once.lane import Lane, LaneState, SweepFailed, unswept_topics
from spark_recoverable_sink.delivery.exactly_once.sweep import SWEEP_KEY, lane_topics, sweep
from spark_recoverable_sink.ids import new_occurrences, with_ids
from spark_recoverable_sink.wal.format import ChunkKey, encode_chunk
from tests.record_ids import TEST_IDS


class _Err:
    def __init__(self, code: int) -> None:
        self._code = code

    def code(self) -> int:
        return self._code


class RecordingProducer:
    """Records the transaction calls; topics map to partition counts (absent: unknown topic)."""

    def __init__(self, topics: dict[str, int], fail_rows: int = 0, unsent: int = 0,
                 marker_topic: str | None = "rks-markers") -> None:
        self.topics, self.fail_rows, self.unsent = topics, fail_rows, unsent
        if marker_topic:
            self.topics[marker_topic] = 1
        self.calls: list[str] = []
        self.sent: list[tuple[str, int, bytes | None, bytes | None]] = []

    def list_topics(self, topic: str, timeout: float):
        from confluent_kafka import KafkaError

        if topic in self.topics:
            meta = SimpleNamespace(error=None, partitions={p: None for p in range(self.topics[topic])})
        else:
            meta = SimpleNamespace(error=_Err(KafkaError.UNKNOWN_TOPIC_OR_PART), partitions={})
        return SimpleNamespace(topics={topic: meta})

    def begin_transaction(self) -> None:
        self.calls.append("begin")

    def produce_chunk(self, rid, cb, batch, indices, topic, id_header, prefix, first_seq, block_s):
        self.calls.append("produce")
        assert topic is None and indices is None and prefix.endswith(b":sweep:")
        d = batch.to_pydict()
        self.sent = list(zip(d["topic"], d["partition"], d["key"], d["value"]))
        return len(self.sent) - self.fail_rows, [(i, "refused") for i in range(self.fail_rows)]

    def flush(self, timeout: float) -> int:
        self.calls.append("flush")
        return self.unsent

    def poll(self, timeout: float):
        return []

    def send_offsets(self, group_id, consumer, offsets, timeout_s) -> None:
        self.calls.append("offsets")
        assert group_id.startswith("rks-eo.") and len(offsets) == 1

    def abort_transaction(self, timeout: float) -> None:
        self.calls.append("abort")


def _config(topic: str | None = "orders") -> SinkConfig:
    return SinkConfig.build("sweeps", {"bootstrap.servers": "127.0.0.1:1"}, "/tmp/unused-sweeps", topic=topic,
                            guarantee="exactly_once")


def _left(_what: str) -> float:
    return 5.0


def _ready(producer: RecordingProducer) -> Lane:
    """A lane whose producer is initialised, not swept yet."""
    lane = Lane(producer, consumer=None)
    lane.state = LaneState.READY
    return lane


def test_every_partition_of_the_lanes_topics_and_the_marker_partition_get_one_aborted_record():
    cfg = _config()
    lane = _ready(RecordingProducer({"orders": 3, "audit": 2}))
    assert sweep(cfg, lane, "rks-eo.sweeps:r:0", {"orders", "audit", "gone"}, _left) == 6
    assert lane.producer.calls == ["begin", "produce", "offsets", "flush", "abort"]
    assert sorted((t, p) for t, p, _k, _v in lane.producer.sent) == sorted(
        [(cfg.marker_topic, 0), ("audit", 0), ("audit", 1), ("orders", 0), ("orders", 1), ("orders", 2)])
    assert {(k, v) for _t, _p, k, v in lane.producer.sent} == {(SWEEP_KEY, None)}
    assert lane.state is LaneState.SWEPT and lane.swept and lane.swept_topics == {"orders", "audit", "gone"}
    # a swept lane sweeps only topics it has not swept yet, and only those
    assert sweep(cfg, lane, "rks-eo.sweeps:r:0", {"orders", "audit"}, _left) == 1  # the marker partition
    assert sweep(cfg, lane, "rks-eo.sweeps:r:0", {"orders", "more"}, _left) == 1
    lane.producer.topics["more"] = 4
    lane.state = LaneState.READY  # after an abort: everything again
    assert sweep(cfg, lane, "rks-eo.sweeps:r:0", {"orders", "more"}, _left) == 8
    assert lane.swept_topics == {"orders", "more"}


@pytest.mark.parametrize("fail_rows,unsent", [(1, 0), (0, 2)])
def test_a_sweep_that_did_not_reach_every_partition_is_aborted_and_not_counted(fail_rows, unsent):
    lane = _ready(RecordingProducer({"orders": 3}, fail_rows=fail_rows, unsent=unsent))
    with pytest.raises(SweepFailed, match="did not complete"):
        sweep(_config(), lane, "rks-eo.sweeps:r:0", {"orders"}, _left)
    assert lane.producer.calls[-1] == "abort" and lane.state is LaneState.READY and not lane.swept


def test_a_sweep_whose_marker_topic_is_unknown_fails_before_any_transaction():
    from confluent_kafka import KafkaError, KafkaException

    lane = _ready(RecordingProducer({"orders": 1}, marker_topic=None))
    with pytest.raises(KafkaException) as e:
        sweep(_config(), lane, "rks-eo.sweeps:r:0", {"orders"}, _left)
    assert e.value.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART  # the committer then checks the topic
    assert lane.producer.calls == [] and lane.state is LaneState.READY


def test_a_sweep_whose_abort_fails_leaves_the_lane_to_abort_first():
    lane = _ready(RecordingProducer({"orders": 1}))

    def abort(timeout: float) -> None:
        raise RuntimeError("abort timed out")

    lane.producer.abort_transaction = abort
    with pytest.raises(RuntimeError):
        sweep(_config(), lane, "rks-eo.sweeps:r:0", {"orders"}, _left)
    assert lane.state is LaneState.ABORTING and not lane.swept  # the next settle aborts it again


def test_a_topic_column_sweeps_the_topics_of_the_units_records():
    chunks = [pa.RecordBatch.from_pydict({"value": [b"a", b"b"], "topic": ["t1", "t2"]}),
              pa.RecordBatch.from_pydict({"value": [b"c"], "topic": ["t1"]})]
    stored = {ChunkKey(1, 0, i * 2, 0): bytes(encode_chunk(with_ids(b, TEST_IDS, new_occurrences())))
              for i, b in enumerate(chunks)}
    unit = SimpleNamespace(chunks=[(ck, len(raw)) for ck, raw in stored.items()],
                           wal=SimpleNamespace(read_chunk=stored.get))
    assert lane_topics(_config(topic=None), unit) == {"t1", "t2"}
    assert lane_topics(_config(topic=None), None) == set()


def test_a_chunk_on_a_topic_the_lane_has_not_swept_is_held_back_and_noted():
    lane = Lane(RecordingProducer({}), consumer=None)
    lane.state, lane.swept_topics = LaneState.SWEPT, {"orders"}
    assert unswept_topics(lane, pa.RecordBatch.from_pydict({"value": [b"a"]}), "orders") == set()
    column = pa.RecordBatch.from_pydict({"value": [b"a", b"b", b"c"], "topic": ["orders", "audit", None]})
    assert unswept_topics(lane, column, "orders") == {"audit"} and lane.need_topics == {"audit"}
    lane.state = LaneState.READY  # after an abort nothing counts as swept
    assert unswept_topics(lane, column, "orders") == {"orders", "audit"}
