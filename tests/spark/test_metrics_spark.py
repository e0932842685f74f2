"""Tier 3: a sink's batch reports reach its Prometheus endpoint, scraped over HTTP."""

from __future__ import annotations

import re
import urllib.request
import uuid

import pytest

from spark_recoverable_sink import RecoverableKafkaSink

pytestmark = pytest.mark.spark


def _sample(text: str, metric: str, sink: str) -> float:
    m = re.search(rf'^{metric}{{sink="{re.escape(sink)}"}} (\S+)$', text, re.MULTILINE)
    assert m, f"{metric} for sink={sink} not in the scrape"
    return float(m.group(1))


def test_written_batches_are_counted_on_the_endpoint(spark, broker, topic, tmp_path):
    name = f"metrics-{uuid.uuid4().hex[:8]}"  # the metrics registry is process-wide: a name of this test's own
    sink = RecoverableKafkaSink(name, {"bootstrap.servers": broker.bootstrap, "statistics.interval.ms": 200},
                                topic=topic, wal_dir=str(tmp_path / "wal"), metrics_port=0)
    assert sink.metrics_endpoint is not None
    df = spark.range(500).selectExpr("cast(id as string) as key", "cast(id as string) as value")
    reports = [sink.write(df, batch_id=b) for b in (0, 1)]
    try:
        text = urllib.request.urlopen(sink.metrics_endpoint.url, timeout=10).read().decode()
    finally:
        sink.metrics_endpoint.close()  # a port-0 endpoint is shared by the process: leave none behind
    assert _sample(text, "rks_batches_total", name) == 2
    assert _sample(text, "rks_rows_total", name) == 1000 == sum(r.rows for r in reports)
    assert _sample(text, "rks_acked_total", name) == sum(r.acked for r in reports)
    assert _sample(text, "rks_pending_records", name) == reports[-1].pending
    assert _sample(text, "rks_wal_max_bytes", name) == sink.config.max_wal_bytes
    assert f'rks_batch_seconds_count{{sink="{name}"}} 2.0' in text


def test_an_exactly_once_batch_waiting_for_a_lane_is_seen_on_the_endpoint(spark, broker, topic, tmp_path, hooks):
    """A lane's commit is held past its task's deadline (the task returns with its unit pending), the worker's own
    retry is held too, and the driver waits for the lane: a scrape then shows one lane waiting and for how long;
    once the lane commits, none, and the wait in the settle histogram."""
    import threading
    import time

    name = f"eo-metrics-{uuid.uuid4().hex[:8]}"
    sink = RecoverableKafkaSink(name, {"bootstrap.servers": broker.bootstrap}, topic=topic,
                                wal_dir=str(tmp_path / "wal"), metrics_port=0, guarantee="exactly_once",
                                ack_timeout_s=2.0, exactly_once_lanes=1)
    df = spark.range(0, 300, 1, 1).selectExpr("cast(id as string) as key", "cast(id as string) as value")
    committing = hooks.park("eo.committing", batch=0)
    settling = hooks.park("eo.settle_drain", batch=0, round=1)
    done: list[object] = []
    writer = threading.Thread(target=lambda: done.append(sink.write(df, batch_id=0)), daemon=True)
    writer.start()
    idle = None
    try:
        owner = committing.wait(120)["pid"]
        idle = hooks.park("eo.idle_retry", pid=owner, sink=name)
        time.sleep(3.0)  # the task's deadline (ack_timeout_s) passes while its commit is held: not a synchronisation
        committing.release()
        settling.wait(120)  # the driver found the lane uncommitted: it waits
        text = urllib.request.urlopen(sink.metrics_endpoint.url, timeout=10).read().decode()
        assert _sample(text, "rks_eo_lanes_waiting", name) == 1
        assert _sample(text, "rks_eo_wait_seconds", name) > 0
        assert f'rks_eo_settle_seconds_count{{sink="{name}"}} 0.0' in text
    finally:
        for p in (committing, settling, idle):
            if p is not None:
                p.release()
        writer.join(180)
    try:
        assert done and done[0].pending == 300, done  # the task returned with its unit pending
        text = urllib.request.urlopen(sink.metrics_endpoint.url, timeout=10).read().decode()
    finally:
        sink.metrics_endpoint.close()
    assert _sample(text, "rks_eo_lanes_waiting", name) == 0 and _sample(text, "rks_eo_wait_seconds", name) == 0
    assert f'rks_eo_settle_seconds_count{{sink="{name}"}} 1.0' in text
    assert _sample(text, "rks_eo_lanes_opened_total", name) >= 1
    assert _sample(text, "rks_skipped_total", name) == 0
