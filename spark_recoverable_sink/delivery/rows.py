"""The Python engine's hot path: one ``produce`` call per record of a chunk, with its id header.

confluent-kafka's ``produce`` takes its arguments positionally here
(``topic, value, key, partition, on_delivery, callback, timestamp, headers``):
parsing keywords costs about 0.2 µs a record more.

Kept tight on purpose (about 1.5 µs a record): no per-record Python work
beyond the ``produce`` call. The ids of a chunk are built at once by Arrow
kernels (:func:`..ids.record_ids`, 0.04 µs a record against 0.25 µs for formatting
bytes and a dict per record inside the loop), and the id header goes in as
one reused one-entry dict, whose value is replaced per record: confluent-kafka
copies headers into librdkafka during ``produce``, and converts a dict about
0.15 µs faster than a list holding a tuple. With the row's own headers (keys
may repeat) it stays a list.
"""

from __future__ import annotations

import time
from typing import Any, Sequence

import pyarrow as pa

from ..ids import has_scheme, record_ids, sequence_ids
from ..schema import TOPIC_META

__all__ = ["produce_rows", "produce_blocking", "column", "chunk_topic", "queue_full_error", "record_index"]

_POLL_EVERY = 1024  # records between two inline poll(0) calls


def column(batch: pa.RecordBatch, name: str) -> list[Any] | None:
    i = batch.schema.get_field_index(name)
    return None if i < 0 else batch.column(i).to_pylist()


def chunk_topic(batch: pa.RecordBatch, default_topic: str | None) -> str | None:
    meta = batch.schema.metadata or {}
    return meta.get(TOPIC_META, b"").decode() or default_topic


def queue_full_error() -> Any:
    from confluent_kafka import KafkaError

    return KafkaError(KafkaError._QUEUE_FULL, "client queue stayed full past the bound; retried from the WAL")


def produce_rows(producer: Any, cb: Any, rows_total: int, batch: pa.RecordBatch, indices: Sequence[int] | None,
                 topic_default: str | None, idh: str, prefix: bytes, seq0: int,
                 block_s: float) -> tuple[int, list[tuple[int, Any]]]:
    """Produce ``indices`` (or every row) of ``batch``; returns (produced, [(index, sync error)])."""
    from confluent_kafka import KafkaException

    produce, poll = producer.produce, producer.poll
    values = column(batch, "value")
    assert values is not None
    keys = column(batch, "key") or [None] * len(values)
    topic = chunk_topic(batch, topic_default)
    topics, parts = column(batch, "topic"), column(batch, "partition")
    hdrs, tss = column(batch, "headers"), column(batch, "timestamp")
    rows = range(rows_total) if indices is None else indices
    sync_failed: list[tuple[int, Any]] = []
    n = 0
    ids = (record_ids(batch, seq0) if has_scheme(batch) else sequence_ids(prefix, seq0, batch.num_rows)).to_pylist()
    if indices is None and topics is None and parts is None and hdrs is None and tss is None:
        # The common case, kept tight: one produce call per record, slices of
        # _POLL_EVERY records between two poll(0) calls (no per-record counter).
        header = {idh: b""}  # reused: produce copies it
        for lo in range(0, rows_total, _POLL_EVERY):
            hi = min(rows_total, lo + _POLL_EVERY)
            for i, v, k, rid in zip(range(lo, hi), values[lo:hi], keys[lo:hi], ids[lo:hi]):
                header[idh] = rid
                try:
                    produce(topic, v, k, -1, cb, None, 0, header)  # positional (keywords cost ~0.2 µs a record)
                except BufferError:
                    produce_blocking(producer, sync_failed, i, (topic, v, k, -1, cb, None, 0, {idh: rid}), block_s)
                except KafkaException as exc:
                    sync_failed.append((i, exc.args[0]))
            n += hi - lo
            poll(0)
    else:  # the row's own columns, or a retry of some records of the chunk
        for i in rows:
            row_headers = [(idh, ids[i])]
            if hdrs is not None and hdrs[i]:
                row_headers.extend((h["key"], h["value"]) for h in hdrs[i])
            part = -1 if parts is None or parts[i] is None else parts[i]
            ts = 0 if tss is None or tss[i] is None else tss[i]
            args = (topic if topics is None else topics[i], values[i], keys[i], part, cb, None, ts, row_headers)
            try:
                produce(*args)
            except BufferError:
                produce_blocking(producer, sync_failed, i, args, block_s)
            except KafkaException as exc:
                sync_failed.append((i, exc.args[0]))
            n += 1
            if not n % _POLL_EVERY:
                poll(0)
    return n - len(sync_failed), sync_failed


def produce_blocking(producer: Any, sync_failed: list[tuple[int, Any]], i: int, args: tuple,
                     block_s: float) -> None:
    """The client's queue is full: serve callbacks until it takes the record, for at most ``block_s``.

    Past the bound the record counts as failed (``_QUEUE_FULL``) and is retried from the WAL.
    """
    from confluent_kafka import KafkaException

    end = time.monotonic() + block_s
    while True:
        producer.poll(0.05)
        try:
            producer.produce(*args)
            return
        except BufferError:
            if time.monotonic() >= end:
                sync_failed.append((i, queue_full_error()))
                return
        except KafkaException as exc:
            sync_failed.append((i, exc.args[0]))
            return


def record_index(raw: bytes | None, content: tuple[str, bytes | None, bytes | None]) -> int:
    """The index of the record of a WAL chunk (its bytes) with this (topic, key, value); -1 if none."""
    if raw is None:
        return -1
    from ..wal.format import decode_chunk

    batch = decode_chunk(raw)
    values = column(batch, "value") or []
    keys = column(batch, "key") or [None] * len(values)
    _t, k, v = content
    return next((j for j in range(len(values)) if keys[j] == k and values[j] == v), -1)
