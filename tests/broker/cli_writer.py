"""A worker process for the CLI tests: writes one partition through ``write_partition``, then dies.

Usage: ``python -m tests.broker.cli_writer CONFIG_JSON BATCH PARTITION ROWS``

Its records carry every column a chunk can hold (key, topic, partition,
headers, timestamp), so a replay can be checked field by field (see
:func:`expected`). After ``write_partition`` returns it ends with
``os._exit(0)``: no close, no flush, its slot lock dropped by the kernel. A
test that wants it alive arms a park at ``task.after_commit`` (tests/hooks.py;
the variables come from tests/conftest.py): it then holds its slot until
released.
"""

from __future__ import annotations

import json
import os
import sys

import pyarrow as pa

HEADERS = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
TS0 = 1_700_000_000_000


def expected(topic: str, partition: int, i: int) -> dict:
    """Row ``i`` of a writer's partition: what Kafka must hold for it after a replay."""
    return {"topic": topic, "partition": i % 3, "key": f"{partition}-{i}".encode(),
            "value": f"value-{partition}-{i}".encode(), "headers": [("h", f"{i}".encode())], "timestamp": TS0 + i}


def batches(topic: str, partition: int, rows: int, chunk: int = 500):
    for start in range(0, rows, chunk):
        rs = [expected(topic, partition, i) for i in range(start, min(rows, start + chunk))]
        yield pa.RecordBatch.from_pydict({
            "key": pa.array([r["key"] for r in rs], pa.binary()),
            "value": pa.array([r["value"] for r in rs], pa.binary()),
            "topic": pa.array([r["topic"] for r in rs], pa.string()),
            "partition": pa.array([r["partition"] for r in rs], pa.int32()),
            "headers": pa.array([[{"key": k, "value": v} for k, v in r["headers"]] for r in rs], HEADERS),
            "timestamp": pa.array([r["timestamp"] * 1000 for r in rs], pa.timestamp("us")),
        })


def main() -> None:
    conf_json, batch, partition, rows = sys.argv[1:5]
    from spark_recoverable_sink.config import SinkConfig
    from spark_recoverable_sink.task.writer import write_partition

    opts = json.loads(conf_json)
    topic = opts.pop("records_topic")
    cfg = SinkConfig.build(opts.pop("name"), opts.pop("kafka_conf"), opts.pop("wal_dir"), **opts)
    report = write_partition(cfg, int(batch), int(partition), 0, batches(topic, int(partition), int(rows)),
                             run="r1")
    print(json.dumps(report.to_row()), flush=True)
    os._exit(0)


if __name__ == "__main__":
    main()
