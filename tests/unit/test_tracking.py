"""Tier 1: matching failed delivery reports to records, and ack accounting."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError

from spark_recoverable_sink.delivery.attempts import AttemptTracker
from spark_recoverable_sink.delivery.chunks import (
    ChunkBook,
    ChunkTracker,
    State,
    TransitionError,
)
from spark_recoverable_sink.wal.format import AttemptKey, ChunkKey


class _Msg:
    def __init__(self, topic, key, value):
        self._t, self._k, self._v = topic, key, value

    def topic(self):
        return self._t

    def key(self):
        return self._k

    def value(self):
        return self._v


def _tracker(rows: int) -> ChunkTracker:
    at = AttemptTracker(None, AttemptKey(1, 0, 1))  # type: ignore[arg-type]
    t = ChunkTracker(None, ChunkKey(1, 0, 0, 1), rows, 100, at)  # type: ignore[arg-type]
    t.start_round(None)
    return t


TIMEOUT = KafkaError(KafkaError._MSG_TIMED_OUT)
TOO_LARGE = KafkaError(KafkaError.MSG_SIZE_TOO_LARGE)


def test_failures_matched_exactly_by_content():
    topics = ["t"] * 5
    keys = [b"k0", b"k1", None, b"k3", b"k4"]
    values = [b"v0", b"v1", b"v2", b"v3", b"v4"]
    t = _tracker(5)
    for i in range(5):
        if i == 1:
            t.on_delivery(TIMEOUT, _Msg("t", keys[i], values[i]))
        elif i == 2:
            t.on_delivery(TOO_LARGE, _Msg("t", keys[i], values[i]))
        else:
            t.on_delivery(None, _Msg("t", keys[i], values[i]))
    t.seal(5, [])
    assert t.round_done and t.acked == 3
    t.resolve_failures(topics, keys, values)
    # too large is a batch-level error: record 2 is re-sent alone before it is dead
    assert [i for i, _ in t.failed] == [1, 2] and set(t.isolate) == {2} and t.dead == []
    assert t.acked == 3 and t.pending == 2
    t.start_round([2])
    t.on_delivery(TOO_LARGE, _Msg("t", keys[2], values[2]))
    t.seal(1, [])
    t.resolve_failures(topics, keys, values)
    assert [(i, c) for i, c, _ in t.dead] == [(2, KafkaError.MSG_SIZE_TOO_LARGE)]
    assert t.failed == [] and t.acked == 3


def test_identical_content_is_all_resent_and_acks_taken_back():
    topics, keys, values = ["t"] * 4, [b"k"] * 4, [b"same", b"same", b"other", b"same"]
    t = _tracker(4)
    t.on_delivery(None, _Msg("t", b"k", b"same"))
    t.on_delivery(TIMEOUT, _Msg("t", b"k", b"same"))  # one of the three failed: which is unknown
    t.on_delivery(None, _Msg("t", b"k", b"other"))
    t.on_delivery(None, _Msg("t", b"k", b"same"))
    t.seal(4, [])
    t.resolve_failures(topics, keys, values)
    assert sorted(i for i, _ in t.failed) == [0, 1, 3]  # all three go again: duplicates, no gap
    assert t.acked == 1  # only "other" counts as acked now
    assert t.pending == 3


def test_unmatched_failure_resends_the_whole_round():
    t = _tracker(3)
    t.on_delivery(None, _Msg("t", None, b"a"))
    t.on_delivery(TIMEOUT, _Msg("renamed-topic", None, b"?"))
    t.on_delivery(None, _Msg("t", None, b"c"))
    t.seal(3, [])
    t.resolve_failures(["t"] * 3, [None] * 3, [b"a", b"b", b"c"])
    assert sorted(i for i, _ in t.failed) == [0, 1, 2]
    assert t.acked == 0


def test_retry_round_only_considers_its_own_indices():
    values = [b"x", b"y", b"x"]
    t = _tracker(3)
    t.start_round([2])  # only record 2 is re-sent in this round
    t.on_delivery(TIMEOUT, _Msg("t", None, b"x"))
    t.seal(1, [])
    t.resolve_failures(["t"] * 3, [None] * 3, values)
    assert [i for i, _ in t.failed] == [2]  # record 0 (same content, acked earlier) is not touched


def test_sync_failures_split_into_retry_and_dead():
    t = _tracker(3)
    t.seal(1, [(0, TIMEOUT), (2, TOO_LARGE)])
    t.on_delivery(None, _Msg("t", None, b"b"))
    t.account_sync_failures()
    assert [i for i, _ in t.failed] == [0] and [i for i, _c, _e in t.dead] == [2]


def test_fail_round_retries_every_record_not_known_dead():
    t = _tracker(4)
    t.on_delivery(None, _Msg("t", None, b"a"))
    t.on_delivery(TIMEOUT, _Msg("t", None, b"b"))
    t.on_delivery(None, _Msg("t", None, b"c"))
    t.on_delivery(None, _Msg("t", None, b"d"))
    t.seal(4, [])
    t.fail_round()  # e.g. the chunk could not be read back to match the failure
    assert sorted(i for i, _ in t.failed) == [0, 1, 2, 3]
    assert t.acked == 0 and t.round.failed_raw == [] and t.pending == 4


def test_equal_content_one_transient_one_permanent_only_the_bad_one_dies():
    # same topic/key/value, different headers: delivery reports cannot tell them apart
    topics, keys, values = ["t"] * 3, [b"k"] * 3, [b"same", b"same", b"z"]
    t = _tracker(3)
    t.on_delivery(TIMEOUT, _Msg("t", b"k", b"same"))
    t.on_delivery(TOO_LARGE, _Msg("t", b"k", b"same"))
    t.on_delivery(None, _Msg("t", b"k", b"z"))
    t.seal(3, [])
    t.resolve_failures(topics, keys, values)
    assert t.dead == [] and sorted(i for i, _ in t.failed) == [0, 1] and set(t.isolate) == {0, 1}
    for i, err in ((0, None), (1, TOO_LARGE)):  # each alone: its report is its own
        t.start_round([i])
        t.on_delivery(err, _Msg("t", b"k", b"same"))
        t.seal(1, [])
        t.resolve_failures(topics, keys, values)
    assert [i for i, _c, _e in t.dead] == [1]
    assert t.acked == 2 and t.pending == 0


def test_attempt_counts_a_chunk_pruned_twice_once():
    at = AttemptTracker(None, AttemptKey(1, 0, 1))  # type: ignore[arg-type]
    k1, k2 = ChunkKey(1, 0, 0, 1), ChunkKey(1, 0, 10, 1)
    at.add_chunk(k1)
    at.add_chunk(k2)
    assert at.close() is False
    assert at.chunk_pruned(k1) is False
    assert at.chunk_pruned(k1) is False  # k2 is still in the WAL: the attempt record must stay
    assert at.finished_without({k2}) is True and at.outstanding == 1
    assert at.chunk_pruned(k2) is True


def test_chunk_book_keeps_each_chunk_in_exactly_one_state():
    book = ChunkBook()
    at = AttemptTracker(None, AttemptKey(1, 0, 1))  # type: ignore[arg-type]
    t = ChunkTracker(None, ChunkKey(1, 0, 0, 1), 3, 10, at)  # type: ignore[arg-type]
    book.move(t, State.QUEUED)
    book.move(t, State.IN_FLIGHT)
    book.move(t, State.REPORTED)
    book.move(t, State.DONE)
    assert book.in_state(State.DONE) == [t] and book.count(State.QUEUED, State.IN_FLIGHT, State.REPORTED) == 0
    with pytest.raises(TransitionError):
        book.move(t, State.DONE)  # done twice is not a transition: nothing changes
    assert book.in_state(State.DONE) == [t]
    book.move(t, State.PRUNED)
    with pytest.raises(TransitionError):
        book.move(t, State.PRUNED)  # pruned twice: refused
    assert not book and t.finished


def test_a_chunk_whose_reports_do_not_account_for_every_record_is_not_done():
    """9 acks and no failure for 10 records (a report counted but never classified): every record goes again."""
    import types

    from spark_recoverable_sink.config import SinkConfig
    from spark_recoverable_sink.delivery.steps import _account_one

    cfg = SinkConfig.build("acct", {"bootstrap.servers": "127.0.0.1:1"}, "/tmp/unused-acct")
    book = ChunkBook()
    t = _tracker(10)
    book.move(t, State.IN_FLIGHT)
    t.seal(10, [])
    t.round.add_reports(9, 10, [])
    assert t.round_done
    book.move(t, State.REPORTED)
    contact = types.SimpleNamespace(mark_reached=lambda: None)
    slot = types.SimpleNamespace(request_replace=lambda why: None)
    _account_one(cfg, book, slot, contact, lambda _t: None, t, 0.0)  # type: ignore[arg-type]
    assert t.state is State.RETRY_WAIT
    assert sorted(i for i, _e in t.failed) == list(range(10)) and t.acked == 0
