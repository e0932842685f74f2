"""Tier 1: what a lane does with a transaction left open (no broker: a recording producer)."""

from __future__ import annotations

from spark_recoverable_sink.delivery.exactly_once.lanes import Lane
from spark_recoverable_sink.wal.format import AttemptKey


class RecordingProducer:
    def close(self) -> None:
        pass

    def __init__(self) -> None:
        self.calls: list[str] = []

    def commit_transaction(self, timeout: float) -> None:
        self.calls.append("commit")

    def abort_transaction(self, timeout: float) -> None:
        self.calls.append("abort")


def _left(_what: str) -> float:
    return 5.0


def _lane(open_=None, produced=False, offsets_sent=False, must_abort=False) -> Lane:
    lane = Lane(RecordingProducer(), consumer=None)
    lane.open, lane.produced, lane.offsets_sent, lane.must_abort = open_, produced, offsets_sent, must_abort
    lane.swept, lane.swept_topics = True, {"t"}
    return lane


A, B = ("/w/slot-0", AttemptKey(1, 0, 1)), ("/w/slot-1", AttemptKey(1, 0, 1))  # same key, two slots


def test_another_units_complete_transaction_is_committed_not_aborted():
    # a commit that timed out stays "in progress" in librdkafka: an abort would fail with _CONFLICT
    lane = _lane(A, produced=True, offsets_sent=True)
    lane.settle_open(B, _left)
    assert lane.producer.calls == ["commit"] and lane.open is None and lane.swept


def test_half_produced_failed_or_foreign_transactions_are_aborted():
    for lane in (_lane(A, produced=False), _lane(A, produced=True, must_abort=True), _lane(None, must_abort=True),
                 _lane(A, produced=True, offsets_sent=False)):
        lane.settle_open(B, _left)
        assert lane.producer.calls == ["abort"] and lane.open is None and not lane.must_abort
        assert not lane.swept  # an abort may leave records open too (delivery/exactly_once/sweep.py)


def test_the_callers_own_complete_transaction_is_left_for_its_commit_step():
    lane = _lane(A, produced=True, offsets_sent=True)
    lane.settle_open(A, _left)
    assert lane.producer.calls == [] and lane.open == A


def test_units_of_two_slots_with_equal_keys_are_told_apart():
    lane = _lane(A, produced=True)  # A's records are in the open transaction, B must not commit them
    lane.settle_open(B, _left)
    assert lane.producer.calls == ["abort"]


def test_a_commit_or_abort_without_outcome_drops_the_lanes_producer_and_an_abortable_one_aborts():
    from confluent_kafka import KafkaError

    from spark_recoverable_sink.config import SinkConfig
    from spark_recoverable_sink.delivery.exactly_once.transactions import Committer

    cfg = SinkConfig.build("lanes", {"bootstrap.servers": "127.0.0.1:1"}, "/tmp/unused-lanes", topic="t",
                           guarantee="exactly_once")
    committer = Committer(cfg)
    timed_out = KafkaError(KafkaError._TIMED_OUT, "commit timed out", retriable=True)
    ending, producing = _lane(A, produced=True, offsets_sent=True), _lane(A, produced=False)
    ending.ending = True  # inside commit_transaction when it failed (Committer._commit, Lane.settle_open)
    committer.lanes._lanes.update({"ending": ending, "producing": producing})
    committer.note_error("ending", timed_out)
    committer.note_error("producing", timed_out)
    assert committer.lanes.known("ending") is None  # the next producer's init settles the transaction
    assert committer.lanes.known("producing") is producing and not producing.must_abort  # retried as it is
    abortable = KafkaError(KafkaError._STATE, "abortable", txn_requires_abort=True)
    again = _lane(A, produced=True, offsets_sent=True)
    again.ending = True
    committer.lanes._lanes["again"] = again
    committer.note_error("again", abortable)
    assert committer.lanes.known("again") is again and again.must_abort
