"""What runs in Spark's Python workers for the benchmark: the baseline writer, the engine probe, the warm-up.

* :class:`FlushWriter` -- the plain baseline, a ``mapInArrow`` function: a
  confluent-kafka produce loop without the WAL and without the sink's
  header, written as Spark's own Kafka sink works: a delivery callback per
  record that keeps the first error, a check for it before each send,
  ``flush()`` at the end of the partition and a check after it; it fails the
  task on the first error. One ``produce(topic, value, key)`` per row,
  ``poll(0)`` once per Arrow batch, ``poll(0.05)`` and retry when the local
  queue is full: the sink's Python engine's loop. Its producer is created once
  per worker process and run, with :func:`bench.common.producer_conf`.
* :class:`EngineProbe` -- which delivery engine a sink configuration gets in
  a worker process (the benchmark refuses to time a sink writer on an engine
  it did not ask for).
* :class:`Prepare` -- the untimed warm-up task before every timed write: it
  closes what earlier runs left in the worker (sink runtimes and their
  poller threads, cached producers), then writes a few rows with the writer
  about to be timed, so that every timed run starts connected.
"""

from __future__ import annotations

import os
import time
from typing import Any, Callable, Iterable, Iterator

import pyarrow as pa

#: Output of the baseline writers: one row per partition.
REPORT_DDL = "rows long, unflushed long, seconds double, pid long"
_REPORT_SCHEMA = pa.schema([("rows", pa.int64()), ("unflushed", pa.int64()), ("seconds", pa.float64()),
                            ("pid", pa.int64())])

_PRODUCERS: dict[tuple, Any] = {}  # this worker process's producers, by (conf, run key)


def _producer(conf: dict[str, str], run_key: str) -> Any:
    from confluent_kafka import Producer

    key = (tuple(sorted(conf.items())), run_key)
    p = _PRODUCERS.get(key)
    if p is None:
        p = _PRODUCERS[key] = Producer(dict(conf))
    return p


def _report(rows: int, unflushed: int, seconds: float) -> pa.RecordBatch:
    return pa.RecordBatch.from_pylist(
        [{"rows": rows, "unflushed": unflushed, "seconds": seconds, "pid": os.getpid()}], schema=_REPORT_SCHEMA)


class FlushWriter:
    """The plain baseline, as Spark's own Kafka sink writes: a callback per record, fail on the first error.

    Raises (in the task):
        KafkaException: a delivery failed.
        RuntimeError: records were still unsent after ``flush_timeout_s``.
    """

    ddl = REPORT_DDL

    def __init__(self, conf: dict[str, str], topic: str, flush_timeout_s: float = 600.0) -> None:
        self.conf = dict(conf)
        self.topic = topic
        self.flush_timeout_s = flush_timeout_s

    def __call__(self, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from confluent_kafka import KafkaException

        t0 = time.monotonic()
        p = _producer(self.conf, self.topic)
        produce, poll, topic = p.produce, p.poll, self.topic
        failed: list[Any] = []  # the first delivery error, as Spark's KafkaDataWriter keeps it

        def on_delivery(err: Any, _msg: Any) -> None:
            if err is not None and not failed:
                failed.append(err)

        rows = 0
        for b in batches:
            keys = b.column("key").to_pylist()
            values = b.column("value").to_pylist()
            for k, v in zip(keys, values):
                if failed:  # checkForErrors() before each send
                    raise KafkaException(failed[0])
                while True:
                    try:
                        produce(topic, v, k, on_delivery=on_delivery)
                        break
                    except BufferError:
                        poll(0.05)
            rows += len(values)
            poll(0)
        unflushed = p.flush(self.flush_timeout_s)
        if failed:
            raise KafkaException(failed[0])
        if unflushed:
            raise RuntimeError(f"{unflushed} records not delivered within {self.flush_timeout_s}s")
        yield _report(rows, unflushed, time.monotonic() - t0)


class EngineProbe:
    """Which delivery engine a sink configuration gets in this worker process (and why)."""

    ddl = "pid long, engine string, why string"
    _schema = pa.schema([("pid", pa.int64()), ("engine", pa.string()), ("why", pa.string())])

    def __init__(self, config: Any, hold_s: float = 0.05) -> None:
        self.config = config
        self.hold_s = hold_s  # so that concurrent probe tasks land on different worker processes

    def __call__(self, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from spark_recoverable_sink.delivery.engine import choose

        for _ in batches:
            pass
        time.sleep(self.hold_s)
        try:
            name, why = choose(self.config)
        except ImportError as exc:  # delivery_engine="native" where the extension cannot load
            name, why = "unavailable", str(exc)
        yield pa.RecordBatch.from_pylist([{"pid": os.getpid(), "engine": name, "why": why}], schema=self._schema)


class Prepare:
    """Untimed warm-up task: drop earlier runs' leftovers in this worker, then run ``inner``.

    ``hold_s`` keeps the task busy a little so that concurrent warm-up tasks
    land on different worker processes (each worker gets warmed up).
    """

    def __init__(self, inner: Callable[[Iterable[pa.RecordBatch]], Iterator[pa.RecordBatch]],
                 hold_s: float = 0.3) -> None:
        self.inner = inner
        self.hold_s = hold_s

    def __call__(self, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from spark_recoverable_sink.task.runtime import reset_runtimes

        reset_runtimes()  # earlier runs' sink runtimes: everything is acked by now (checked by the driver)
        for p in _PRODUCERS.values():
            p.flush(30)
        _PRODUCERS.clear()
        time.sleep(self.hold_s)
        yield from self.inner(batches)
