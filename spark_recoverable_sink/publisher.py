"""Publishing WAL chunks to Kafka and tracking their acks.

One :class:`Publisher` per worker process and sink configuration. It owns the
confluent-kafka producer (created lazily, after Spark forked the worker) and a
daemon poller thread. All delivery state is changed under one reentrant *poll
lock*: whoever holds it calls ``poll`` and so runs the delivery callbacks.
During a task the task thread holds it and polls inline, as a plain producer
loop would (no GIL ping-pong between threads); between tasks the poller
thread takes it. Each :meth:`tick`:

1. serves delivery callbacks (records acked, or failed with their content);
2. settles finished rounds: failures are matched to record indices; a chunk
   with retriable failures is retried from the WAL after a backoff, one with
   every record acked or dead is done;
3. checkpoints at least every ``checkpoint_interval_s``: in one WAL
   transaction per slot, stores dead letters and deletes done chunks and
   finished attempts;
4. forwards dead letters to ``dead_letter_topic`` when one is set;
5. replaces the producer after a fatal or fencing error and re-sends what it held.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections import deque
from typing import Any, Callable, Iterator, Sequence

import pyarrow as pa

from .config import SinkConfig
from .contact import BrokerContact
from .deadline import Deadline
from .dead_letters import DeadLetterRouter, dead_letters_of
from .encoding import TOPIC_META, decode_chunk, record_id_prefix
from .errors import ProducerError, WalError
from .explain import PartitionCounts
from .tracking import PRODUCER_RESET, AttemptTracker, ChunkTracker

__all__ = ["Publisher"]

log = logging.getLogger(__name__)

_POLL_EVERY = 1024  # records between two inline poll(0) calls
_BACKLOG_MEMORY = 256 * 1024 * 1024  # async chunks kept in memory; more are read back from the WAL


def _column(batch: pa.RecordBatch, name: str) -> list[Any] | None:
    i = batch.schema.get_field_index(name)
    return None if i < 0 else batch.column(i).to_pylist()


def _chunk_topic(batch: pa.RecordBatch, default_topic: str | None) -> str | None:
    meta = batch.schema.metadata or {}
    return meta.get(TOPIC_META, b"").decode() or default_topic


class Publisher:
    """Produces chunks, tracks acks, retries from the WAL, prunes.

    Raises (from :meth:`producer`):
        ProducerError: the Kafka configuration was refused (secrets scrubbed).
    """

    def __init__(self, config: SinkConfig, sink_dir: str | None = None) -> None:
        self.config = config
        self.contact = BrokerContact(config, sink_dir)  # first-contact check (contact.py)
        self.dead_letters = DeadLetterRouter(config)
        self.partition_counts = PartitionCounts(self.producer)  # for dead-letter reasons (explain.py)
        self._producer: Any = None
        self._zombies: deque[Any] = deque(maxlen=4)  # replaced producers, never polled again
        self._epoch = 0  # bumped each time the producer is replaced
        self._lock = threading.RLock()  # the poll lock: all delivery state changes under it
        self._tasks_waiting = 0  # the poller steps aside while a task waits for the lock
        self._backlog: deque[tuple[ChunkTracker, pa.RecordBatch | None]] = deque()  # async: not yet produced
        self._backlog_bytes = 0
        conf = config.producer_conf()
        self._queue_messages = int(conf.get("queue.buffering.max.messages", 100_000))
        self._queue_bytes = int(conf.get("queue.buffering.max.kbytes", 1_048_576)) * 1024
        self._watch: list[ChunkTracker] = []
        self._retry: list[ChunkTracker] = []
        self._done: deque[ChunkTracker] = deque()
        self._attempts_done: deque[AttemptTracker] = deque()
        self._ckpt_lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._fatal: Any = None
        self._last_ckpt = time.monotonic()
        self._last_replace = 0.0
        self.retried_records = 0
        self.on_idle: Callable[[], None] | None = None

    # -- producer ----------------------------------------------------------------

    def producer(self) -> Any:
        if self._producer is None:
            with self._lock:
                if self._producer is None:
                    self._producer = self._new_producer()
        return self._producer

    def _new_producer(self) -> Any:
        from confluent_kafka import KafkaException, Producer

        conf: dict[str, Any] = dict(self.config.producer_conf())
        conf["error_cb"] = self._on_client_error
        try:
            return Producer(conf)
        except (KafkaException, ValueError, TypeError) as exc:
            raise ProducerError(
                f"sink={self.config.name} cannot create the Kafka producer: {self.config.scrub(str(exc))}",
                kafka_error=exc.args[0] if exc.args else None,
            ) from None  # the original may quote secret config values

    def _on_client_error(self, err: Any) -> None:
        self.contact.client_error(err)
        if err.fatal():
            log.error("sink=%s fatal producer error=%s; the producer will be replaced",
                      self.config.name, self.config.scrub(err.str()))
            self._fatal = err
        else:
            log.warning("sink=%s producer error=%s", self.config.name, self.config.scrub(err.str()))

    def start(self) -> None:
        """Start the poller thread (idempotent)."""
        if self._thread is None or not self._thread.is_alive():
            self.producer()
            self._thread = threading.Thread(target=self._run, name=f"rks-poller-{self.config.name}", daemon=True)
            self._thread.start()

    # -- producing ----------------------------------------------------------------

    def produce_chunk(self, t: ChunkTracker, batch: pa.RecordBatch, indices: Sequence[int] | None = None) -> None:
        """Produce a chunk's records (all, or ``indices``) and track them.

        Records refused synchronously by the client count as failed (retried)
        or dead, like records refused by the broker.
        """
        with self._lock:
            producer = self.producer()
            t.start_round(None if indices is None else list(indices))
            t.epoch = self._epoch
            self._watch.append(t)
            produced, sync_failed = self._produce_rows(producer, t, batch, indices)
            t.seal(produced, sync_failed)

    def enqueue_chunk(self, t: ChunkTracker, batch: pa.RecordBatch | None) -> None:
        """Fully async mode: the chunk is in the WAL; the poller thread produces it later.

        The Arrow batch is kept in memory up to a bound, beyond which it is
        read back from the WAL when its turn comes.
        """
        with self._lock:
            keep = batch is not None and self._backlog_bytes + t.size <= _BACKLOG_MEMORY
            self._backlog.append((t, batch if keep else None))
            self._backlog_bytes += t.size if keep else 0

    def _room_for(self, producer: Any, t: ChunkTracker) -> bool:
        """Whether the client's queue can take a whole chunk without blocking."""
        queued = len(producer)
        if queued == 0:
            return True  # a chunk larger than the queue still goes, when nothing else waits
        in_flight_bytes = sum(w.size for w in self._watch)
        return (queued + t.rows <= self._queue_messages * 0.9
                and in_flight_bytes + t.size <= self._queue_bytes * 0.9)

    def _produce_backlog(self, max_chunks: int | None) -> int:
        """Produce waiting chunks while the client's queue has room; never blocks."""
        producer = self.producer()
        n = 0
        while self._backlog and (max_chunks is None or n < max_chunks):
            t, batch = self._backlog[0]
            if not self._room_for(producer, t):
                break
            self._backlog.popleft()
            if batch is not None:
                self._backlog_bytes -= t.size
            else:
                try:
                    batch = self._read_chunk(t)
                except WalError:
                    log.exception("sink=%s cannot read chunk %s to produce it; retrying later",
                                  self.config.name, t.key)
                    self._backlog.append((t, None))
                    break
            skip = t.skip
            self.produce_chunk(t, batch, None if not skip else [i for i in range(t.rows) if i not in skip])
            n += 1
        return n

    def _produce_rows(self, producer: Any, t: ChunkTracker, batch: pa.RecordBatch,
                      indices: Sequence[int] | None) -> tuple[int, list[tuple[int, Any]]]:
        from confluent_kafka import KafkaException

        produce, poll = producer.produce, producer.poll
        cb = t.on_delivery
        ck = t.key
        prefix = record_id_prefix(self.config.name, ck.batch, ck.partition)
        idh = self.config.id_header
        seq0 = ck.first_seq
        values = _column(batch, "value")
        assert values is not None
        keys = _column(batch, "key") or [None] * len(values)
        topic = _chunk_topic(batch, self.config.topic)
        topics, parts = _column(batch, "topic"), _column(batch, "partition")
        hdrs, tss = _column(batch, "headers"), _column(batch, "timestamp")
        rows = range(t.rows) if indices is None else indices
        sync_failed: list[tuple[int, Any]] = []
        n = 0
        if topics is None and parts is None and hdrs is None and tss is None:
            for i in rows:  # the common case, kept tight: ~1 produce call per record
                try:
                    produce(topic, values[i], keys[i], on_delivery=cb, headers=[(idh, b"%b%d" % (prefix, seq0 + i))])
                except BufferError:
                    self._produce_blocking(producer, sync_failed, i, (topic, values[i], keys[i]),
                                           {"on_delivery": cb, "headers": [(idh, b"%b%d" % (prefix, seq0 + i))]})
                except KafkaException as exc:
                    sync_failed.append((i, exc.args[0]))
                n += 1
                if not n % _POLL_EVERY:
                    poll(0)
        else:
            for i in rows:
                header = [(idh, b"%b%d" % (prefix, seq0 + i))]
                if hdrs is not None and hdrs[i]:
                    header.extend((h["key"], h["value"]) for h in hdrs[i])
                kwargs: dict[str, Any] = {"on_delivery": cb, "headers": header}
                if parts is not None and parts[i] is not None:
                    kwargs["partition"] = parts[i]
                if tss is not None and tss[i] is not None:
                    kwargs["timestamp"] = tss[i]
                args = (topic if topics is None else topics[i], values[i], keys[i])
                try:
                    produce(*args, **kwargs)
                except BufferError:
                    self._produce_blocking(producer, sync_failed, i, args, kwargs)
                except KafkaException as exc:
                    sync_failed.append((i, exc.args[0]))
                n += 1
                if not n % _POLL_EVERY:
                    poll(0)
        return n - len(sync_failed), sync_failed

    @staticmethod
    def _produce_blocking(producer: Any, sync_failed: list[tuple[int, Any]], i: int, args: tuple,
                          kwargs: dict[str, Any]) -> None:
        """The client's queue is full: serve callbacks until it takes the record."""
        from confluent_kafka import KafkaException

        while True:
            producer.poll(0.05)
            try:
                producer.produce(*args, **kwargs)
                return
            except BufferError:
                continue
            except KafkaException as exc:
                sync_failed.append((i, exc.args[0]))
                return

    # -- ticking -------------------------------------------------------------------

    def _run(self) -> None:
        while not self._stop.is_set():
            if self._tasks_waiting:  # a lock is not fair: let the task have it
                self._stop.wait(0.001)
                continue
            try:
                if self._backlog and self.tick(0, backlog_chunks=1):
                    continue  # one chunk at a time: a task may be waiting
                if self._backlog or self._watch or self._retry or self._done or self.dead_letters.busy:
                    self.tick(0.02)
                else:
                    self.tick(0)
                    if self.on_idle is not None:
                        self.on_idle()
                    self._stop.wait(0.1)
            except Exception:  # keep the thread alive; every error here is logged
                log.exception("sink=%s poller iteration failed", self.config.name)
                time.sleep(0.5)

    def tick(self, timeout_s: float = 0.0, backlog_chunks: int | None = 0) -> int:
        """One round of the work described in the module docstring.

        ``backlog_chunks``: how many waiting chunks (async writes, replays) to
        produce in this round, as far as the client's queue has room (``None``:
        as many as fit). Returns how many were produced.
        """
        produced = 0
        with self._lock:
            if backlog_chunks != 0 and self._backlog:
                produced = self._produce_backlog(backlog_chunks)
            if self._fatal is not None and time.monotonic() - self._last_replace >= 1.0:
                self._last_replace = time.monotonic()
                self._replace_producer()
            producer = self.producer()
            producer.poll(timeout_s)
            self._settle_rounds()
            self._retry_due()
            if self._done and (time.monotonic() - self._last_ckpt >= self.config.checkpoint_interval_s
                               or len(self._done) >= 256):
                self.checkpoint()
            if self.dead_letters.busy:
                self.dead_letters.forward(producer)
        return produced

    def _settle_rounds(self) -> None:
        keep: list[ChunkTracker] = []
        now = time.monotonic()
        for t in self._watch:
            if t.epoch != self._epoch:  # produced on a producer replaced meanwhile
                self._resend(t)
                continue
            if not t.round_done:
                keep.append(t)
                continue
            t.settle_sync_failures()
            if t.failed_raw:
                self._resolve(t)
            reset = next((e for _i, e in t.failed if e is not None and e.code() in PRODUCER_RESET), None)
            if reset is not None and self._fatal is None:
                self._fatal = reset  # replaced on the next tick; this chunk is re-sent then
            if t.failed:
                delay = min(self.config.retry_backoff_max_s, self.config.retry_backoff_s * (2 ** t.retries))
                t.next_retry_at = now + delay
                err = t.failed[0][1]
                log.warning(
                    "sink=%s batch=%d partition=%d first_seq=%d failed=%d error=%s retry_in_s=%.2f",
                    self.config.name, t.key.batch, t.key.partition, t.key.first_seq, len(t.failed),
                    self.config.scrub(err.str()) if err is not None else "-", delay,
                )
                self._retry.append(t)
            else:
                t.finished = True
                self._done.append(t)
        self._watch = keep

    def _read_chunk(self, t: ChunkTracker) -> pa.RecordBatch:
        raw = t.wal.read_chunk(t.key)
        if raw is None:
            raise WalError(f"chunk {t.key} vanished from {t.wal.path}", t.wal.path)
        return decode_chunk(raw)

    def _resolve(self, t: ChunkTracker) -> None:
        """Match a round's failed delivery reports to record indices (slow path)."""
        try:
            batch = self._read_chunk(t)
        except WalError:
            log.exception("sink=%s cannot read chunk %s to match failures; retrying its whole round",
                          self.config.name, t.key)
            t.fail_round()  # the caller schedules the retry, as for any failure
            return
        topic = _chunk_topic(batch, self.config.topic)
        values = _column(batch, "value") or []
        topics = _column(batch, "topic") or [topic] * len(values)
        keys = _column(batch, "key") or [None] * len(values)
        t.resolve_failures(topics, keys, values)

    def _retry_due(self) -> None:
        if not self._retry:
            return
        now = time.monotonic()
        due = [t for t in self._retry if t.next_retry_at <= now]
        if not due:
            return
        self._retry = [t for t in self._retry if t.next_retry_at > now]
        producer = self.producer()
        for t in due:
            if not self._room_for(producer, t):
                self._retry.append(t)  # the client's queue is full: never block the poll lock on it
                continue
            indices = sorted({i for i, _ in t.failed})
            try:
                batch = self._read_chunk(t)
            except WalError:
                log.exception("sink=%s cannot read chunk %s for retry; keeping it for later", self.config.name, t.key)
                t.next_retry_at = now + self.config.retry_backoff_max_s
                self._retry.append(t)
                continue
            t.retries += 1
            t.retried_records += len(indices)
            self.retried_records += len(indices)
            self.produce_chunk(t, batch, indices)

    def _replace_producer(self) -> None:
        err, self._fatal = self._fatal, None
        if self._producer is not None:
            self._zombies.append(self._producer)  # never polled again: its callbacks never run
        self._producer = self._new_producer()
        self._epoch += 1
        pending = self._watch + self._retry
        self._watch, self._retry = [], []
        log.error("sink=%s replaced producer after error=%s; re-sending %d chunks",
                  self.config.name, self.config.scrub(err.str()), len(pending))
        for t in pending:
            self._resend(t)

    def _resend(self, t: ChunkTracker) -> None:
        """Queue every record of a chunk that is not known dead for sending again."""
        dead = {i for i, _c, _e in t.dead} | t.skip
        t.acked = 0  # which records the old producer got acked is unknown: all go again
        t.failed = [(i, None) for i in range(t.rows) if i not in dead]
        t.failed_raw = []
        t.next_retry_at = 0.0
        self._retry.append(t)

    # -- checkpoint --------------------------------------------------------------

    def checkpoint(self) -> None:
        """Prune done chunks and finished attempts; store dead letters (one txn per slot).

        Safe to call from any thread. A failed WAL write leaves the chunks
        queued (they are acked, so a crash before the next try only replays them).
        """
        with self._ckpt_lock:
            self._last_ckpt = time.monotonic()
            done: list[ChunkTracker] = []
            while self._done:
                done.append(self._done.popleft())
            attempts: list[AttemptTracker] = []
            while self._attempts_done:
                attempts.append(self._attempts_done.popleft())
            if not done and not attempts:
                return
            if any(t.acked for t in done):
                self.contact.mark_reached()
            by_wal: dict[int, tuple[Any, list[ChunkTracker], list[AttemptTracker]]] = {}
            for t in done:
                by_wal.setdefault(id(t.wal), (t.wal, [], []))[1].append(t)
            for a in attempts:
                by_wal.setdefault(id(a.wal), (a.wal, [], []))[2].append(a)
            for wal, trackers, closed in by_wal.values():
                finished = [a.key for a in closed]
                for t in trackers:
                    if t.attempt.chunk_pruned():
                        finished.append(t.attempt.key)
                try:
                    dead = [d for t in trackers if t.dead
                            for d in dead_letters_of(self.config, t, self.partition_counts)]
                    wal.prune(chunks=[(t.key, t.size) for t in trackers], dead=dead, attempts_done=finished)
                except WalError:
                    log.exception("sink=%s checkpoint of %s failed; will retry", self.config.name, wal.path)
                    for t in trackers:
                        t.attempt.add_chunk()
                    self._done.extend(trackers)
                    self._attempts_done.extend(closed)
                    continue
                for dkey, d in dead:
                    self.dead_letters.stored(wal, dkey, d)

    # -- what tasks and the runtime ask ------------------------------------------------

    @property
    def lock(self) -> threading.RLock:
        """The poll lock (taken before any other lock of the runtime)."""
        return self._lock

    @contextlib.contextmanager
    def task(self) -> Iterator[None]:
        """Hold the poll lock for a task: the task thread polls, the poller waits."""
        self._tasks_waiting += 1
        try:
            self._lock.acquire()
        finally:
            self._tasks_waiting -= 1
        try:
            yield
        finally:
            self._lock.release()

    def make_room(self) -> None:
        """Produce what waits, serve acks and prune now (an append is waiting for WAL space)."""
        self.tick(0.05, backlog_chunks=None)
        self.checkpoint()

    def wait_finished(self, trackers: list[ChunkTracker], deadline: Deadline) -> bool:
        """Poll (on this thread) until every tracker's records are acked or dead, or the deadline."""
        while not all(t.finished for t in trackers):
            if deadline.expired():
                return False
            self.tick(deadline.cap(0.05), backlog_chunks=None)
        return True

    def attempt_closed(self, attempt: AttemptTracker) -> None:
        """A task committed (or abandoned) its attempt; drop its record once its chunks are gone."""
        if attempt.close():
            self._attempts_done.append(attempt)

    def take_unreported_dead(self, limit: int = 1000) -> list[tuple[str, str]]:
        with self._lock:
            return self.dead_letters.take_unreported(limit)

    def load_dead_letters(self, wal: Any) -> None:
        with self._lock:
            self.dead_letters.load(wal)

    def references(self, wal: Any) -> bool:
        """Whether anything in flight or queued still needs ``wal`` open."""
        with self._lock:
            backlog = [t for t, _b in self._backlog]
            if any(t.wal is wal for t in self._watch + self._retry + list(self._done) + backlog):
                return True
            return self.dead_letters.references(wal)

    def in_flight(self) -> int:
        """Records not yet acked or dead."""
        with self._lock:
            return sum(t.pending for t in self._watch + self._retry + [t for t, _b in self._backlog])

    def idle(self) -> bool:
        return not (self._backlog or self._watch or self._retry or self._done)

    def close(self, timeout_s: float = 5.0) -> None:
        """Stop the poller after a last flush and checkpoint. Optional: correctness never needs it."""
        end = Deadline(timeout_s)
        while not self.idle() and not end.expired():
            self.tick(0.05, backlog_chunks=None)
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
        self.checkpoint()
        # Whatever the producer still holds is in the WAL: dropping it loses nothing.
        self._producer = None
        self._zombies.clear()
