"""The rows the broker tier's writer programs write (tests/programs/writer_proc.py, cli_writer.py) and expect back."""

from __future__ import annotations

import pyarrow as pa

HEADERS = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
TS0 = 1_700_000_000_000


def batches(partition: int, rows: int, size: int, chunk: int = 1000):
    """``writer_proc``'s rows: key ``<partition>-<i>``, value of ``size`` bytes."""
    for start in range(0, rows, chunk):
        n = min(chunk, rows - start)
        ids = range(start, start + n)
        yield pa.RecordBatch.from_pydict({
            "key": [f"{partition}-{i}".encode() for i in ids],
            "value": [(f"{partition}-{i}-".encode() + b"x" * size)[:max(size, 1)] for i in ids],
        })


def expected(topic: str, partition: int, i: int) -> dict:
    """Row ``i`` of a ``cli_writer`` partition: what Kafka must hold for it after a replay."""
    return {"topic": topic, "partition": i % 3, "key": f"{partition}-{i}".encode(),
            "value": f"value-{partition}-{i}".encode(), "headers": [("h", f"{i}".encode())], "timestamp": TS0 + i}


def cli_batches(topic: str, partition: int, rows: int, chunk: int = 500):
    """``cli_writer``'s rows: every column a chunk can hold (key, topic, partition, headers, timestamp)."""
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
