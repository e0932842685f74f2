"""Tier 2: the native and the Python delivery engines ack, fail and dead-letter the same records for the same input."""

from __future__ import annotations

import uuid

import pyarrow as pa
import pytest

from spark_recoverable_sink.config import SinkConfig
from spark_recoverable_sink.native import library
from spark_recoverable_sink.schema import HEADERS_TYPE
from spark_recoverable_sink.task.runtime import get_runtime
from spark_recoverable_sink.task.writer import write_partition

from ..kafka_helpers import create_topic, read_topic

pytestmark = [pytest.mark.broker, pytest.mark.skipif(
    not library.available(), reason=f"the native extension is not built here: {library.why_unavailable()}")]


def _input() -> list[pa.RecordBatch]:
    """Good rows (equal ones among them), one too large, one for a partition the topic does not have."""
    rows = []
    for i in range(300):
        row = {"key": f"k{i % 50}".encode(), "value": f"v{i % 250}".encode() * 3, "partition": None,
               "headers": [{"key": "h", "value": f"{i % 7}".encode()}] if i % 5 == 0 else None,
               "timestamp": 1_700_000_000_000 + (i % 250)}
        if i == 120:
            row["value"] = b"x" * 30_000  # over message.max.bytes
        if i == 200:
            row["partition"] = 7  # the topic has 3
        rows.append(row)
    schema = pa.schema([("key", pa.binary()), ("value", pa.binary()), ("partition", pa.int32()),
                        ("headers", HEADERS_TYPE), ("timestamp", pa.timestamp("ms"))])
    return [pa.RecordBatch.from_pylist(rows[i:i + 100], schema=schema) for i in range(0, 300, 100)]


def _run(bootstrap: str, engine: str, tmp_path) -> dict:
    topic = f"eng-{engine}-{uuid.uuid4().hex[:6]}"
    create_topic(bootstrap, topic, partitions=3)
    cfg = SinkConfig.build("engines", {"bootstrap.servers": bootstrap, "message.max.bytes": 20_000},
                           str(tmp_path / engine), topic=topic, ack_timeout_s=30, delivery_engine=engine)
    rep = write_partition(cfg, 1, 0, 0, iter(_input()), run="cmp")
    dead = sorted((d.record_id, d.error_code) for _k, d in get_runtime(cfg).wal.dead_letters())
    got = read_topic(bootstrap, topic, expected=rep.acked)
    records = sorted((r.rid, r.key, r.value, r.partition, tuple(r.headers)) for r in got.records)
    return {"acked": rep.acked, "dead_lettered": rep.dead_lettered, "pending": rep.pending, "dead": dead,
            "records": records}


def test_both_engines_ack_and_dead_letter_the_same_records(broker, tmp_path):
    native, python = _run(broker.bootstrap, "native", tmp_path), _run(broker.bootstrap, "python", tmp_path)
    assert (native["acked"], native["dead_lettered"], native["pending"]) == (298, 2, 0)
    assert native["dead"] == python["dead"] and len(native["dead"]) == 2
    assert native["records"] == python["records"] and len({r[0] for r in native["records"]}) == 298
    assert (python["acked"], python["dead_lettered"], python["pending"]) == (298, 2, 0)
