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
