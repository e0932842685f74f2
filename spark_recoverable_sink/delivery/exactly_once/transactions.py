"""Exactly-once: one Kafka transaction per unit, with a marker committed in it.

A *unit* is what one Spark task committed to the WAL for one (run, batch,
partition): its chunks, in sequence order. A unit is published in one Kafka
transaction by the producer of its *lane*, whose ``transactional.id`` is
``rks-eo.<sink>.<run>.<partition>``: a function of what every attempt at
the unit shares (never of the attempt), so a retried, speculative or
adopting producer fences the earlier one, and the broker aborts what the
earlier one left open (Apache Kafka; see README for the test broker).

The same transaction commits the lane's *marker*: an offset of the consumer
group named like the lane, on partition 0 of the sink's topic, that encodes
the batch and the unit's row count (the broker keeps the offset, not
metadata: some brokers drop metadata). The driver runs batches one after
the other and a batch ends only once every lane of it is committed
(:mod:`...driver.settle`), so a lane's marker at batch ``m >= b`` proves that unit
``(b, lane)`` is in Kafka: a re-run, a stale WAL copy or an adopter skips it.

Steps of :meth:`Committer.commit` (each resumable after a failure):

1. the lane's producer, created and ``init_transactions()``-ed once (fences
   every earlier producer of the lane);
2. read the marker (read_committed: never a pending transaction's);
   ``batch >= unit's`` -> skipped (row count compared when equal);
3. ``begin_transaction``; produce every record from the WAL (ids in headers);
4. ``send_offsets_to_transaction`` (the marker), ``commit_transaction``.

A failure leaves the lane in a state the next call resumes from: a commit
that timed out is retried on the same producer (a new producer would make
the broker abort, or on some brokers expose, the open transaction), one
that needs an abort is aborted first, a fatal or fenced producer is
replaced (and the marker read again).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Callable

from ... import _points
from ...config import SinkConfig
from ...deadline import Deadline
from ...ids import record_id_prefix
from ...wal.format import AttemptKey, ChunkKey, decode_chunk
from ..codes import PRODUCER_RESET
from ..rows import produce_rows
from .lanes import Lane, LanePool
from .markers import ROWS_MASK, decode_marker, encode_marker, lane_id

__all__ = ["Unit", "Committer", "InlineTransaction", "COMMITTED", "SKIPPED", "PENDING", "MISMATCH", "left"]

log = logging.getLogger(__name__)

COMMITTED, SKIPPED, PENDING, MISMATCH = "committed", "skipped", "pending", "mismatch"


@dataclass
class Unit:
    """One committed WAL attempt, published as one transaction."""

    wal: Any
    key: AttemptKey
    run: str
    rows: int
    chunks: list[tuple[ChunkKey, int]]  # (key, stored size), in sequence order
    outcome: str = PENDING
    last_error: str = ""
    attempts: int = 0
    found_rows: int | None = field(default=None)  # the marker's row count when it did not match

    @property
    def batch(self) -> int:
        return self.key.batch

    @property
    def partition(self) -> int:
        return self.key.partition


class Committer:
    """Publishes units through lane producers (callers serialise calls per runtime).

    Raises nothing for broker trouble: an outcome of ``PENDING`` with
    ``last_error`` says the unit stays in the WAL for a later call.
    """

    def __init__(self, config: SinkConfig, on_client_error: Callable[[Any], None] | None = None,
                 max_lanes: int = 32) -> None:
        if not config.topic:
            raise ValueError("exactly-once needs the sink's default topic for its markers")
        self.config = config
        self.lanes = LanePool(config, on_client_error, max_lanes)

    # -- one unit ----------------------------------------------------------------------

    def commit(self, unit: Unit, deadline: Deadline) -> str:
        """Try to publish ``unit`` before ``deadline``; returns its outcome (also in ``unit.outcome``)."""
        from confluent_kafka import KafkaException

        lid = lane_id(self.config.name, unit.run, unit.partition)
        unit.attempts += 1
        try:
            lane = self.lanes.get(lid)
            unit.outcome = self._commit(lane, unit, deadline)
        except KafkaException as exc:
            unit.last_error = self.note_error(lid, exc.args[0])
            unit.outcome = PENDING
        except _Timeout as exc:
            unit.last_error = str(exc)
            unit.outcome = PENDING
        return unit.outcome

    def note_error(self, lid: str, err: Any) -> str:
        """What a Kafka error leaves the lane to do next time; returns the error's text (scrubbed)."""
        text = self.config.scrub(err.str() if hasattr(err, "str") else str(err))
        lane = self.lanes.known(lid)
        if lane is not None:
            if getattr(err, "fatal", lambda: False)() or getattr(err, "code", lambda: None)() in PRODUCER_RESET:
                log.warning("sink=%s lane=%s producer failed fatally (%s); a new one takes over",
                            self.config.name, lid, text)
                self.lanes.drop(lid)
            elif getattr(err, "txn_requires_abort", lambda: False)():
                lane.must_abort = True
        return text

    def begin_inline(self, wal_path: str, key: AttemptKey, run: str, deadline: Deadline) -> "InlineTransaction | None":
        """A task's unit, produced into its transaction as its chunks reach the WAL (steps 1-3 now).

        ``None`` when that cannot start before ``deadline`` or the lane's
        marker already holds the batch: the task then publishes from the WAL
        after its attempt is committed (:meth:`commit`), as any retry does.
        """
        from confluent_kafka import KafkaException

        lid = lane_id(self.config.name, run, key.partition)
        try:
            lane = self.lanes.get(lid)
            p = lane.producer
            if not lane.ready:
                p.init_transactions(left(deadline, "init_transactions"))
                lane.ready = True
            self._settle_open(lane, None, deadline)
            marker = self._marker(lane, deadline)
            if marker is not None and marker[0] >= key.batch:
                return None  # a re-run: the commit step compares and skips
            p.begin_transaction()
            lane.open = (wal_path, key)
            return InlineTransaction(self, lid, lane, (wal_path, key), run)
        except KafkaException as exc:
            self.note_error(lid, exc.args[0])
        except _Timeout:
            pass
        return None

    def _settle_open(self, lane: Lane, ident: Any, deadline: Deadline) -> None:
        """Finish what the lane has open before anything else, unless it is ``ident``'s own, complete one.

        librdkafka resumes an API call that timed out only by calling it again
        (an abort during a pending commit fails with ``_CONFLICT``): another
        unit's transaction with its records and marker all sent is committed
        (resumed), anything else open or failed is aborted (or the abort resumed).
        """
        p = lane.producer
        if lane.open is None and not lane.must_abort:
            return
        if lane.open == ident and lane.produced and not lane.must_abort:
            return  # the caller's own transaction: its commit step resumes it
        if lane.offsets_sent and not lane.must_abort:
            p.commit_transaction(left(deadline, "commit_transaction"))  # another unit's, complete: resumed
        else:
            p.abort_transaction(left(deadline, "abort_transaction"))
        lane.reset()

    def _commit(self, lane: Lane, unit: Unit, deadline: Deadline) -> str:
        p = lane.producer
        ident = (unit.wal.path, unit.key)
        if not lane.ready:  # 1 (a unit Kafka already has is skipped without fencing anyone)
            early = self._marker(lane, deadline)
            if early is not None and early[0] > unit.batch:
                return SKIPPED
            p.init_transactions(left(deadline, "init_transactions"))
            lane.ready = True
        self._settle_open(lane, ident, deadline)
        if lane.open is None:
            marker = self._marker(lane, deadline)  # 2
            if marker is not None and marker[0] >= unit.batch:
                if marker[0] == unit.batch and marker[1] != unit.rows & ROWS_MASK:
                    unit.found_rows = marker[1]
                    return MISMATCH
                return SKIPPED
            p.begin_transaction()  # 3
            lane.open = ident
            self._produce(p, unit, deadline)
            lane.produced = True
        if not lane.offsets_sent:  # 4
            from confluent_kafka import TopicPartition

            md = lane.consumer.consumer_group_metadata()
            tp = TopicPartition(self.config.topic, 0, encode_marker(unit.batch, unit.rows))
            p.send_offsets_to_transaction([tp], md, left(deadline, "send_offsets_to_transaction"))
            lane.offsets_sent = True
        p.commit_transaction(left(deadline, "commit_transaction"))  # a commit that timed out is retried as it is
        lane.reset()
        return COMMITTED

    def _marker(self, lane: Lane, deadline: Deadline) -> tuple[int, int] | None:
        from confluent_kafka import KafkaException, TopicPartition

        (tp,) = lane.consumer.committed([TopicPartition(self.config.topic, 0)], timeout=left(deadline, "marker"))
        if tp.error is not None:
            raise KafkaException(tp.error)
        return decode_marker(tp.offset)

    def _produce(self, p: Any, unit: Unit, deadline: Deadline) -> None:
        failed: list[Any] = []

        def on_delivery(err: Any, _msg: Any) -> None:
            if err is not None:
                failed.append(err)

        prefix = record_id_prefix(self.config.name, unit.batch, unit.partition, unit.run)
        block_s = max(0.5, deadline.remaining())
        for ck, _size in unit.chunks:
            if failed or deadline.expired():
                break  # the transaction will be aborted anyway: stop feeding it
            raw = unit.wal.read_chunk(ck)
            if raw is None:
                raise RuntimeError(f"WAL slot {unit.wal.path}: chunk {ck} of a committed attempt is missing")
            batch = decode_chunk(raw)
            _n, sync_failed = produce_rows(p, on_delivery, batch.num_rows, batch, None, self.config.topic,
                                           self.config.id_header, prefix, ck.first_seq, block_s)
            failed.extend(e for _i, e in sync_failed)
            p.poll(0)
            _points.point("eo.produced_chunk", batch=unit.batch, partition=unit.partition, rows=ck.first_seq + _n)
        if failed:  # the transaction cannot commit: aborted, then the unit is tried again
            from confluent_kafka import KafkaException

            raise KafkaException(failed[0])
        if deadline.expired():
            raise _Timeout("no time left to produce the unit")

    def close(self) -> None:
        self.lanes.close()


class InlineTransaction:
    """A lane's open transaction being filled by the task, chunk after chunk, right after each WAL append."""

    def __init__(self, committer: "Committer", lid: str, lane: Lane, ident: tuple[str, AttemptKey],
                 run: str) -> None:
        self._committer = committer
        self._lid, self._lane, self._ident = lid, lane, ident
        self._key = key = ident[1]
        self._prefix = record_id_prefix(committer.config.name, key.batch, key.partition, run)
        self.broken = False
        self._failed: list[Any] = []

    def _on_delivery(self, err: Any, _msg: Any) -> None:
        if err is not None:
            self._failed.append(err)

    def produce(self, batch: Any, first_seq: int, block_s: float) -> None:
        """Produce one chunk (already committed to the WAL) into the transaction; failures break it."""
        from confluent_kafka import KafkaException

        if self.broken:
            return
        cfg = self._committer.config
        try:
            _n, sync_failed = produce_rows(self._lane.producer, self._on_delivery, batch.num_rows, batch, None,
                                           cfg.topic, cfg.id_header, self._prefix, first_seq, block_s)
        except KafkaException as exc:
            self._committer.note_error(self._lid, exc.args[0])
            self.broken = True
            return
        if sync_failed or self._failed:
            self.broken = True  # aborted at the commit step, then produced again from the WAL
        _points.point("eo.produced_chunk", batch=self._key.batch, partition=self._key.partition,
                      rows=first_seq + batch.num_rows)

    def finish(self) -> None:
        """Every chunk is in: the commit step only sends the marker and commits (unless it broke)."""
        if not self.broken:
            self._lane.mark_produced(self._ident)


class _Timeout(Exception):
    pass


def left(deadline: Deadline, what: str) -> float:
    """Seconds left for one client call; ``_Timeout`` when none (the unit stays pending)."""
    rest = deadline.remaining()
    if rest is not None and rest <= 0:
        raise _Timeout(f"no time left for {what}")
    return 30.0 if rest is None else max(0.05, rest)
