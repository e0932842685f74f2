"""A lane's marker read before its producer is initialised: a broker that does not answer is no answer, not an error.

(:meth:`spark_recoverable_sink.delivery.exactly_once.marker_reads.MarkerReader.read_before_init`; the sequences
it serves run against the real broker in tests/broker/test_exactly_once_fencing.py.)
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from confluent_kafka import KafkaError, KafkaException

from spark_recoverable_sink.config import SinkConfig
from spark_recoverable_sink.delivery.exactly_once.marker_reads import MarkerReader
from spark_recoverable_sink.delivery.exactly_once.markers import UNANSWERED, encode_offset


class _Consumer:
    def __init__(self, answer) -> None:
        self.answer = answer
        self.timeouts: list[float] = []

    def committed(self, tps, timeout: float):
        self.timeouts.append(timeout)
        if isinstance(self.answer, BaseException):
            raise self.answer
        return [self.answer]


def _reader() -> MarkerReader:
    return MarkerReader(SinkConfig.build("mr", {"bootstrap.servers": "127.0.0.1:1"}, "/tmp/unused", topic="t",
                                         guarantee="exactly_once"))


@pytest.mark.parametrize("answer", [
    KafkaException(KafkaError(KafkaError._TIMED_OUT)),  # what librdkafka returns after retrying an unstable offset
    SimpleNamespace(error=KafkaError(KafkaError.UNSTABLE_OFFSET_COMMIT), offset=-1001),
], ids=["timed_out", "unstable_offset"])
def test_no_answer_in_time_is_unanswered(answer):
    consumer = _Consumer(answer)
    assert _reader().read_before_init("rks-eo.mr:r:0", consumer, 5.0) is UNANSWERED
    assert consumer.timeouts == [5.0]


def test_an_answer_is_the_marker():
    consumer = _Consumer(SimpleNamespace(error=None, offset=encode_offset(7, 12345)))
    marker = _reader().read_before_init("rks-eo.mr:r:0", consumer, 5.0)
    assert marker is not None and marker is not UNANSWERED and marker.proves(7, 12345)


def test_any_other_error_is_raised():
    consumer = _Consumer(KafkaException(KafkaError(KafkaError.GROUP_AUTHORIZATION_FAILED)))
    with pytest.raises(KafkaException):
        _reader().read_before_init("rks-eo.mr:r:0", consumer, 5.0)
