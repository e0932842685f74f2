"""A client call that may ignore its timeout is waited for a bounded time, then reported as a fatal error."""

from __future__ import annotations

import threading
import time

import pytest
from confluent_kafka import KafkaError, KafkaException

from spark_recoverable_sink.delivery.engine import BOUND_GRACE_S, bounded


def test_a_call_that_never_returns_is_a_fatal_timeout_soon_after_its_timeout():
    release = threading.Event()
    t = time.monotonic()
    with pytest.raises(KafkaException) as ei:
        bounded(lambda: release.wait(60), 0.5, "send_offsets_to_transaction")
    took = time.monotonic() - t
    release.set()
    err = ei.value.args[0]
    assert err.code() == KafkaError._TIMED_OUT and err.fatal()
    assert "send_offsets_to_transaction" in err.str()
    assert 0.5 + BOUND_GRACE_S - 0.1 <= took < 0.5 + BOUND_GRACE_S + 2.0


def test_a_call_that_returns_or_raises_is_passed_through():
    seen = []
    bounded(lambda: seen.append(1), 5.0, "x")
    assert seen == [1]
    with pytest.raises(KafkaException) as ei:
        bounded(lambda: (_ for _ in ()).throw(KafkaException(KafkaError(KafkaError._FENCED))), 5.0, "x")
    assert ei.value.args[0].code() == KafkaError._FENCED


class _Consumer:
    def consumer_group_metadata(self) -> str:
        return "group-metadata"


class _WedgedProducer:
    """A producer whose send_offsets_to_transaction never returns on its own (librdkafka #5456, #5511)."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.timeouts: list[float] = []

    def send_offsets_to_transaction(self, offsets, metadata, timeout_s) -> None:
        self.timeouts.append(timeout_s)
        self.release.wait(60)


def test_a_wedged_send_offsets_costs_its_cap_not_the_units_whole_window(monkeypatch):
    from spark_recoverable_sink.delivery import engine as engine_mod

    monkeypatch.setattr(engine_mod, "SEND_OFFSETS_MAX_S", 0.5)
    producer = _WedgedProducer()
    eng = engine_mod.PythonEngine.around(producer)
    t = time.monotonic()
    with pytest.raises(KafkaException) as ei:
        eng.send_offsets("rks-eo.lane", _Consumer(), [("markers", 0, 7)], 30.0)  # a unit's whole window
    took = time.monotonic() - t
    assert ei.value.args[0].code() == KafkaError._TIMED_OUT and ei.value.args[0].fatal()
    assert producer.timeouts == [0.5]
    assert took < 0.5 + BOUND_GRACE_S + 2.0, took
    producer.release.set()
    producer.release.clear()
    short = _WedgedProducer()
    short.release.set()
    engine_mod.PythonEngine.around(short).send_offsets("rks-eo.lane", _Consumer(), [("markers", 0, 7)], 0.2)
    assert short.timeouts == [0.2]  # a shorter window is kept as it is
