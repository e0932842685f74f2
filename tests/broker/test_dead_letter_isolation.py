"""Tier 2: only the records that really fail alone are dead-lettered.

The broker's own refusals first (a topic's ``max.message.bytes``, a keyless
record on a compacted topic: Apache Kafka fails the whole produce batch that
holds one), on both delivery engines; then failures the broker cannot be made
to give on demand (a transient one on a record equal to a permanent one), from
producers wrapping the real one (fake_clients.py, the Python engine).
"""

from __future__ import annotations

import time
import uuid

import confluent_kafka
import pyarrow as pa
import pytest

from spark_recoverable_sink.native import library
from spark_recoverable_sink.task.writer import write_partition

from ..kafka_helpers import create_topic, read_topic
from ..record_ids import ids_of
from .fake_clients import BatchLevelError, HeaderFaults
from .test_publisher import _config

pytestmark = pytest.mark.broker

ENGINES = ["python", pytest.param("native", marks=pytest.mark.skipif(
    not library.available(), reason=f"the native extension is not built here: {library.why_unavailable()}"))]


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("refusal", ["too_large", "keyless_on_compacted", "future_timestamp"])
def test_a_record_the_broker_refuses_is_dead_lettered_alone(broker, tmp_path, engine, refusal):
    """Apache Kafka refuses a whole batch for one record in it: only that record is dead-lettered, with its reason.

    ``future_timestamp``: a topic accepting timestamps at most an hour ahead,
    one record two hours ahead: INVALID_TIMESTAMP for its whole request,
    which before delivery/codes.py classified it was retried every backoff
    for as long as the sink ran.
    """
    topic = f"refuse-{uuid.uuid4().hex[:8]}"
    config = {"too_large": {"max.message.bytes": "2000"}, "keyless_on_compacted": {"cleanup.policy": "compact"},
              "future_timestamp": {"message.timestamp.after.max.ms": "3600000"}}[refusal]
    create_topic(broker.bootstrap, topic, partitions=1, config=config)
    keys: list[bytes | None] = [b"k%d" % i for i in range(200)]
    values = [b"good-%03d" % i for i in range(200)]
    columns: dict[str, pa.Array] = {}
    if refusal == "too_large":
        values[77] = b"B" * 5000  # over the topic's limit, under the client's own message.max.bytes
    elif refusal == "keyless_on_compacted":
        keys[77] = None  # a compacted topic takes keyed records only
    else:
        now_ms = int(time.time() * 1000)
        stamps = [now_ms] * 200
        stamps[77] = now_ms + 2 * 3600 * 1000
        columns["timestamp"] = pa.array(stamps, pa.int64())
    batch = pa.RecordBatch.from_pydict({"key": pa.array(keys, pa.binary()), "value": values, **columns})
    cfg = _config(broker.bootstrap, str(tmp_path), topic, ack_timeout_s=60, name=f"ref-{engine}",
                  retry_backoff_s=0.01, delivery_engine=engine, kafka_conf={"linger.ms": 50})
    report = write_partition(cfg, 1, 0, 0, iter([batch]))
    ids = ids_of(f"ref-{engine}", "", 1, 0, [batch], topic)
    assert (report.acked, report.dead_lettered, report.pending) == (199, 1, 0), report
    [(rid, error, _t)] = report.dead_letters
    assert rid == ids[77]
    expect = {"too_large": ("too large", "TOO_LARGE"), "keyless_on_compacted": ("INVALID_RECORD", "failed to validate"),
              "future_timestamp": ("INVALID_TIMESTAMP", "timestamp")}[refusal]
    assert any(e.lower() in error.lower() for e in expect), error
    got = read_topic(broker.bootstrap, topic, expected=199)
    assert got.distinct_ids() == {ids[i] for i in range(200) if i != 77}


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
