"""Tier 2: librdkafka statistics in the task reports and the Prometheus endpoint, real broker, no Spark."""

from __future__ import annotations

import re
import time
import urllib.request
import uuid

import pytest

from spark_recoverable_sink.config import SinkConfig
from spark_recoverable_sink.delivery.stats import latest_summary
from spark_recoverable_sink.driver import metrics
from spark_recoverable_sink.report import BatchReport
from spark_recoverable_sink.task.writer import write_partition

from .rows import batches

pytestmark = pytest.mark.broker

_LINE = re.compile(r'^(rks_[a-z_]+)\{sink="([^"]+)"\} (\S+)$')


def _scrape(url: str, sink: str) -> dict[str, float]:
    """The samples of ``sink`` that carry no label but ``sink``, by name, as served over HTTP."""
    with urllib.request.urlopen(url, timeout=10) as resp:
        assert resp.status == 200
        text = resp.read().decode()
    out = {}
    for line in text.splitlines():
        m = _LINE.match(line)
        if m and m.group(2) == sink:
            out[m.group(1)] = float(m.group(3))
    return out


def _wait_for_rtt(name: str, timeout_s: float = 15.0) -> None:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        s = latest_summary(name)
        if s is not None and s.rtt_ms > 0:
            return
        time.sleep(0.05)
    raise AssertionError(f"no librdkafka statistics with a round-trip time for sink={name}: {latest_summary(name)}")


def test_reports_carry_kafka_statistics_and_the_endpoint_serves_them(broker, topic, tmp_path):
    name = f"m-{uuid.uuid4().hex[:8]}"
    cfg = SinkConfig.build(name, {"bootstrap.servers": broker.bootstrap, "statistics.interval.ms": "100"},
                           str(tmp_path), topic=topic, ack_timeout_s=30, metrics_port=0)
    first = write_partition(cfg, 0, 0, 0, batches(0, 2000, 40), run="r1")
    assert first.acked == 2000
    _wait_for_rtt(name)  # the worker's poller serves the statistics between tasks
    acked = write_partition(cfg, 1, 0, 0, batches(0, 3000, 40), run="r1")
    assert (acked.rows, acked.acked, acked.pending) == (3000, 3000, 0)
    assert acked.kafka_rtt_ms > 0 and acked.kafka_queue_msgs >= 0
    assert acked.kafka_txn_state == "Init"  # idempotent, not transactional
    assert acked.wal_bytes == 0  # all acked and pruned before the report

    async_cfg = SinkConfig.build(name, dict(cfg.kafka_conf_items), str(tmp_path), topic=topic, ack_timeout_s=0,
                                 metrics_port=0)
    held = write_partition(async_cfg, 1, 1, 0, batches(1, 2000, 40), run="r1")
    assert held.rows == 2000 and held.acked == 0  # the poller waits for the task: nothing sent yet
    assert held.wal_bytes >= held.bytes > 0  # the whole partition is live in the slot
    assert held.kafka_queue_msgs >= 0 and held.kafka_rtt_ms > 0

    report = BatchReport.from_tasks(1, [acked, held], 1.25, run="r1")
    assert report.wal_bytes == held.wal_bytes  # the acked task left nothing in its slot
    ep = metrics.start(async_cfg)
    try:
        assert ep is not None and ep.port > 0 and ep.requested_port == 0
        assert metrics.serve(0) is ep  # once per process and port
        assert metrics.record_batch(async_cfg, report, 0) is metrics.sink_metrics(name)
        assert metrics.serve(0) is ep
        got = _scrape(ep.url, name)
        expect = {
            "rks_batches_total": 1, "rks_rows_total": 5000, "rks_bytes_total": acked.bytes + held.bytes,
            "rks_acked_total": 3000, "rks_retried_total": report.retried, "rks_dead_lettered_total": 0,
            "rks_dead_letters_reported_total": 0, "rks_replayed_total": 0, "rks_pending_records": 2000,
            "rks_wal_bytes": held.wal_bytes, "rks_wal_slot_bytes_max": held.wal_bytes,
            "rks_wal_max_bytes": cfg.max_wal_bytes, "rks_problems": 0, "rks_batch_seconds_count": 1,
            "rks_batch_seconds_sum": 1.25, "rks_kafka_queue_messages": max(acked.kafka_queue_msgs,
                                                                           held.kafka_queue_msgs),
            "rks_kafka_rtt_avg_seconds": (acked.kafka_rtt_ms + held.kafka_rtt_ms) / 2000,
            "rks_kafka_rtt_max_seconds": max(acked.kafka_rtt_ms, held.kafka_rtt_ms) / 1000,
        }
        assert {n: got.get(n) for n in expect} == pytest.approx(expect)
        assert time.time() - got["rks_last_batch_timestamp_seconds"] < 60
        # a second sink of the same driver shows on the same endpoint, under its own label
        other = f"o-{uuid.uuid4().hex[:8]}"
        metrics.record_batch(other, BatchReport.from_tasks(0, [acked], 0.5), 0)
        assert _scrape(ep.url, other)["rks_rows_total"] == 3000
        assert _scrape(ep.url, name)["rks_rows_total"] == 5000
    finally:
        if ep is not None:
            ep.close()
    assert metrics.serve(0) is not ep  # closed: a new call binds again
    metrics.serve(0).close()
