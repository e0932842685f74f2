"""Step 1b of the exactly-once commit: a lane's new producer closes, as aborted, what earlier producers left open.

Why and how: :func:`sweep`. Where it runs: a worker, in the task or poller that uses the lane; nothing pickles.
"""

from __future__ import annotations

import logging
from functools import partial
from typing import Any, Callable, Iterable

import pyarrow as pa

from ...arrays import column
from ...config import SinkConfig
from ...wal.format import decode_chunk
from .lane import (
    Lane,
    LaneState,
    SweepFailed,
    chunk_topics,
    on_delivery,
)

__all__ = ["sweep", "lane_topics", "SWEEP_KEY"]

log = logging.getLogger(__name__)
SWEEP_KEY = b"rks-sweep"
_SWEEP_CHUNK = -2  # the lane's round id for the sweep's records (chunks are >= 0, the marker -1)


# -- the sweep --------------------------------------------------------------------------------------------


def sweep(config: SinkConfig, lane: Lane, lid: str, topics: Iterable[str], left: Callable[[str], float]) -> int:
    """Close, as aborted, what a lane's earlier producers left open, before its new producer commits anything;
    returns the number of partitions closed. ``left(what)`` is the time left for one client call (raising when
    none is).

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

    When: before a lane's producer begins a transaction, if it has not swept
    since it was initialised or since its last abort (an abort of the lane's
    own can meet the same broker state), or if the unit writes a topic it has
    not swept (a record of a chunk on such a topic dooms the transaction, and
    the next attempt sweeps that topic first: :func:`unswept_topics`).

    Steps (``READY`` or ``SWEPT`` -> ``SWEEPING`` -> ``ABORTING`` -> ``SWEPT``):

    1. the partitions: every partition of the topics to sweep, and the marker
       topic's partition 0 (a marker topic the broker does not know fails the
       sweep with its error: the caller then checks it, :mod:`.topic`);
    2. begin a transaction, produce one record to each (key ``rks-sweep``, no
       value, the id header ``<lane>:sweep:<n>``) and the lane's group offset
       (so a transactional offset left pending is closed too);
    3. flush, bounded: each record must be in its partition's log (a partition
       without a leader fails the sweep, which the next attempt runs again);
    4. abort, serve the purged records' reports, then the lane is *swept*
       (a sweep that failed leaves it as it was before, its abort done).

    Guarantees: a lane's producer begins no transaction before a sweep over
    every topic it writes has completed since its last abort. Limits: an abort
    that returns is the broker's word that markers were written, which is what
    the measured defect breaks; the sweep's own records reached their leaders
    just before its abort, so only a partition losing its leader in that
    interval escapes it. Costs one small aborted transaction per new lane
    producer and per abort (read_uncommitted readers see its records).

    Raises:
        confluent_kafka.KafkaException: a client call failed (the caller notes it: the lane may be dropped).
        SweepFailed: a record was not acknowledged in time, or was refused (the transaction is aborted
            when it can be; otherwise the lane must abort first).
    """
    from confluent_kafka import KafkaError, KafkaException

    p = lane.producer
    # Step 1
    md = p.list_topics(config.marker_topic, timeout=left("metadata")).topics.get(config.marker_topic)
    if md is None or md.error is not None or not md.partitions:  # the caller checks the topic (.topic): deleted?
        raise KafkaException(md.error if md is not None and md.error is not None else
                             KafkaError(KafkaError._UNKNOWN_TOPIC, f"marker topic {config.marker_topic} not found"))
    before = lane.state  # READY or SWEPT: where a sweep that fails leaves it
    todo = set(topics) if not lane.swept else set(topics) - lane.swept_topics
    targets: list[tuple[str, int]] = [(config.marker_topic, 0)]
    for topic in sorted(todo):
        md = p.list_topics(topic, timeout=left("metadata"))
        t = md.topics.get(topic)
        if t is None or t.error is not None:
            if t is not None and t.error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
                log.info("sink=%s lane=%s sweep topic=%s: unknown to the broker, nothing can be open there",
                         config.name, lid, topic)
                continue  # its records fail as the broker says (UNKNOWN_TOPIC_OR_PART), refused with that reason
            raise KafkaException(t.error if t is not None else KafkaError(KafkaError._UNKNOWN_TOPIC, topic))
        targets.extend((topic, part) for part in sorted(t.partitions))
    # Step 2
    p.begin_transaction()
    lane.to(LaneState.SWEEPING)  # from here until the abort returns, whatever happens, it can only abort
    batch = pa.RecordBatch.from_arrays([
        column([None] * len(targets), pa.binary()), column([SWEEP_KEY] * len(targets), pa.binary()),
        column([t for t, _ in targets], pa.string()), column([part for _, part in targets], pa.int32())],
        names=["value", "key", "topic", "partition"])
    lane.failures = []
    _n, failed = p.produce_chunk(lane.round_for(_SWEEP_CHUNK), partial(on_delivery, lane, _SWEEP_CHUNK), batch,
                                 None, None, config.id_header, f"{lid}:sweep:".encode(), 0, left("sweep"))
    lane.failures.extend((e, j, _SWEEP_CHUNK) for j, e in failed)
    p.send_offsets(lid, lane.consumer, [(config.marker_topic, 0, 0)], left("send_offsets_to_transaction"))
    # Step 3
    unsent = p.flush(left("sweep flush")) if not lane.failures else 0
    lane.collect(p.poll(0))
    problem = (f"{len(lane.failures)} of its records failed ({lane.failures[0][0]})" if lane.failures
               else f"{unsent} of its records unacknowledged" if unsent else "")
    # Step 4
    timeout = left("abort_transaction")
    lane.to(LaneState.ABORTING)
    p.abort_transaction(timeout)
    p.poll(0)  # the purged records' reports, served now rather than inside the next transaction
    lane.failures = []
    if problem:
        lane.to(before)
        lane._clear()
        raise SweepFailed(f"lane {lid}: the sweep over {len(targets)} partitions did not complete: {problem}")
    lane.swept_topics = todo | (lane.swept_topics if before is LaneState.SWEPT else set())
    lane.to(LaneState.SWEPT)
    lane._clear()
    lane.need_topics -= lane.swept_topics
    log.info("sink=%s lane=%s swept partitions=%d: anything an earlier producer left open there is aborted",
             config.name, lid, len(targets))
    return len(targets)


def lane_topics(config: SinkConfig, unit: Any) -> set[str]:
    """The topics known to be written by ``unit`` before it is produced: the sink's topic, and with no sink topic
    (a topic column is then required) those of its WAL chunks.

    A chunk on another topic (a topic column beside a sink topic) is met
    while it is produced: :func:`unswept_topics`.
    """
    if config.topic or unit is None:
        return {config.topic} if config.topic else set()
    out: set[str] = set()
    for ck, _size in unit.chunks:
        raw = unit.wal.read_chunk(ck)
        if raw is not None:  # the commit step reports a missing chunk
            out |= chunk_topics(decode_chunk(raw), None)
    return out

