"""Tier 2: transactions of the native producer (:mod:`spark_recoverable_sink.native.producer`), real test broker.

Transactions, and offsets sent with them, commit and abort; records and the
group's committed offsets are read back from the broker and checked.
"""

from __future__ import annotations

import uuid

import pyarrow as pa
import pytest

from spark_recoverable_sink.native import library
from spark_recoverable_sink.native.producer import Producer

from ..kafka_helpers import read_topic
from .native_helpers import conf, drain, new_topic

pytestmark = [pytest.mark.broker,
              pytest.mark.skipif(not library.available(),
                                 reason=f"native extension not built: {library.why_unavailable()}")]


def test_transactions_commit_is_visible_abort_is_not(broker):
    topic_c, topic_a = new_topic(broker), new_topic(broker)
    p = Producer(conf(broker, **{"transactional.id": f"native-tx-{uuid.uuid4().hex}"}))
    p.init_transactions(30)
    p.begin_transaction()
    n = 200
    produced, _ = p.produce_chunk(10, topic_c, pa.array([b"c%d" % i for i in range(n)]),
                                  ids=pa.array([b"c-%d" % i for i in range(n)]))
    p.commit_transaction(30)
    assert drain(p, produced)[10]["acked"] == n  # the commit flushed: the reports are waiting
    got = read_topic(broker.bootstrap, topic_c, expected=n, isolation="read_committed")
    assert sorted(r.value for r in got.records) == sorted(b"c%d" % i for i in range(n))

    p.begin_transaction()
    p.produce_chunk(11, topic_a, pa.array([b"a"] * 50), ids=pa.array([b"a"] * 50))
    p.flush(30)
    p.abort_transaction(30)
    p.close()
    got = read_topic(broker.bootstrap, topic_a, idle_s=2.0, isolation="read_committed")
    assert got.records == []


def _committed_offset(broker, group: str, topic: str) -> int:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group, "isolation.level": "read_committed",
                  "enable.auto.commit": False})
    try:
        (tp,) = c.committed([TopicPartition(topic, 0)], timeout=30)
        assert tp.error is None, tp.error
        return tp.offset
    finally:
        c.close()


def test_send_offsets_to_transaction_commits_and_aborts_with_it(broker):
    from confluent_kafka import KafkaException, TopicPartition

    topic, group = new_topic(broker, 1), f"native-grp-{uuid.uuid4().hex}"
    p = Producer(conf(broker, **{"transactional.id": f"native-txo-{uuid.uuid4().hex}"}))
    p.init_transactions(30)
    p.begin_transaction()
    produced, _ = p.produce_chunk(1, topic, pa.array([b"x"] * 10), ids=pa.array([b"o"] * 10))
    p.send_offsets_to_transaction(group, [(topic, 0, 1234)], 30)
    p.commit_transaction(30)
    assert drain(p, produced)[1]["acked"] == 10
    assert _committed_offset(broker, group, topic) == 1234

    p.begin_transaction()  # aborted: the group's offset stays 1234
    p.produce_chunk(2, topic, pa.array([b"y"] * 5), ids=pa.array([b"a"] * 5))
    p.send_offsets_to_transaction(group, [TopicPartition(topic, 0, 5678)], 30)  # objects work too
    p.abort_transaction(30)
    p.close()
    assert _committed_offset(broker, group, topic) == 1234

    plain = Producer(conf(broker))  # not transactional: a KafkaException, as from confluent-kafka
    with pytest.raises(KafkaException) as ei:
        plain.send_offsets_to_transaction("g", [(topic, 0, 1)], 5)
    assert ei.value.args[0].code() != 0 and ei.value.args[0].str()
    raw = plain._p
    for bad in ([(topic, 0)], [(topic, "0", 1)], [(1, 0, 1)], [topic], 5):
        with pytest.raises(TypeError):
            raw.send_offsets_to_transaction("g", bad, 1.0)
    with pytest.raises(ValueError, match="NUL"):
        raw.send_offsets_to_transaction("g\0h", [(topic, 0, 1)], 1.0)
    with pytest.raises(ValueError, match="NUL"):
        raw.send_offsets_to_transaction("g", [("a\0b", 0, 1)], 1.0)
    with pytest.raises(OverflowError):
        raw.send_offsets_to_transaction("g", [(topic, 2**31, 1)], 1.0)
    with pytest.raises(KafkaException):
        plain.begin_transaction()
    plain.close()


def _poison_malloc_caches(fill: bytes = b"x", sizes=range(8, 257, 8), each: int = 32) -> None:
    """Leave this thread's malloc caches full of freed chunks of ``fill`` bytes (past a freed chunk's first 16
    bytes, which hold its links): a buffer the C code allocates next holds them wherever it does not write."""
    import ctypes

    libc = ctypes.CDLL(None)
    libc.malloc.restype = ctypes.c_void_p
    libc.malloc.argtypes = [ctypes.c_size_t]
    libc.free.argtypes = [ctypes.c_void_p]
    chunks = []
    for size in sizes:
        for _ in range(each):
            ptr = libc.malloc(size)
            ctypes.memset(ptr, fill[0], size)
            chunks.append(ptr)
    for ptr in chunks:
        libc.free(ptr)


def test_offset_metadata_sent_with_a_transaction_reads_back_exactly(broker):
    """The commit metadata (a lane's partial marker) reads back as sent through confluent-kafka's ``committed()``,
    whatever the heap held: that reader copies the metadata as a C string, so its terminator must be committed too."""
    from confluent_kafka import Consumer, TopicPartition

    topic = new_topic(broker, 1)
    p = Producer(conf(broker, **{"transactional.id": f"native-txm-{uuid.uuid4().hex}"}))
    p.init_transactions(30)
    c = None
    try:
        for n in (1, 23, 51, 66, 100, 200):
            group, text = f"native-grpm-{uuid.uuid4().hex}", "".join(chr(ord("a") + i % 26) for i in range(n))
            p.begin_transaction()
            p.send_offsets_to_transaction(group, [(topic, 0, 77, text)], 30)
            p.commit_transaction(30)
            c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group, "enable.auto.commit": False,
                          "isolation.level": "read_committed"})
            for _ in range(3):
                _poison_malloc_caches()
                (tp,) = c.committed([TopicPartition(topic, 0)], timeout=30)
                assert (tp.error, tp.offset, tp.metadata) == (None, 77, text), n
            c.close()
            c = None
    finally:
        if c is not None:
            c.close()
        p.close()
