"""The settle, watchdog and retry steps of a poller pass (a mixin of :class:`.Publisher`).

They run under the poll lock. Each moves chunks only through the
:class:`.ChunkBook`; a chunk whose step raises stays in its state.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Callable

from .. import _points
from .chunks import ChunkBook, ChunkTracker, State
from .codes import PRODUCER_RESET
from .rows import chunk_topic, column

if TYPE_CHECKING:  # pragma: no cover
    import pyarrow as pa

    from ..config import SinkConfig
    from .producer import ProducerSlot

__all__ = ["RoundSteps"]

log = logging.getLogger("spark_recoverable_sink.delivery.publisher")


class RoundSteps:
    """Settling finished rounds, abandoning stuck ones, retrying from the WAL."""

    config: "SinkConfig"
    contact: "BrokerContact"
    _book: ChunkBook
    _slot: "ProducerSlot"
    _clock: Callable[[], float]
    _replace_reason: str | None
    round_timeout_s: float
    retried_records: int
    step_errors: int

    def _read_chunk(self, t: ChunkTracker) -> "pa.RecordBatch":  # pragma: no cover - provided by Publisher
        raise NotImplementedError

    def _room_for(self, producer: Any, t: ChunkTracker) -> bool:  # pragma: no cover - provided by Publisher
        raise NotImplementedError

    def produce_chunk(self, t: ChunkTracker, batch: Any, indices: Any = None) -> None:  # pragma: no cover
        raise NotImplementedError

    def _settle_rounds(self) -> None:
        for t in self._book.in_state(State.IN_FLIGHT):
            if t.round.epoch != self._slot.epoch:  # produced on a producer replaced meanwhile
                t.abandon_round()
                self._book.move(t, State.RETRY_WAIT)
            elif t.round.done:
                self._book.move(t, State.SETTLED)
        for t in self._book.in_state(State.SETTLED):
            try:
                _points.point("poller.settle.chunk", batch=t.key.batch, partition=t.key.partition,
                              seq=t.key.first_seq)
                self._settle_one(t)
            except Exception:  # stays SETTLED: taken up again by the next pass
                self.step_errors += 1
                log.exception("sink=%s batch=%d partition=%d first_seq=%d cannot be settled yet",
                              self.config.name, t.key.batch, t.key.partition, t.key.first_seq)

    def _settle_one(self, t: ChunkTracker) -> None:
        rnd = t.round
        if rnd.acked:  # a broker answered: never again a first-contact failure (contact.py)
            self.contact.mark_reached()
        group = rnd.indices if t.isolating and rnd.indices is not None else []
        for i in group:  # an isolation round: its records leave isolation unless they fail again
            t.isolate.pop(i, None)
        if rnd.failed_raw:
            try:
                batch = self._read_chunk(t)
            except Exception:
                log.exception("sink=%s cannot read chunk %s to match failures; retrying its whole round",
                              self.config.name, t.key)
                t.fail_round()
            else:
                topic = chunk_topic(batch, self.config.topic)
                values = column(batch, "value") or []
                t.resolve_failures(column(batch, "topic") or [topic] * len(values),
                                   column(batch, "key") or [None] * len(values), values)
        t.settle_sync_failures()
        if group:  # bisect: a group that failed again is halved; one that went through grows back
            failed_again = any(i in t.isolate for i in group)
            t.isolate_size = max(1, len(group) // 2) if failed_again else len(group) * 2
            t.isolating = False
        reset = next((e for _i, e in t.failed if e is not None and e.code() in PRODUCER_RESET), None)
        if reset is not None and self._replace_reason is None:
            self._replace_reason = self.config.scrub(reset.str())  # replaced on the next pass
        if not t.failed:
            self._book.move(t, State.DONE)
            return
        isolating = all(i in t.isolate for i, _e in t.failed)
        delay = 0.0 if isolating else min(self.config.retry_backoff_max_s,
                                          self.config.retry_backoff_s * (2 ** t.retries))
        t.next_retry_at = self._clock() + delay
        err = t.failed[0][1]
        log.warning("sink=%s batch=%d partition=%d first_seq=%d failed=%d isolating=%d error=%s retry_in_s=%.2f",
                    self.config.name, t.key.batch, t.key.partition, t.key.first_seq, len(t.failed), len(t.isolate),
                    self.config.scrub(err.str()) if err is not None else "-", delay)
        self._book.move(t, State.RETRY_WAIT)

    def _watchdog(self) -> None:
        now = self._clock()
        stuck = 0
        for t in self._book.in_state(State.IN_FLIGHT):
            if t.round.sealed and now - t.round.started > self.round_timeout_s:
                log.error("sink=%s batch=%d partition=%d first_seq=%d reports missing=%d after %.0fs; "
                          "round abandoned, retried from the WAL", self.config.name, t.key.batch,
                          t.key.partition, t.key.first_seq, t.round.expected - t.round.settled, now - t.round.started)
                t.abandon_round()
                self._book.move(t, State.RETRY_WAIT)
                stuck += 1
        if stuck and self._replace_reason is None:
            self._replace_reason = f"{stuck} rounds without delivery reports for {self.round_timeout_s:.0f}s"

    def _retry_due(self) -> None:
        now = self._clock()
        producer = None
        for t in self._book.in_state(State.RETRY_WAIT):
            if t.next_retry_at > now:
                continue
            producer = producer or self._slot.get()
            if not self._room_for(producer, t):
                return  # the client's queue is full: never block the poll lock on it
            try:
                batch = self._read_chunk(t)
            except Exception:
                log.exception("sink=%s cannot read chunk %s for retry; keeping it for later", self.config.name, t.key)
                t.next_retry_at = now + self.config.retry_backoff_max_s
                continue
            failed = t.failed
            iso = sorted(i for i, _e in failed if i in t.isolate)
            if iso:  # isolation: a group of the suspects, smaller after each failing group, down to one
                indices = iso[:t.isolate_size or max(1, (len(iso) + 1) // 2)]
                chosen = set(indices)
                rest = [f for f in failed if f[0] not in chosen]
            else:
                indices, rest = sorted({i for i, _e in failed}), []
                t.retries += 1
            t.retried_records += len(indices)
            self.retried_records += len(indices)
            self.produce_chunk(t, batch, indices)
            t.isolating = bool(iso) and t.state is State.IN_FLIGHT
            t.failed = rest  # records still waiting for their turn
