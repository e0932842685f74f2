"""Tier 2: the fault tests' live reader finds records its consumer skipped, in seconds, not after a whole wait."""

from __future__ import annotations

import uuid
from typing import Any

import confluent_kafka
import pytest

from ..kafka_helpers import create_topic
from .readback import LiveReader, keys_of

pytestmark = pytest.mark.broker

SKIPPED = range(100, 150)  # offsets of partition 0 the first consumer never returns


class _SkippingConsumer:
    """A real consumer that never returns a run of offsets: what the test broker's consumers have done."""

    def __init__(self, real: Any) -> None:
        self._real = real

    def consume(self, *args: Any, **kwargs: Any) -> list[Any]:
        return [m for m in self._real.consume(*args, **kwargs)
                if m.error() or not (m.partition() == 0 and m.offset() in SKIPPED)]

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)


def test_records_the_live_consumer_skipped_are_found_by_a_reread(broker, monkeypatch):
    topic = f"lr-{uuid.uuid4().hex[:10]}"
    create_topic(broker.bootstrap, topic, partitions=1)
    p = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(300):
        p.produce(topic, value=b"v", key=str(i).encode())
    assert p.flush(30) == 0

    real = confluent_kafka.Consumer
    made: list[Any] = []

    def consumer(conf: dict[str, Any]) -> Any:
        c = real(conf)
        made.append(c)
        return _SkippingConsumer(c) if len(made) == 1 else c  # the live one skips; re-reads do not

    monkeypatch.setattr(confluent_kafka, "Consumer", consumer)
    reader = LiveReader(broker.bootstrap, topic).start()
    try:
        last = reader.wait_for(keys_of(range(300)), 40)
    finally:
        reader.stop()
    assert reader.error is None, reader.error
    assert last is not None, f"{300 - len(reader.first_seen)} keys never seen"
    assert len(made) >= 2  # the skipped run came from a fresh consumer
    assert reader.reread_keys == len(SKIPPED)
    assert reader.records == 300  # each offset counted once, re-read or not
