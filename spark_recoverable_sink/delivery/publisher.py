"""The publisher facade: produce chunks, run the poller pass, answer the runtime.

One :class:`Publisher` per worker process and sink configuration. All
delivery state changes under one reentrant *poll lock*: whoever holds it
calls ``poll`` and so runs the delivery callbacks (the task thread during a
task, the poller thread between tasks). One pass (:meth:`Publisher.tick`) runs
these steps, each at a named point (``poller.<step>``) and each guarded: a
step that raises is logged, leaves every chunk in its state, and the next
step and the next pass carry on.

1. ``backlog``: take the chunks async tasks handed over (the inbox), then
   produce queued chunks while the client's queue has room;
2. ``poll``: serve delivery callbacks (replacing the producer first after a fatal error);
3. ``account``: match a reported round's failures to records; a chunk is then
   waiting for a retry or done;
4. ``watchdog``: a round with reports missing past the bound is abandoned and retried;
5. ``retry``: re-read due chunks from the WAL and produce their failed records;
6. ``prune``: delete done chunks (see :mod:`.prune`);
7. ``forward``: send dead letters to ``dead_letter_topic``.
"""

from __future__ import annotations

import logging
import time
import weakref
from typing import Any, Callable, Sequence

import pyarrow as pa

from .. import _points
from ..config import SinkConfig
from ..deadline import Deadline
from ..errors import WalError
from ..wal.format import decode_chunk
from .attempts import AttemptTracker
from .backlog import BacklogMemory, Inbox, QueueLimits, room_for
from .chunks import ChunkBook, ChunkTracker, State
from .client import ProducerSlot, message_timeout_s
from .contact import BrokerContact
from .dead_letters import DeadLetterRouter
from .explain import PartitionCounts
from .poller import Poller
from .prune import Pruner
from .steps import account_rounds, retry_due, watchdog

__all__ = ["Publisher"]

log = logging.getLogger(__name__)

_LIVE = (State.QUEUED, State.IN_FLIGHT, State.REPORTED, State.RETRY_WAIT)
#: A sync task's flush at its end waits at most this long (and never past its deadline); polling goes on after it.
FLUSH_S = 10.0


class Publisher:
    """Produces chunks, tracks acks, retries from the WAL, prunes.

    Raises (from :meth:`producer`):
        ProducerError: the Kafka configuration was refused (secrets scrubbed).
    """

    def __init__(self, config: SinkConfig, producer_factory: Callable[[dict[str, Any]], Any] | None = None,
                 clock: Callable[[], float] = time.monotonic, *, sink_dir: str | None = None) -> None:
        self.config = config
        self.contact = BrokerContact(config, sink_dir)  # first-contact check (contact.py)
        self.dead_letters = DeadLetterRouter(config)
        self._slot = ProducerSlot(config, self._on_client_error, producer_factory)
        self._book = ChunkBook()
        self.partition_counts = PartitionCounts(self.producer)  # for dead-letter reasons (explain.py)
        self._pruner = Pruner(config, self._book, self.dead_letters,
                              partitions_of=self.partition_counts, on_acked=self.contact.mark_reached)
        self._clock = clock
        self.poller = Poller(config.name, self.tick, lambda: bool(self._inbox or self._book.count(State.QUEUED)),
                             lambda: bool(self._book or self.dead_letters.busy or self._pruner.pending()))
        self._lock = self.poller.lock
        self._inbox = Inbox()  # chunks an async task committed and handed over without the poll lock
        self._memory = BacklogMemory()
        conf = config.producer_conf()
        self._limits = QueueLimits(conf)
        #: A round whose reports are not all in after this long is abandoned and
        #: retried on a fresh producer: librdkafka must have reported every record
        #: by message.timeout.ms; the margin covers a slow poll and the broker's answer.
        self.round_timeout_s = message_timeout_s(conf) * 1.2 + 10.0
        #: How long one record may wait for room in a full client queue, before it
        #: counts as failed and is retried from the WAL.
        self.block_s = max(1.0, min(config.max_block_s, message_timeout_s(conf)))
        self._last_prune = clock()
        self._last_replace = -1e9
        self._next_rid = 0
        self._rounds: weakref.WeakValueDictionary[int, Any] = weakref.WeakValueDictionary()  # live rounds by id
        self.retried_records = 0
        self.step_errors = 0

    # -- the poll lock and the poller thread (poller.py) ------------------------------

    @property
    def lock(self) -> Any:
        """The poll lock (taken before any other lock of the runtime)."""
        return self.poller.lock

    def start(self) -> None:
        """Create the producer, then start the poller thread (idempotent)."""
        self.producer()
        self.poller.start()

    def task(self) -> Any:
        """Context manager: hold the poll lock for a task (see :meth:`.Poller.task`)."""
        return self.poller.task()

    def released(self) -> Any:
        """Context manager: give the poll lock back inside a task (see :meth:`.Poller.released`)."""
        return self.poller.released()

    # -- producer ------------------------------------------------------------------

    def producer(self) -> Any:
        with self._lock:
            return self._slot.get()

    def _on_client_error(self, err: Any) -> None:
        self.contact.client_error(err)
        if err.fatal():
            log.error("sink=%s fatal producer error=%s; the producer will be replaced",
                      self.config.name, self.config.scrub(err.str()))
            self._slot.request_replace(self.config.scrub(err.str()))
        else:
            log.warning("sink=%s producer error=%s", self.config.name, self.config.scrub(err.str()))

    # -- producing -----------------------------------------------------------------

    def produce_chunk(self, t: ChunkTracker, batch: pa.RecordBatch, indices: Sequence[int] | None = None) -> None:
        """Produce a chunk's records (all, or ``indices``) in a new round.

        Records refused synchronously by the client count as failed (retried)
        or dead, like records refused by the broker. If producing raises, the
        chunk waits for a retry from the WAL and the error propagates.
        """
        with self._lock:
            engine = self._slot.get()
            rnd = t.start_round(None if indices is None else list(indices), self._slot.epoch, self._clock())
            self._book.move(t, State.IN_FLIGHT)
            self._next_rid += 1
            rnd.rid = self._next_rid
            self._rounds[rnd.rid] = rnd  # the native engine's reports come back by round id
            ck = t.key
            try:
                produced, sync_failed = engine.produce_chunk(
                    rnd.rid, rnd.on_delivery, batch, indices, self.config.topic, self.config.id_header,
                    b"", ck.first_seq, self.block_s)  # a chunk's ids come from its own id scheme
            except BaseException:
                t.abandon_round()
                self._book.move(t, State.RETRY_WAIT)
                raise
            t.seal(produced, sync_failed)

    def submit_chunk(self, t: ChunkTracker, batch: pa.RecordBatch | None) -> None:
        """Hand a chunk already committed to the WAL to the poller, without the poll lock (async tasks)."""
        self._inbox.put(t, batch)
        self.poller.wake()

    def _take_inbox(self) -> None:
        for t, batch in self._inbox.take():
            self.enqueue_chunk(t, batch)

    def enqueue_chunk(self, t: ChunkTracker, batch: pa.RecordBatch | None) -> None:
        """Fully async mode: the chunk is in the WAL; a later pass produces it.

        The Arrow batch is kept in memory up to a bound, beyond which it is
        read back from the WAL when its turn comes.
        """
        with self._lock:
            self._memory.keep(t, batch)
            self._book.move(t, State.QUEUED)

    def _room_for(self, producer: Any, t: ChunkTracker) -> bool:
        return room_for(self._limits, self._book, producer, t)

    def _read_chunk(self, t: ChunkTracker) -> pa.RecordBatch:
        raw = t.wal.read_chunk(t.key)
        if raw is None:
            raise WalError(f"chunk {t.key} vanished from {t.wal.path}", t.wal.path)
        return decode_chunk(raw)

    # -- one pass ------------------------------------------------------------------

    def _step(self, name: str, fn: Callable[[], Any]) -> Any:
        try:
            _points.point(name)
            return fn()
        except Exception:  # every chunk is still in one well-defined state
            self.step_errors += 1
            log.exception("sink=%s step=%s failed; the next pass carries on", self.config.name, name)
            return None

    def tick(self, timeout_s: float = 0.0, backlog_chunks: int | None = 0) -> int:
        """One pass of the steps in the module docstring; returns the queued chunks produced.

        ``backlog_chunks``: how many queued chunks to produce in this pass, as
        far as the client's queue has room (``None``: as many as fit).
        """
        with self._lock:
            produced = 0
            if self._inbox:
                self._step("poller.inbox", self._take_inbox)
            if backlog_chunks != 0 and self._book.count(State.QUEUED):
                produced = self._step("poller.backlog", lambda: self._produce_backlog(backlog_chunks)) or 0
            self._step("poller.poll", lambda: self._poll(timeout_s))
            self.step_errors += self._step("poller.account", lambda: account_rounds(
                self.config, self._book, self._slot, self.contact, self._read_chunk, self._clock())) or 0
            self._step("poller.watchdog", lambda: watchdog(
                self.config, self._book, self._slot, self._clock(), self.round_timeout_s))
            self.retried_records += self._step("poller.retry", lambda: retry_due(
                self.config, self._book, self._slot, self._read_chunk, self._room_for, self.produce_chunk,
                self._clock())) or 0
            done = self._book.count(State.DONE)
            if done and (done >= 256 or self._clock() - self._last_prune >= self.config.prune_interval_s
                         or (not self._inbox and done == self._book.count(*_LIVE, State.DONE))):
                # every 256 chunks, every interval, and as soon as nothing else is live
                self._step("poller.prune", self.prune)
            self._step("poller.forward", self._forward)
            return produced

    def _forward(self) -> None:
        if self.dead_letters.busy and self._slot.current is not None:
            self.dead_letters.forward(self._slot.current)

    def _produce_backlog(self, max_chunks: int | None) -> int:
        producer = self._slot.get()
        n = 0
        while max_chunks is None or n < max_chunks:
            t = self._book.first(State.QUEUED)
            if t is None or not self._room_for(producer, t):
                break
            batch = self._memory.take(t)
            if batch is None:
                try:
                    batch = self._read_chunk(t)
                except Exception:
                    log.exception("sink=%s cannot read chunk %s to produce it; retrying later", self.config.name, t.key)
                    t.abandon_round()
                    t.schedule_retry(self._clock() + self.config.retry_backoff_max_s)
                    self._book.move(t, State.RETRY_WAIT)
                    continue
            self.produce_chunk(t, batch, None if not t.skip else [i for i in range(t.rows) if i not in t.skip])
            n += 1
        return n

    def _poll(self, timeout_s: float) -> None:
        if self._slot.replace_reason is not None and self._clock() - self._last_replace >= 1.0:
            self._replace_producer()
        for rid, acked, reported, failures in self._slot.get().poll(timeout_s):
            rnd = self._rounds.get(rid)
            if rnd is not None:  # else: a round abandoned since (its chunk went again)
                rnd.add_reports(acked, reported, failures)

    def _replace_producer(self) -> None:
        reason = self._slot.replace_reason
        self._last_replace = self._clock()
        in_flight = self._book.in_state(State.IN_FLIGHT)
        log.error("sink=%s replacing producer after error=%s; re-sending %d chunks",
                  self.config.name, reason, len(in_flight))
        for t in in_flight:
            t.abandon_round()
            self._book.move(t, State.RETRY_WAIT)
        for t in self._book.in_state(State.RETRY_WAIT):
            t.schedule_retry(0.0)
        self._slot.replace()  # the old one is purged: its reports land in abandoned rounds
        self.dead_letters.requeue_unacked()

    def prune(self) -> None:
        """Prune done chunks and finished attempts; store dead letters (one txn per slot).

        A failed WAL write leaves the chunks done (they are acked, so a crash
        before the next try only replays them).
        """
        with self._lock:
            self._last_prune = self._clock()
            self._pruner.run()

    # -- what tasks and the runtime ask ---------------------------------------------

    def make_room(self) -> None:
        """Produce what waits, serve acks and prune now (an append is waiting for WAL space)."""
        self.tick(0.05, backlog_chunks=None)
        self.prune()

    def wait_finished(self, trackers: list[ChunkTracker], deadline: Deadline) -> bool:
        """Flush, then poll (on this thread) until every tracker's records are acked or dead, or the deadline.

        The flush (bounded by the deadline) makes the client send what it
        holds back for ``linger.ms`` at once, as a flush-style producer loop
        (and Spark's own sink, at the end of a task) does; polling alone left
        a task's last records waiting their linger.
        """
        if not all(t.finished for t in trackers) and not deadline.expired():
            with self._lock:
                self._step("poller.flush", lambda: self._slot.get().flush(deadline.cap(FLUSH_S)))
        while not all(t.finished for t in trackers):
            if deadline.expired():
                return False
            self.tick(deadline.cap(0.05), backlog_chunks=None)
        return True

    def attempt_closed(self, attempt: AttemptTracker) -> None:
        """A task committed (or abandoned) its attempt; drop its record once its chunks are gone."""
        with self._lock:
            if attempt.close():
                self._pruner.attempts_done.append(attempt)

    def offer_unreported_dead(self, limit: int = 1000) -> list[tuple[str, str, str]]:
        """Dead letters to offer in a report (not marked: see :meth:`.DeadLetterRouter.confirm`)."""
        with self._lock:
            return self.dead_letters.offer_unreported(limit)

    def confirm_dead_letters(self, tokens: Any) -> int:
        """The driver holds these dead letters: mark them reported."""
        with self._lock:
            return self.dead_letters.confirm(tokens)

    def load_dead_letters(self, wal: Any) -> None:
        with self._lock:
            self.dead_letters.load(wal)

    def references(self, wal: Any) -> bool:
        """Whether anything in flight or queued still needs ``wal`` open."""
        with self._lock:
            if any(t.wal is wal for t in self._book.live()) or any(t.wal is wal for t in self._inbox.trackers()):
                return True
            return self.dead_letters.references(wal)

    def in_flight(self) -> int:
        """Records not yet acked or dead."""
        with self._lock:
            return (sum(t.pending for t in self._book.in_state(*_LIVE))
                    + sum(t.pending for t in self._inbox.trackers()))

    def chunk_states(self) -> dict[str, int]:
        """How many chunks are in each state (reports, tests)."""
        with self._lock:
            states = {s.value: self._book.count(s) for s in State if s not in (State.NEW, State.PRUNED)}
            states[State.QUEUED.value] += len(self._inbox)
            return states

    def idle(self) -> bool:
        with self._lock:
            return not self._book and not self._inbox

    def close(self, timeout_s: float = 5.0) -> None:
        """Stop the poller after a last flush and prune. Optional: correctness never needs it."""
        end = Deadline(timeout_s)
        while not self.idle() and not end.expired():
            self.tick(0.05, backlog_chunks=None)
        self.poller.stop(timeout_s)
        with self._lock:
            self.prune()
            # Whatever the producer still holds is in the WAL: purging it loses nothing.
            self._slot.close()
