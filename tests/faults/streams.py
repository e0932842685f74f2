"""Source rows and streaming queries: parquet source files, writer-program rows, ``foreachBatch`` probes."""

from __future__ import annotations

import os
import time
from typing import Any, Callable


def row_value(i: int, size: int) -> bytes:
    return (b"row-%d:" % i).ljust(size, b"x")


def unit_batches(first: int, rows: int, value_size: int, chunk: int = 1000):
    """Arrow batches of rows ``first .. first+rows-1`` (key = row number, value = :func:`row_value`)."""
    import pyarrow as pa

    for lo in range(first, first + rows, chunk):
        hi = min(first + rows, lo + chunk)
        yield pa.RecordBatch.from_pydict({
            "key": pa.array([str(i).encode() for i in range(lo, hi)], pa.binary()),
            "value": pa.array([row_value(i, value_size) for i in range(lo, hi)], pa.binary()),
        })


def write_source(directory: str, n_rows: int, n_files: int, value_size: int = 200, start: int = 0,
                 sizes: dict[int, int] | None = None) -> list[str]:
    """Parquet files of rows ``start .. start+n_rows-1``: key = row number (string), value = padded bytes.

    ``sizes`` overrides the value size of chosen rows (e.g. a poison record).
    """
    sizes = sizes or {}
    import pyarrow as pa
    import pyarrow.parquet as pq

    os.makedirs(directory, exist_ok=True)
    per = -(-n_rows // n_files)
    paths = []
    for f in range(n_files):
        lo, hi = start + f * per, min(start + n_rows, start + (f + 1) * per)
        if lo >= hi:
            break
        keys = [str(i) for i in range(lo, hi)]
        vals = [row_value(i, sizes.get(i, value_size)) for i in range(lo, hi)]
        table = pa.table({"key": pa.array(keys, pa.string()), "value": pa.array(vals, pa.binary())})
        path = os.path.join(directory, f"part-{lo:09d}.parquet")
        tmp = os.path.join(directory, f".part-{lo:09d}.tmp")
        pq.write_table(table, tmp)
        os.replace(tmp, path)
        paths.append(path)
    return paths


SOURCE_SCHEMA = "key string, value binary"


class BatchProbe:
    """``foreachBatch`` function wrapping a sink; notes when each batch starts and ends (driver side)."""

    def __init__(self, sink: Any, record_rows: bool = False) -> None:
        """With ``record_rows`` it also notes the row numbers (keys) each batch held."""
        self.sink = sink
        self.record_rows = record_rows
        self.rows: dict[int, list[int]] = {}
        self.current: int | None = None
        self.started: dict[int, float] = {}
        self.ended: dict[int, float] = {}
        self.calls: list[int] = []
        self.errors: list[tuple[int, str]] = []

    def __call__(self, df: Any, batch_id: int) -> None:
        self.current = batch_id
        self.calls.append(batch_id)
        self.started[batch_id] = time.time()
        if self.record_rows:
            self.rows[batch_id] = [int(r.key) for r in df.select("key").collect()]
        try:
            self.sink(df, batch_id)
        except BaseException as exc:
            self.errors.append((batch_id, f"{type(exc).__name__}: {str(exc).splitlines()[0][:300] if str(exc) else ''}"))
            raise
        finally:
            self.ended[batch_id] = time.time()
            self.current = None


def start_stream(spark: Any, src: str, fn: Callable, checkpoint: str, files_per_trigger: int = 1,
                 available_now: bool = True) -> Any:
    stream = (spark.readStream.schema(SOURCE_SCHEMA).option("maxFilesPerTrigger", files_per_trigger)
              .parquet(src))
    w = stream.writeStream.foreachBatch(fn).option("checkpointLocation", checkpoint)
    w = w.trigger(availableNow=True) if available_now else w.trigger(processingTime="500 milliseconds")
    return w.start()


def sink_reports(sink: Any) -> list[Any]:
    return list(sink.reports)


def task_reports(sink: Any) -> list[Any]:
    return [p for r in sink.reports for p in r.task_reports]
