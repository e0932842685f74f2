"""Closing what a lane's earlier producers left open, before its new producer commits anything.

Why: every producer of a lane has the same producer id (the coordinator
bumps only the epoch), and a partition closes *all* the open records of a
producer id with the next control marker of that id, whatever epoch wrote
them. Records an earlier producer left without a marker therefore become
committed with the lane's next COMMIT on that partition: read twice. Apache
Kafka leaves such records when it aborts a transaction while the partition
has no leader. Measured on 4.4.0 (single node, SIGKILLed with a transaction
open, restarted on its log after the transaction's timeout): in its first
seconds the restarted broker aborts the expired transaction while its
previous incarnation is still registered; when the controller fences that
incarnation the partitions lose their leader, and the coordinator writes
"Couldn't find leader endpoint for partitions ... likely deleted already",
skips the ABORT markers and records the transaction as aborted
(tests/broker/test_exactly_once_restart.py reproduces it on every run).

So every new producer of a lane runs one aborted transaction over every
partition the lane can write before its first real one: the ABORT marker
on each partition closes, as aborted, whatever the lane's producer id left
open there.

Steps of :func:`sweep` (where it runs: a worker, in the task or the poller
that first uses the lane's producer; nothing of it pickles):

1. the partitions: every partition of the lane's topics (the sink's topic, or
   the topics of the unit's records), and the marker topic's partition 0;
2. begin a transaction and produce one record to each (key ``rks-sweep``, no
   value, the id header ``<lane>:sweep:<n>``);
3. flush, bounded: each record must be in its partition's log (a partition
   without a leader fails the sweep, which the next attempt runs again);
4. abort, then the lane is *swept*: its producer may commit.

Guarantees: a lane's producer never commits a transaction before its sweep
has aborted on every partition of step 1. Costs one small aborted
transaction per new lane producer (read_uncommitted readers see its records).
"""

from __future__ import annotations

import logging
from functools import partial
from typing import Any, Callable, Iterable

import pyarrow as pa
import pyarrow.compute as pc

from ...config import SinkConfig
from ...wal.format import decode_chunk
from ..rows import chunk_topic
from .lanes import Lane, on_delivery

__all__ = ["sweep", "lane_topics", "SWEEP_KEY", "SweepFailed"]

log = logging.getLogger(__name__)

SWEEP_KEY = b"rks-sweep"
_SWEEP_CHUNK = -2  # the lane's round id for the sweep's records (chunks are >= 0, the marker -1)


class SweepFailed(Exception):
    """The sweep could not complete before its deadline; the lane is tried again later (its producer stays)."""


def sweep(config: SinkConfig, lane: Lane, lid: str, topics: Iterable[str], left: Callable[[str], float]) -> int:
    """Run the lane's sweep transaction (steps 1-4); returns the number of partitions closed.

    ``left(what)`` is the time left for one client call (raising when none is).

    Raises:
        confluent_kafka.KafkaException: a client call failed (the caller notes it: the lane may be dropped).
        SweepFailed: a record was not acknowledged in time, or was refused (the transaction is aborted
            when it can be; otherwise the lane must abort first).
    """
    from confluent_kafka import KafkaError, KafkaException

    p = lane.producer
    # Step 1
    targets: list[tuple[str, int]] = [(config.marker_topic, 0)]
    for topic in sorted(set(topics)):
        md = p.list_topics(topic, timeout=left("metadata"))
        t = md.topics.get(topic)
        if t is None or t.error is not None:
            if t is not None and t.error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
                continue  # no such topic: nothing of the lane can be open there
            raise KafkaException(t.error if t is not None else KafkaError(KafkaError._UNKNOWN_TOPIC, topic))
        targets.extend((topic, part) for part in sorted(t.partitions))
    # Step 2
    p.begin_transaction()
    lane.must_abort = True  # from here until the abort returns, whatever happens
    batch = pa.RecordBatch.from_pydict({
        "value": pa.array([None] * len(targets), pa.binary()),
        "key": pa.array([SWEEP_KEY] * len(targets), pa.binary()),
        "topic": pa.array([t for t, _ in targets], pa.string()),
        "partition": pa.array([part for _, part in targets], pa.int32())})
    lane.failures = []
    _n, failed = p.produce_chunk(lane.round_for(_SWEEP_CHUNK), partial(on_delivery, lane, _SWEEP_CHUNK), batch,
                                 None, None, config.id_header, f"{lid}:sweep:".encode(), 0, left("sweep"))
    lane.failures.extend((e, j, _SWEEP_CHUNK) for j, e in failed)
    # Step 3
    unsent = p.flush(left("sweep flush")) if not lane.failures else 0
    lane.collect(p.poll(0))
    problem = (f"{len(lane.failures)} of its records failed ({lane.failures[0][0]})" if lane.failures
               else f"{unsent} of its records unacknowledged" if unsent else "")
    # Step 4
    p.abort_transaction(left("abort_transaction"))
    lane.reset()
    lane.failures = []
    if problem:
        raise SweepFailed(f"lane {lid}: the sweep over {len(targets)} partitions did not complete: {problem}")
    lane.swept = True
    log.info("sink=%s lane=%s swept partitions=%d: anything an earlier producer left open there is aborted",
             config.name, lid, len(targets))
    return len(targets)


def lane_topics(config: SinkConfig, unit: Any) -> set[str]:
    """The topics a lane's sweep covers: the sink's topic, or those of the records of ``unit`` (its WAL chunks).

    A task's own unit published as it is written (``unit`` None) has no
    topics yet: the caller publishes it from the WAL instead when the sink
    has a topic column.
    """
    if config.topic or unit is None:
        return {config.topic} if config.topic else set()
    out: set[str] = set()
    for ck, _size in unit.chunks:
        raw = unit.wal.read_chunk(ck)
        if raw is None:
            continue  # the commit step reports a missing chunk
        batch = decode_chunk(raw)
        i = batch.schema.get_field_index("topic")
        if i >= 0:
            out.update(v for v in pc.unique(batch.column(i)).to_pylist() if v)
        elif chunk_topic(batch, None):
            out.add(chunk_topic(batch, None))  # type: ignore[arg-type]
    return out
