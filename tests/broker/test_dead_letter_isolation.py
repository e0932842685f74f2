"""Tier 2: only the records that really fail alone are dead-lettered."""

from __future__ import annotations

import confluent_kafka
import pyarrow as pa
import pytest

from spark_recoverable_sink.task.writer import write_partition

from ..kafka_helpers import read_topic
from ..record_ids import ids_of
from .fake_clients import BatchLevelError, HeaderFaults
from .test_publisher import _config

pytestmark = pytest.mark.broker


def test_batch_level_error_dead_letters_only_the_bad_record(broker, topic, tmp_path, monkeypatch):
    BatchLevelError.instances = []
    monkeypatch.setattr(confluent_kafka, "Producer", BatchLevelError)
    cfg = _config(broker.bootstrap, str(tmp_path), topic, ack_timeout_s=60, name="iso", retry_backoff_s=0.01,
                  delivery_engine="python")
    values = [b"good-%d" % i for i in range(20)]
    values[7] = b"BAD-record"
    batch = pa.RecordBatch.from_pydict({"key": [b"k%d" % i for i in range(20)], "value": values})
    report = write_partition(cfg, 1, 0, 0, iter([batch]))
    assert (report.acked, report.dead_lettered, report.pending) == (19, 1, 0)
    ids = ids_of("iso", "", 1, 0, [batch], topic)
    assert [rid for rid, _e, _t in report.dead_letters] == [ids[7]]
    got = read_topic(broker.bootstrap, topic, expected=19)
    assert got.distinct_ids() == {ids[i] for i in range(20) if i != 7} and len(set(ids)) == 20


def test_equal_content_one_transient_one_permanent(broker, topic, tmp_path, monkeypatch):
    HeaderFaults.instances = []
    HeaderFaults.flaky_done = False
    monkeypatch.setattr(confluent_kafka, "Producer", HeaderFaults)
    cfg = _config(broker.bootstrap, str(tmp_path), topic, ack_timeout_s=60, name="eq", retry_backoff_s=0.01,
                  delivery_engine="python")
    hdr = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
    batch = pa.RecordBatch.from_pydict({
        "key": [b"k", b"k", b"other"], "value": [b"same", b"same", b"v"],
        "headers": pa.array([[{"key": "flaky", "value": b"1"}], [{"key": "bad", "value": b"1"}], []], hdr),
    })
    report = write_partition(cfg, 1, 0, 0, iter([batch]))
    ids = ids_of("eq", "", 1, 0, [batch], topic)
    assert len(set(ids)) == 3
    assert [rid for rid, _e, _t in report.dead_letters] == [ids[1]]
    assert (report.acked, report.dead_lettered, report.pending) == (2, 1, 0)
    got = read_topic(broker.bootstrap, topic, expected=2)
    assert {ids[0], ids[2]} <= got.distinct_ids() and ids[1] not in got.distinct_ids()
