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
