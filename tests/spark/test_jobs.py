"""Tier 3: templates/stream_to_kafka.py runs for real (in-process, through spark_recoverable_sink.jobs.run_job)."""

from __future__ import annotations

import dataclasses
import json
import os

import pytest

from spark_recoverable_sink import jobs

from ..job_files import load_job
from ..kafka_helpers import read_topic
from ..record_ids import check_ids_per_group, reported_rows

pytestmark = pytest.mark.spark

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


job = load_job("stream_to_kafka", "stream_to_kafka.py")


def test_stream_to_kafka_job_delivers_every_reported_row(spark, broker, topic, tmp_path):
    base = jobs.load_settings(os.path.join(ROOT, "conf/stream_to_kafka.json"), job.Source,
                              environ={"KAFKA_BOOTSTRAP": broker.bootstrap})
    settings = dataclasses.replace(
        base,
        kafka=dataclasses.replace(base.kafka, topic=topic),
        sink=dataclasses.replace(base.sink, name="job-template", wal_dir=str(tmp_path / "wal")),
        source=dataclasses.replace(base.source, rows_per_second=2000, num_partitions=2),
        query=dataclasses.replace(base.query, checkpoint_location=str(tmp_path / "chk"), run_seconds=6.0,
                                  trigger_interval_s=1.0),
    )
    sink = jobs.run_job(settings, job.build_source, spark, environ={"KAFKA_BOOTSTRAP": broker.bootstrap},
                        job="stream_to_kafka")

    reports = list(sink.reports)
    rows = sum(r.rows for r in reports)
    assert len(reports) >= 2 and rows > 0
    assert sum(r.dead_lettered for r in reports) == 0
    expected = reported_rows("job-template", reports)
    assert len({r.run for r in reports}) == 1  # one query: one run
    assert sum(expected.values()) == rows
    got = read_topic(broker.bootstrap, topic, expected=rows)
    # every row the reports count is in the topic once (per (run, batch, partition): as many distinct ids
    # as rows, none twice). A batch the stop interrupted may have delivered rows it never reported;
    check_ids_per_group(got.ids, expected, others=True)
    # every record is still one of the source's rows, key and value agreeing.
    for r in got.records:
        assert json.loads(r.value)["n"] == int(r.key)
