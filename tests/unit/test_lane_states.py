"""Tier 1: a lane's state machine, and what a lane does with a transaction left open (no broker: a recording
producer)."""

from __future__ import annotations

import pytest

from spark_recoverable_sink.delivery.exactly_once.lane import Lane, LaneState, LaneTransitionError
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

    def init_transactions(self, timeout: float) -> None:
        self.calls.append("init")

    def begin_transaction(self) -> None:
        self.calls.append("begin")


def _left(_what: str) -> float:
    return 5.0


def _lane(state: LaneState = LaneState.SWEPT, owner=None) -> Lane:
    lane = Lane(RecordingProducer(), consumer=None)
    lane.state, lane.owner, lane.swept_topics = state, owner, {"t"}
    return lane


OPEN, PRODUCED, MARKED = LaneState.OPEN, LaneState.PRODUCED, LaneState.MARKED


A, B = ("/w/slot-0", AttemptKey(1, 0, 1)), ("/w/slot-1", AttemptKey(1, 0, 1))  # same key, two slots


def test_another_units_complete_transaction_is_committed_not_aborted():
    # a commit that timed out stays "in progress" in librdkafka: an abort would fail with _CONFLICT
    lane = _lane(MARKED, A)
    lane.finalize_open(B, _left)
    assert lane.producer.calls == ["commit"] and lane.owner is None and lane.state is LaneState.SWEPT


def test_half_produced_failed_or_foreign_transactions_are_aborted():
    for lane in (_lane(OPEN, A), _lane(LaneState.DOOMED, A), _lane(LaneState.DOOMED), _lane(PRODUCED, A),
                 _lane(LaneState.SWEEPING), _lane(LaneState.DOOMED, B)):
        lane.finalize_open(B, _left)
        assert lane.producer.calls == ["abort"] and lane.owner is None and lane.state is LaneState.READY
        assert not lane.swept  # an abort may leave records open too (delivery/exactly_once/sweep.py)


def test_the_callers_own_complete_transaction_is_left_for_its_commit_step():
    for state in (OPEN, PRODUCED, MARKED, LaneState.COMMITTING):
        lane = _lane(state, A)
        lane.finalize_open(A, _left)
        assert lane.producer.calls == [] and lane.owner == A and lane.state is state


def test_units_of_two_slots_with_equal_keys_are_told_apart():
    lane = _lane(PRODUCED, A)  # A's records are in the open transaction, B must not commit them
    lane.finalize_open(B, _left)
    assert lane.producer.calls == ["abort"]


def test_a_commit_or_abort_without_outcome_drops_the_lanes_producer_and_an_abortable_one_aborts():
    from confluent_kafka import KafkaError

    from spark_recoverable_sink.config import SinkConfig
    from spark_recoverable_sink.delivery.exactly_once.commit import Committer

    cfg = SinkConfig.build("lanes", {"bootstrap.servers": "127.0.0.1:1"}, "/tmp/unused-lanes", topic="t",
                           guarantee="exactly_once")
    committer = Committer(cfg)
    timed_out = KafkaError(KafkaError._TIMED_OUT, "commit timed out", retriable=True)
    # inside commit_transaction when it failed (Committer._commit, Lane.finalize_open)
    ending, producing = _lane(LaneState.COMMITTING, A), _lane(OPEN, A)
    committer.lanes._lanes.update({"ending": ending, "producing": producing})
    committer.note_error("ending", timed_out)
    committer.note_error("producing", timed_out)
    assert committer.lanes.known("ending") is None  # the next producer's init finalizes the transaction
    assert committer.lanes.known("producing") is producing and producing.state is OPEN  # retried as it is
    abortable = KafkaError(KafkaError._STATE, "abortable", txn_requires_abort=True)
    again = _lane(LaneState.COMMITTING, A)
    committer.lanes._lanes["again"] = again
    committer.note_error("again", abortable)
    assert committer.lanes.known("again") is again and again.state is LaneState.DOOMED


def test_a_units_transaction_goes_through_its_states_in_order():
    lane = Lane(RecordingProducer(), consumer=None)
    lane.init(5.0)
    assert lane.state is LaneState.READY and not lane.swept
    lane.to(LaneState.SWEEPING)
    lane.to(LaneState.ABORTING)
    lane.to(LaneState.SWEPT)
    lane.begin(A)
    assert lane.state is OPEN and lane.owner == A and lane.chunks_in == 0
    lane.produced(B)  # another unit's word moves nothing
    assert lane.state is OPEN
    lane.produced(A)
    lane.to(MARKED)
    lane.commit(5.0)
    assert lane.state is LaneState.SWEPT and lane.owner is None and lane.swept
    assert lane.producer.calls == ["init", "begin", "commit"]


def test_a_move_the_machine_does_not_make_is_refused():
    for state, target in ((LaneState.NEW, LaneState.SWEPT), (LaneState.READY, OPEN), (OPEN, MARKED),
                          (MARKED, LaneState.ABORTING), (LaneState.SWEEPING, LaneState.SWEPT)):
        lane = _lane(state, A)
        with pytest.raises(LaneTransitionError):
            lane.to(target)
        assert lane.state is state
    lane = _lane(LaneState.READY)
    with pytest.raises(LaneTransitionError):
        lane.begin(A)  # a lane begins a transaction only once swept
    with pytest.raises(LaneTransitionError):
        _lane(OPEN, A).commit(5.0)  # nor commits one without its marker


def test_doomed_stays_doomed_and_nothing_is_open_before_init():
    lane = _lane(PRODUCED, A)
    lane.doom()
    lane.produced(A)
    assert lane.state is LaneState.DOOMED
    lane.doom()
    assert lane.state is LaneState.DOOMED
    fresh = _lane(LaneState.NEW)
    fresh.doom()
    assert fresh.state is LaneState.NEW
