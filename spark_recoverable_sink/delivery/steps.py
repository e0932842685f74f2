"""The account, watchdog and retry steps of a publisher's pass, as functions of what they act on.

They run under the poll lock. Each moves chunks only through the
:class:`.ChunkBook` and changes a chunk's records only through its
:class:`.ChunkTracker` methods; a chunk whose step raises stays in its state.
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
    from .client import ProducerSlot
    from .contact import BrokerContact

__all__ = ["account_rounds", "watchdog", "retry_due"]

log = logging.getLogger("spark_recoverable_sink.delivery.publisher")

ReadChunk = Callable[[ChunkTracker], "pa.RecordBatch"]


def account_rounds(config: "SinkConfig", book: ChunkBook, slot: "ProducerSlot", contact: "BrokerContact",
                  read_chunk: ReadChunk, now: float) -> int:
    """Finished rounds -> REPORTED -> DONE or RETRY_WAIT; returns how many chunks could not be accounted for yet."""
    errors = 0
    for t in book.in_state(State.IN_FLIGHT):
        if t.round.epoch != slot.epoch:  # produced on a producer replaced meanwhile
            t.abandon_round()
            book.move(t, State.RETRY_WAIT)
        elif t.round.done:
            book.move(t, State.REPORTED)
    for t in book.in_state(State.REPORTED):
        try:
            _points.point("poller.account.chunk", batch=t.key.batch, origin=t.key.origin, seq=t.key.first_seq)
            _account_one(config, book, slot, contact, read_chunk, t, now)
        except Exception:  # stays REPORTED: taken up again by the next pass
            errors += 1
            log.exception("sink=%s batch=%d origin=%d first_seq=%d cannot be accounted for yet",
                          config.name, t.key.batch, t.key.origin, t.key.first_seq)
    return errors


def _account_one(config: "SinkConfig", book: ChunkBook, slot: "ProducerSlot", contact: "BrokerContact",
                read_chunk: ReadChunk, t: ChunkTracker, now: float) -> None:
    if t.round.acked:  # a broker answered: never again a first-contact failure (contact.py)
        contact.mark_reached()
    columns = None
    if t.round.failed_raw:
        try:
            batch = read_chunk(t)
        except Exception:
            log.exception("sink=%s cannot read chunk %s to match failures; retrying its whole round",
                          config.name, t.key)
        else:
            values = column(batch, "value") or []
            columns = (column(batch, "topic") or [chunk_topic(batch, config.topic)] * len(values),
                       column(batch, "key") or [None] * len(values), values)
    t.account(columns)
    reset = next((e for _i, e in t.failed if e is not None and e.code() in PRODUCER_RESET), None)
    if reset is not None:
        slot.request_replace(config.scrub(reset.str()))  # replaced on the next pass
    if not t.failed and t.pending:
        # The reports do not account for every record (acked + dead + skipped
        # != rows): which ones are missing is unknown, so none is trusted.
        log.error("sink=%s batch=%d origin=%d first_seq=%d rows=%d acked=%d dead=%d unaccounted=%d: "
                  "every record not dead goes again", config.name, t.key.batch, t.key.origin,
                  t.key.first_seq, t.rows, t.acked, len(t.dead), t.pending)
        t.abandon_round()
    if not t.failed:
        book.move(t, State.DONE)
        return
    delay = t.retry_delay(config.retry_backoff_s, config.retry_backoff_max_s)
    t.schedule_retry(now + delay)
    err = t.failed[0][1]
    log.warning("sink=%s batch=%d origin=%d first_seq=%d failed=%d isolating=%d error=%s retry_in_s=%.2f",
                config.name, t.key.batch, t.key.origin, t.key.first_seq, len(t.failed), len(t.isolate),
                config.scrub(err.str()) if err is not None else "-", delay)
    book.move(t, State.RETRY_WAIT)


def watchdog(config: "SinkConfig", book: ChunkBook, slot: "ProducerSlot", now: float, round_timeout_s: float) -> None:
    """Abandon rounds whose reports are missing past ``round_timeout_s``; their records go again on a new producer."""
    stuck = 0
    for t in book.in_state(State.IN_FLIGHT):
        if t.round.sealed and now - t.round.started > round_timeout_s:
            log.error("sink=%s batch=%d origin=%d first_seq=%d reports missing=%d after %.0fs; "
                      "round abandoned, retried from the WAL", config.name, t.key.batch,
                      t.key.origin, t.key.first_seq, t.round.expected - t.round.reported, now - t.round.started)
            t.abandon_round()
            book.move(t, State.RETRY_WAIT)
            stuck += 1
    if stuck:
        slot.request_replace(f"{stuck} rounds without delivery reports for {round_timeout_s:.0f}s")


def retry_due(config: "SinkConfig", book: ChunkBook, slot: "ProducerSlot", read_chunk: ReadChunk,
              room_for: Callable[[Any, ChunkTracker], bool],
              produce_chunk: Callable[[ChunkTracker, Any, list[int]], None], now: float) -> int:
    """Re-read due chunks from the WAL and produce their failed records; returns the records sent again."""
    producer = None
    retried = 0
    for t in book.in_state(State.RETRY_WAIT):
        if t.next_retry_at > now:
            continue
        producer = producer or slot.get()
        if not room_for(producer, t):
            break  # the client's queue is full: never block the poll lock on it
        try:
            batch = read_chunk(t)
        except Exception:
            log.exception("sink=%s cannot read chunk %s for retry; keeping it for later", config.name, t.key)
            t.schedule_retry(now + config.retry_backoff_max_s)
            continue
        plan = t.plan_retry()
        retried += len(plan.indices)
        produce_chunk(t, batch, plan.indices)  # raising, it abandoned the round: every record goes again
        t.retry_started(plan)
    return retried
