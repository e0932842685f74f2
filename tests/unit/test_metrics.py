"""Tier 1: librdkafka statistics summaries, report aggregates and the Prometheus metrics (no broker, no port)."""

from __future__ import annotations

import copy
import json
import logging
import math
import sys
import uuid

import pytest

from spark_recoverable_sink.config import SinkConfig
from spark_recoverable_sink.delivery import stats as kstats
from spark_recoverable_sink.delivery.client import ProducerSlot
from spark_recoverable_sink.driver import metrics
from spark_recoverable_sink.errors import ConfigError
from spark_recoverable_sink.report import BatchReport, TaskReport


def _rtt(avg_us: int, cnt: int) -> dict:
    return {"min": avg_us // 2 if cnt else 0, "max": avg_us * 2 if cnt else 0, "avg": avg_us, "sum": avg_us * cnt,
            "stddev": 120 if cnt else 0, "p50": avg_us, "p75": avg_us, "p90": avg_us, "p95": avg_us, "p99": avg_us,
            "p99_99": avg_us, "outofrange": 0, "hdrsize": 13424, "cnt": cnt}


def _broker(name: str, nodeid: int, source: str, rtt: dict) -> dict:
    return {"name": name, "nodeid": nodeid, "nodename": name.rsplit("/", 1)[0], "source": source, "state": "UP",
            "stateage": 348807, "outbuf_cnt": 0, "outbuf_msg_cnt": 0, "waitresp_cnt": 1, "waitresp_msg_cnt": 120,
            "tx": 14, "txbytes": 58231, "txerrs": 0, "txretries": 0, "req_timeouts": 0, "rx": 13, "rxbytes": 1650,
            "rxerrs": 0, "connects": 1, "disconnects": 0, "rtt": rtt, "req": {"Produce": 11, "Metadata": 2},
            "toppars": {"orders-0": {"topic": "orders", "partition": 0}}}


# The shape librdkafka 2.x emits (taken from a real document of an idempotent producer, trimmed, with a
# second learned broker, the bootstrap entry and the transactional state of a lane producer).
SAMPLE = {
    "name": "rdkafka#producer-2", "client_id": "rdkafka", "type": "producer", "ts": 1041498722,
    "time": 1795429112, "age": 401057, "replyq": 0, "msg_cnt": 500, "msg_size": 50000, "msg_max": 100000,
    "msg_size_max": 1073741824, "simple_cnt": 0, "metadata_cache_cnt": 1,
    "brokers": {
        "10.0.0.5:9092/bootstrap": _broker("10.0.0.5:9092/bootstrap", -1, "configured", _rtt(0, 0)),
        "10.0.0.5:9092/1": _broker("10.0.0.5:9092/1", 1, "learned", _rtt(616, 3)),
        "10.0.0.6:9092/2": _broker("10.0.0.6:9092/2", 2, "learned", _rtt(1384, 5)),
    },
    "topics": {"orders": {"topic": "orders", "age": 400, "metadata_age": 399, "partitions": {}}},
    "tx": 14, "tx_bytes": 58231, "rx": 13, "rx_bytes": 1650, "txmsgs": 380, "txmsg_bytes": 38000,
    "rxmsgs": 0, "rxmsg_bytes": 0,
    "eos": {"idemp_state": "Assigned", "idemp_stateage": 399, "txn_state": "InTransaction", "txn_stateage": 12,
            "txn_may_enq": True, "producer_id": 4001, "producer_epoch": 0, "epoch_cnt": 1},
}


def _idle(sample: dict) -> dict:
    """The next window of an idle producer: no round trips, nothing queued."""
    doc = copy.deepcopy(sample)
    doc["msg_cnt"] = 0
    for b in doc["brokers"].values():
        b["rtt"] = _rtt(0, 0)
    return doc


def test_summary_of_a_realistic_document():
    s = kstats.summarize(json.dumps(SAMPLE))
    assert s.queue_msgs == 500
    assert s.rtt_ms == pytest.approx((0.616 + 1.384) / 2)  # brokers without round trips do not count
    assert s.txn_state == "InTransaction"


def test_an_idle_window_keeps_the_last_round_trip_time():
    first = kstats.summarize(SAMPLE)
    idle = kstats.summarize(_idle(SAMPLE), first)
    assert (idle.queue_msgs, idle.rtt_ms, idle.txn_state) == (0, first.rtt_ms, "InTransaction")
    assert kstats.summarize(_idle(SAMPLE)).rtt_ms == kstats.UNKNOWN  # nothing measured yet
    no_eos = {k: v for k, v in SAMPLE.items() if k != "eos"}
    assert kstats.summarize(no_eos).txn_state == ""


@pytest.mark.parametrize("bad", ["not json", "[1, 2]", json.dumps({"brokers": {}}), json.dumps({"msg_cnt": "x"})])
def test_unreadable_documents_are_refused(bad):
    with pytest.raises(ValueError):
        kstats.summarize(bad)


def test_the_callback_never_raises_and_never_logs_the_document(caplog):
    holder = kstats.KafkaStats("s")
    holder.on_stats(json.dumps(SAMPLE))
    good = holder.latest()
    with caplog.at_level(logging.WARNING):
        holder.on_stats("{sasl.password=hunter2")  # not JSON
        holder.on_stats(None)
    assert holder.latest() == good and holder.errors == 2
    assert caplog.records and "hunter2" not in caplog.text


def test_the_producer_factory_adds_the_callback_only_when_statistics_are_enabled(tmp_path):
    name = f"st-{uuid.uuid4().hex[:8]}"
    seen: list[dict] = []
    for interval, expect in ((None, False), ("0", False), ("250", True)):
        conf = {"bootstrap.servers": "127.0.0.1:9"} | ({"statistics.interval.ms": interval} if interval else {})
        slot = ProducerSlot(SinkConfig.build(name, conf, str(tmp_path)), lambda err: None, factory=seen.append)
        slot.get()
        assert ("stats_cb" in seen[-1]) is expect
    assert kstats.latest_summary(name) is None
    seen[-1]["stats_cb"](json.dumps(SAMPLE))  # what librdkafka calls from poll()
    assert kstats.latest_summary(name).queue_msgs == 500


def _part(p: int, slot: str, wal: int, queue: int = -1, rtt: float = -1.0, txn: str = "", **kw) -> TaskReport:
    base = dict(origin=p, spark_attempt=0, rows=100, bytes=1000, acked=90, pending=10, retried=2,
                dead_lettered=0, replayed=0, seconds=0.5, pid=1, slot=slot, wal_bytes=wal,
                kafka_queue_msgs=queue, kafka_rtt_ms=rtt, kafka_txn_state=txn)
    return TaskReport(**(base | kw))


def test_report_rows_carry_the_new_fields_and_the_batch_aggregates_them():
    p = _part(0, "h:/w/slot-00000", 5000, 7, 1.5, "Init")
    assert TaskReport.from_row(p.to_row()) == p
    r = BatchReport.from_tasks(3, [p, _part(1, "h:/w/slot-00000", 3000, 2, 2.5, "Init"),
                                        _part(2, "h:/w/slot-00001", 800, 0, 0.5, "Ready")], 1.0)
    assert (r.wal_bytes, r.wal_slot_bytes_max) == (5800, 5000)  # each slot once, its largest figure
    assert (r.kafka_queue_msgs_max, r.kafka_rtt_ms_max, r.kafka_txn_states) == (7, 2.5, ("Init", "Ready"))
    assert r.kafka_rtt_ms_avg == pytest.approx(1.5)
    assert "wal_bytes=5800" in r.log_line() and "kafka_queue_msgs_max=7" in r.log_line()
    none = BatchReport.from_tasks(4, [_part(0, "s", 0)], 1.0)
    assert (none.kafka_queue_msgs_max, none.kafka_rtt_ms_avg, none.kafka_rtt_ms_max) == (-1, -1.0, -1.0)
    assert "kafka_" not in none.log_line()


def _value(name: str, sink: str, **labels: str) -> float | None:
    return metrics.registry().get_sample_value(name, {"sink": sink, **labels})


def test_observe_updates_the_named_metrics_per_sink():
    a, b = f"a-{uuid.uuid4().hex[:8]}", f"b-{uuid.uuid4().hex[:8]}"
    ma, mb = metrics.sink_metrics(a, max_wal_bytes=1 << 30), metrics.sink_metrics(b)
    assert metrics.sink_metrics(a) is ma
    assert _value("rks_rows_total", a) == 0.0 and _value("rks_kafka_queue_messages", a) is None
    r1 = BatchReport.from_tasks(1, [_part(0, "s0", 4096, 12, 3.0, "Init", dead_lettered=1,
                                               dead_letters=(("a:r:1:0:5", "too large", "t1"),), replayed=4),
                                         _part(1, "s1", 1024, 3, 1.0, "Init")], 2.0)
    ma.observe(r1)
    ma.observe(BatchReport.from_tasks(2, [_part(0, "s0", 0, pending=0)], 0.2))
    expect = {"rks_batches_total": 2, "rks_rows_total": 300, "rks_bytes_total": 3000, "rks_acked_total": 270,
              "rks_retried_total": 6, "rks_dead_lettered_total": 1, "rks_dead_letters_reported_total": 1,
              "rks_replayed_total": 4, "rks_pending_records": 0, "rks_wal_bytes": 0, "rks_wal_slot_bytes_max": 0,
              "rks_wal_max_bytes": 1 << 30, "rks_problems": 0, "rks_batch_seconds_count": 2,
              "rks_batch_seconds_sum": 2.2}
    assert {n: _value(n, a) for n in expect} == pytest.approx(expect)
    assert _value("rks_batch_seconds_bucket", a, le="0.25") == 1.0
    assert _value("rks_last_batch_timestamp_seconds", a) > 1.7e9
    # the second batch had no statistics: the kafka series say "unknown", not the first batch's figures
    assert all(math.isnan(_value(n, a)) for n in
               ("rks_kafka_queue_messages", "rks_kafka_rtt_avg_seconds", "rks_kafka_rtt_max_seconds"))
    ma.observe(r1)
    assert _value("rks_kafka_queue_messages", a) == 12
    assert _value("rks_kafka_rtt_avg_seconds", a) == pytest.approx(0.002)
    assert _value("rks_kafka_rtt_max_seconds", a) == pytest.approx(0.003)
    assert (_value("rks_wal_bytes", a), _value("rks_wal_slot_bytes_max", a)) == (5120, 4096)
    # the other sink is untouched
    assert _value("rks_rows_total", b) == 0.0 and _value("rks_batches_total", b) == 0.0
    assert _value("rks_wal_max_bytes", b) is None
    mb.observe(r1)
    assert _value("rks_rows_total", b) == 200 and _value("rks_rows_total", a) == 500


def test_every_documented_name_is_exposed():
    from prometheus_client import generate_latest

    name = f"n-{uuid.uuid4().hex[:8]}"
    metrics.sink_metrics(name, 1 << 20).observe(BatchReport.from_tasks(0, [_part(0, "s", 1, 1, 1.0)], 0.1))
    text = generate_latest(metrics.registry()).decode()
    histograms = {f for f, kind, _ in metrics.FAMILIES if kind == "histogram"}
    for n in metrics.METRIC_NAMES:
        suffix = "_count" if n in histograms else ""
        assert f'{n}{suffix}{{sink="{name}"}}' in text, n


def test_record_batch_without_a_port_only_feeds_sinks_that_already_have_metrics(tmp_path):
    cfg = SinkConfig.build(f"r-{uuid.uuid4().hex[:8]}", {"bootstrap.servers": "127.0.0.1:9"}, str(tmp_path))
    report = BatchReport.from_tasks(0, [_part(0, "s", 1)], 0.1)
    assert metrics.record_batch(cfg, report) is None
    assert _value("rks_rows_total", cfg.name) is None  # nothing created, nothing served
    assert metrics.start(cfg) is None
    m = metrics.sink_metrics(cfg.name)
    assert metrics.record_batch(cfg, report) is m  # by config or by name
    assert metrics.record_batch(cfg.name, report) is m
    assert _value("rks_rows_total", cfg.name) == 200
    assert _value("rks_wal_max_bytes", cfg.name) == cfg.max_wal_bytes


@pytest.mark.parametrize("port", [-1, 65536, True, "9100", 1.5])
def test_bad_ports_are_refused(tmp_path, port):
    with pytest.raises(ConfigError, match="metrics_port"):
        SinkConfig.build("p", {"bootstrap.servers": "127.0.0.1:9"}, str(tmp_path), metrics_port=port)
    with pytest.raises(ConfigError, match="metrics_port"):
        metrics.serve(port)


def test_metrics_port_is_a_driver_option_outside_the_runtime_key(tmp_path):
    conf = {"bootstrap.servers": "127.0.0.1:9"}
    a = SinkConfig.build("k", conf, str(tmp_path), metrics_port=0)
    b = SinkConfig.build("k", conf, str(tmp_path))
    assert a.metrics_port == 0 and a == b and hash(a) == hash(b)


def test_a_missing_prometheus_client_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "prometheus_client", None)  # import fails
    with pytest.raises(ConfigError, match=r'pip install "spark-recoverable-sink\[metrics\]"'):
        metrics._prometheus()
