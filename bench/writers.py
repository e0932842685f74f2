"""The baseline writers, as ``mapInArrow`` functions, and the warm-up wrapper.

* :class:`NoopWriter` -- the floor of the latency benchmark: reads its rows,
  writes nothing (what a micro-batch costs before any Kafka work).
* :class:`RawWriter` -- the ceiling: produces every row with confluent-kafka,
  no delivery callback at all, ``flush()`` at the end of the partition (or,
  ``end="poll"``, polling until every record is acked, as the sink ends a task).
* :class:`FlushWriter` -- what Spark's built-in Kafka sink does, written in
  Python (it stands in for the built-in sink, which is not in the benchmark
  yet; its jars can now be fetched, devtools/jvm.py): a delivery callback per record that keeps the first error, a check
  for that error before each send, ``flush()`` at the end of the partition and
  an error check after it; fails the task on the first error.
  With ``id_header`` set it also sends a per-record id header shaped like
  the sink's (``{name: b"<sink>:<run>:<batch>:<partition>:<16 hex>-<occ>"}``,
  the row number standing in for the content fingerprint, occurrence 0):
  the same baseline carrying the same header bytes, built per record in
  Python as confluent-kafka needs it, to separate the header's cost from the
  WAL's.

Both produce exactly like the sink's Python engine's produce loop does: one ``produce`` call
per row with ``(topic, value, key)``, ``poll(0)`` once per Arrow batch to
serve delivery reports, ``poll(0.05)`` and retry when the local queue is full.
The producer is created once per worker process and run (like the sink's
per-process runtime), with :func:`bench.common.producer_conf` settings.

:class:`Prepare` is the untimed warm-up task run before every timed write: it
closes whatever earlier runs left in the worker process (sink runtimes and
their poller threads, cached producers) and then writes a few rows with the
writer about to be timed, so that every timed run starts with a connected
producer (and, for the sink, an open WAL slot) and no leftovers.

:class:`EngineProbe` asks, in the worker processes, which delivery engine a
sink configuration gets there (the benchmark records it and refuses to time
a sink writer on an engine it did not ask for).
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


class RawWriter:
    """The ceiling: produce every row, no delivery callback; at the end of the partition, wait for every ack.

    ``end="flush"``: ``flush()``, as Spark's Kafka sink and the flush-writer
    end a task (librdkafka sends what lingers at once). ``end="poll"``:
    ``poll(0.05)`` until nothing is left in the producer's queue, as the
    sink's sync task waits for its last acks (the last batch waits its
    ``linger.ms``): the same loop, two endings, to measure what the ending costs.
    """

    ddl = REPORT_DDL

    def __init__(self, conf: dict[str, str], topic: str, flush_timeout_s: float = 600.0, end: str = "flush") -> None:
        if end not in ("flush", "poll"):
            raise ValueError(f"end must be 'flush' or 'poll', got {end!r}")
        self.conf = dict(conf)
        self.topic = topic
        self.flush_timeout_s = flush_timeout_s
        self.end = end

    def __call__(self, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        t0 = time.monotonic()
        p = _producer(self.conf, self.topic)
        produce, poll, topic = p.produce, p.poll, self.topic
        rows = 0
        for b in batches:
            keys = b.column("key").to_pylist()
            values = b.column("value").to_pylist()
            for k, v in zip(keys, values):
                while True:
                    try:
                        produce(topic, v, k)
                        break
                    except BufferError:
                        poll(0.05)
            rows += len(values)
            poll(0)
        if self.end == "flush":
            unflushed = p.flush(self.flush_timeout_s)
        else:  # the sink's ending: poll until every record is acked (or the bound)
            end = time.monotonic() + self.flush_timeout_s
            while len(p) and time.monotonic() < end:
                poll(0.05)
            unflushed = len(p)
        yield _report(rows, unflushed, time.monotonic() - t0)


class FlushWriter:
    """Spark's built-in Kafka sink in Python: a callback per record, fail on the first error."""

    ddl = REPORT_DDL

    def __init__(self, conf: dict[str, str], topic: str, flush_timeout_s: float = 600.0,
                 id_header: str | None = None, id_prefix: bytes = b"") -> None:
        self.conf = dict(conf)
        self.topic = topic
        self.flush_timeout_s = flush_timeout_s
        self.id_header = id_header
        self.id_prefix = id_prefix

    def __call__(self, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from confluent_kafka import KafkaException
        from pyspark import TaskContext

        t0 = time.monotonic()
        p = _producer(self.conf, self.topic)
        produce, poll, topic = p.produce, p.poll, self.topic
        failed: list[Any] = []  # the first delivery error, as Spark's KafkaDataWriter keeps it

        def on_delivery(err: Any, _msg: Any) -> None:
            if err is not None and not failed:
                failed.append(err)

        idh = self.id_header
        ctx = TaskContext.get()
        prefix = self.id_prefix + b"%d:" % (ctx.partitionId() if ctx is not None else 0)
        rows = 0
        for b in batches:
            keys = b.column("key").to_pylist()
            values = b.column("value").to_pylist()
            for i, (k, v) in enumerate(zip(keys, values), rows):
                if failed:  # checkForErrors() before each send
                    raise KafkaException(failed[0])
                while True:
                    try:
                        if idh is None:
                            produce(topic, v, k, on_delivery=on_delivery)
                        else:  # <prefix><16 hex digits>-<occurrence>, like the sink's content ids
                            produce(topic, v, k, on_delivery=on_delivery, headers={idh: b"%b%016x-0" % (prefix, i)})
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


class NoopWriter:
    """The floor: reads every row of the partition (as Arrow batches) and writes nothing."""

    ddl = REPORT_DDL

    def __call__(self, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        t0 = time.monotonic()
        rows = sum(b.num_rows for b in batches)
        yield _report(rows, 0, time.monotonic() - t0)


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
