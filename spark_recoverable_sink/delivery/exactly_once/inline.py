"""A task's unit produced into its lane's transaction as its chunks reach the WAL (the inline transaction).

Overlaps producing with writing the WAL: each chunk is committed to the WAL
before it is produced, and the transaction is committed only after the
attempt is (:meth:`.transactions.Committer.commit`, which resumes it). A
failure only breaks it: the commit step then aborts it and produces the unit
again from the WAL. So does a unit that grows past
:func:`.subunits.whole_limit`: too large for one transaction, it is
committed in parts from the WAL (:mod:`.parts`).
"""

from __future__ import annotations

from functools import partial
from typing import Any, Callable

from ... import _points
from ...config import SinkConfig
from ...wal.format import AttemptKey
from . import subunits
from .lanes import Lane, on_delivery
from .sweep import unswept_topics

__all__ = ["InlineTransaction"]


class InlineTransaction:
    """A lane's open transaction being filled by the task, chunk after chunk, right after each WAL append."""

    def __init__(self, config: SinkConfig, note_error: Callable[[str, Any], str], lid: str, lane: Lane,
                 ident: tuple[str, AttemptKey], run: str) -> None:
        self._config = config
        self._note_error = note_error  # the committer's: what a Kafka error leaves the lane to do
        self._lid, self._lane, self._ident = lid, lane, ident
        self._key = ident[1]
        self.broken = False
        self._bytes = 0  # of the chunks produced into it
        self._limit = subunits.whole_limit(subunits.txn_timeout_ms(config.kafka_conf_items))
        lane.failures = []

    def produce(self, batch: Any, first_seq: int, block_s: float) -> None:
        """Produce one chunk (already committed to the WAL) into the transaction; failures break it."""
        from confluent_kafka import KafkaException

        if self.broken:
            return
        cfg = self._config
        lane = self._lane
        self._bytes += batch.nbytes
        if self._bytes > self._limit or unswept_topics(lane, batch, cfg.topic):
            # aborted at the commit step, then (swept and) produced again from the WAL, in parts if too large
            self.broken = True
            lane.must_abort = True
            return
        try:
            _n, sync_failed = lane.producer.produce_chunk(
                lane.round_for(lane.chunks_in), partial(on_delivery, lane, lane.chunks_in), batch, None, cfg.topic,
                cfg.id_header, b"", first_seq, block_s)  # the chunk's ids come from its own id scheme
            lane.collect(lane.producer.poll(0))
        except KafkaException as exc:
            self._note_error(self._lid, exc.args[0])
            self.broken = True
            return
        lane.failures.extend((e, j, lane.chunks_in) for j, e in sync_failed)
        if lane.failures:
            self.broken = True  # aborted at the commit step, then produced again from the WAL
            lane.must_abort = True
            return
        lane.chunks_in += 1
        _points.point("eo.produced_chunk", batch=self._key.batch, partition=self._key.partition,
                      rows=first_seq + batch.num_rows, records=batch.num_rows)

    def finish(self) -> None:
        """Every chunk is in: the commit step only sends the marker and commits (unless it broke)."""
        if not self.broken:
            self._lane.mark_produced(self._ident)
