"""Publishing WAL chunks to Kafka and tracking their acks.

One :class:`Publisher` per worker process and sink configuration. It owns the
confluent-kafka producer (created lazily, after Spark forked the worker) and a
daemon *poller* thread, which is the only thread that calls ``poll`` -- so
every delivery callback runs there -- and which, between and during tasks:

1. serves delivery callbacks (marking records acked, failed or dead);
2. settles chunk rounds: a chunk whose records are all acked or dead is done;
   one with retriable failures is retried from the WAL after a backoff;
3. checkpoints at least every ``checkpoint_interval_s``: in one WAL
   transaction, stores dead letters and deletes done chunks (and attempts);
4. forwards dead letters to ``dead_letter_topic`` when one is set;
5. replaces the producer after a fatal error and re-sends what it held.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from functools import partial
from typing import Any, Callable, Iterable

import pyarrow as pa

from .config import SinkConfig
from .deadline import Deadline
from .encoding import TOPIC_META, DeadLetter, decode_chunk, encode_dead_letter, record_id, record_id_prefix
from .errors import ProducerError, WalError
from .tracking import NON_RETRIABLE, PRODUCER_RESET, ChunkTracker

__all__ = ["Publisher"]

log = logging.getLogger(__name__)

_DEAD_KEY_FMT = ">QIQI"


class _Columns:
    """Python lists of a normalised chunk's columns, for the produce loop."""

    __slots__ = ("values", "keys", "topics", "partitions", "headers", "timestamps", "topic")

    def __init__(self, batch: pa.RecordBatch, default_topic: str | None) -> None:
        names = batch.schema.names

        def col(name: str) -> list[Any] | None:
            return batch.column(names.index(name)).to_pylist() if name in names else None

        self.values = col("value")
        self.keys = col("key")
        self.topics = col("topic")
        self.partitions = col("partition")
        hdrs = col("headers")
        self.headers = None if hdrs is None else [
            None if h is None else [(x["key"], x["value"]) for x in h] for h in hdrs
        ]
        self.timestamps = col("timestamp")
        meta = batch.schema.metadata or {}
        self.topic = meta.get(TOPIC_META, b"").decode() or default_topic


class Publisher:
    """Produces chunks, tracks acks, retries from the WAL, prunes.

    Raises (from :meth:`producer`):
        ProducerError: the Kafka configuration was refused (secrets scrubbed).
    """

    def __init__(self, config: SinkConfig) -> None:
        self.config = config
        self._producer: Any = None
        self._zombies: deque[Any] = deque(maxlen=4)  # producers replaced after a fatal error
        self._epoch = 0  # bumped each time the producer is replaced
        self._producer_lock = threading.Lock()
        self._incoming: deque[ChunkTracker] = deque()
        self._watch: list[ChunkTracker] = []
        self._retry: list[ChunkTracker] = []
        self._done: deque[ChunkTracker] = deque()
        self._attempts_done: deque[Any] = deque()
        self._dlq_pending: deque[tuple[Any, bytes, DeadLetter, bool]] = deque()
        self.unreported_dead: deque[tuple[Any, bytes, DeadLetter]] = deque()
        self._cv = threading.Condition()
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
            with self._producer_lock:
                if self._producer is None:
                    self._producer = self._new_producer()
        return self._producer

    def _new_producer(self) -> Any:
        from confluent_kafka import KafkaException, Producer

        conf = self.config.producer_conf()
        conf["error_cb"] = self._on_client_error
        try:
            return Producer(conf)
        except (KafkaException, ValueError, TypeError) as exc:
            raise ProducerError(
                f"sink={self.config.name} cannot create the Kafka producer: {self.config.scrub(str(exc))}",
                kafka_error=exc.args[0] if exc.args else None,
            ) from None  # the original may quote secret config values

    def _on_client_error(self, err: Any) -> None:
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

    def produce_chunk(self, t: ChunkTracker, batch: pa.RecordBatch, indices: Iterable[int] | None = None) -> None:
        """Produce a chunk's records (all, or ``indices``) and hand the tracker to the poller.

        Called by the task thread for new and replayed chunks, and by the
        poller thread for retries. Records refused synchronously by the client
        count as failed (retried) or dead, like records refused by the broker.
        """
        on_poller = threading.current_thread() is self._thread
        producer = self.producer()
        produce = producer.produce
        cols = _Columns(batch, self.config.topic)
        ck = t.key
        prefix = record_id_prefix(self.config.name, ck.batch, ck.partition)
        id_header = self.config.id_header
        seq0 = ck.first_seq
        cb = t.on_delivery
        values, keys, topics, parts, hdrs, tss = (
            cols.values, cols.keys, cols.topics, cols.partitions, cols.headers, cols.timestamps)
        topic = cols.topic
        simple = topics is None and parts is None and hdrs is None and tss is None
        sync_failed: list[tuple[int, Any]] = []
        produced = 0
        t.start_round()
        t.epoch = self._epoch
        from confluent_kafka import KafkaException

        for i in (range(t.rows) if indices is None else indices):
            header = [(id_header, b"%b%d" % (prefix, seq0 + i))]
            if simple:
                args: tuple = (topic, values[i], None if keys is None else keys[i])
                kwargs: dict[str, Any] = {"on_delivery": partial(cb, i), "headers": header}
            else:
                if hdrs is not None and hdrs[i]:
                    header.extend(hdrs[i])
                args = (topic if topics is None else topics[i], values[i], None if keys is None else keys[i])
                kwargs = {"on_delivery": partial(cb, i), "headers": header}
                if parts is not None and parts[i] is not None:
                    kwargs["partition"] = parts[i]
                if tss is not None and tss[i] is not None:
                    kwargs["timestamp"] = tss[i]
            while True:
                try:
                    produce(*args, **kwargs)
                    produced += 1
                    break
                except BufferError:
                    self._wait_for_room(producer, on_poller)
                except KafkaException as exc:
                    sync_failed.append((i, exc.args[0]))
                    break
        t.seal(produced, sync_failed)
        if not on_poller:
            self._incoming.append(t)
        elif t not in self._watch:
            self._watch.append(t)

    def _wait_for_room(self, producer: Any, on_poller: bool) -> None:
        if on_poller:
            producer.poll(0.05)
        else:
            with self._cv:
                self._cv.wait(0.01)

    # -- the poller thread -----------------------------------------------------

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._tick()
            except Exception:  # keep the thread alive; every error here is logged
                log.exception("sink=%s poller iteration failed", self.config.name)
                time.sleep(0.5)

    def _tick(self) -> None:
        if self._fatal is not None and time.monotonic() - self._last_replace >= 1.0:
            self._last_replace = time.monotonic()
            self._replace_producer()
        producer = self.producer()
        busy = bool(self._watch or self._incoming or self._retry)
        served = producer.poll(0.05 if busy else 0.2)
        while self._incoming:
            t = self._incoming.popleft()
            if t.epoch != self._epoch:  # produced on a producer replaced meanwhile: send again
                self._resend(t)
            else:
                self._watch.append(t)
        settled = self._settle_rounds()
        self._retry_due()
        now = time.monotonic()
        if self._done and (now - self._last_ckpt >= self.config.checkpoint_interval_s or len(self._done) >= 256):
            self.checkpoint()
        if self._dlq_pending:
            self._forward_dead_letters()
        if served or settled:
            with self._cv:
                self._cv.notify_all()
        if not busy and self.on_idle is not None:
            self.on_idle()

    def _settle_rounds(self) -> int:
        settled = 0
        keep: list[ChunkTracker] = []
        now = time.monotonic()
        for t in self._watch:
            if not t.round_done:
                keep.append(t)
                continue
            settled += 1
            for i, err in t.sync_failed:
                if err.code() in NON_RETRIABLE:
                    t.dead.append((i, err.code(), err.str()))
                else:
                    t.failed.append((i, err))
            t.sync_failed = []
            reset = next((e for _i, e in t.failed if e.code() in PRODUCER_RESET), None)
            if reset is not None and self._fatal is None:
                self._fatal = reset  # replaced on the next tick; this chunk is re-sent then
            if t.failed:
                delay = min(self.config.retry_backoff_max_s, self.config.retry_backoff_s * (2 ** t.retries))
                t.next_retry_at = now + delay
                i, err = t.failed[0]
                log.warning(
                    "sink=%s batch=%d partition=%d first_seq=%d failed=%d error=%s retry_in_s=%.2f",
                    self.config.name, t.key.batch, t.key.partition, t.key.first_seq, len(t.failed),
                    self.config.scrub(err.str()), delay,
                )
                self._retry.append(t)
            else:
                t.finished = True
                self._done.append(t)
        self._watch = keep
        return settled

    def _retry_due(self) -> None:
        if not self._retry:
            return
        now = time.monotonic()
        due = [t for t in self._retry if t.next_retry_at <= now]
        if not due:
            return
        self._retry = [t for t in self._retry if t.next_retry_at > now]
        for t in due:
            indices = sorted(i for i, _ in t.failed)
            try:
                raw = t.wal.read_chunk(t.key)
                if raw is None:
                    raise WalError(f"chunk {t.key} vanished from {t.wal.path}", t.wal.path)
                batch = decode_chunk(raw)
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
        with self._producer_lock:
            if self._producer is not None:
                self._zombies.append(self._producer)  # never polled again: its callbacks never run
            self._producer = self._new_producer()
            self._epoch += 1
        # Every record in flight on the old producer is unknown: send again what is not acked.
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
            attempts: list[Any] = []
            while self._attempts_done:
                attempts.append(self._attempts_done.popleft())
            if not done and not attempts:
                return
            by_wal: dict[int, tuple[Any, list[ChunkTracker], list[Any]]] = {}
            for t in done:
                by_wal.setdefault(id(t.wal), (t.wal, [], []))[1].append(t)
            for a in attempts:
                by_wal.setdefault(id(a.wal), (a.wal, [], []))[2].append(a.key)
            for wal, trackers, attempt_keys in by_wal.values():
                finished_attempts = list(attempt_keys)
                for t in trackers:
                    if t.attempt.chunk_pruned():
                        finished_attempts.append(t.attempt.key)
                try:
                    dead = [d for t in trackers if t.dead for d in self._dead_letters(t)]
                    wal.prune(chunks=[(t.key, t.size) for t in trackers], dead=dead,
                              attempts_done=finished_attempts)
                except WalError:
                    log.exception("sink=%s checkpoint of %s failed; will retry", self.config.name, wal.path)
                    for t in trackers:
                        t.attempt.add_chunk()
                    self._done.extend(trackers)
                    self._attempts_done.extend(a for a in attempts if a.wal is wal)
                    continue
                for dkey, d in dead:
                    self._on_dead_letter(wal, dkey, d)

    def _dead_letters(self, t: ChunkTracker) -> list[tuple[bytes, DeadLetter]]:
        import struct

        from .encoding import iter_rows

        raw = t.wal.read_chunk(t.key)
        rows = list(iter_rows(decode_chunk(raw), self.config.topic)) if raw is not None else []
        out = []
        for i, code, text in t.dead:
            seq = t.key.first_seq + i
            r = rows[i] if i < len(rows) else {}
            d = DeadLetter(
                record_id=record_id(self.config.name, t.key.batch, t.key.partition, seq),
                error_code=code, error=self.config.scrub(text), topic=r.get("topic") or "",
                partition=r.get("partition"), key=r.get("key"), value=r.get("value"),
                headers=tuple(r.get("headers") or ()), timestamp_ms=r.get("timestamp"),
            )
            out.append((struct.pack(_DEAD_KEY_FMT, t.key.batch, t.key.partition, seq, t.key.gen), d))
        return out

    # -- dead letters --------------------------------------------------------------

    def _on_dead_letter(self, wal: Any, dkey: bytes, d: DeadLetter) -> None:
        log.error("sink=%s dead_letter record_id=%s topic=%s error_code=%d error=%s dead_letter_topic=%s",
                  self.config.name, d.record_id, d.topic, d.error_code, d.error, self.config.dead_letter_topic)
        if self.config.dead_letter_topic and not d.forwarded:
            self._dlq_pending.append((wal, dkey, d, False))
        elif not self.config.dead_letter_topic and not d.reported:
            self.unreported_dead.append((wal, dkey, d))

    def load_dead_letters(self, wal: Any) -> None:
        """Queue a slot's stored dead letters that still need forwarding or reporting."""
        for dkey, d in wal.dead_letters():
            if (self.config.dead_letter_topic and not d.forwarded) or (
                    not self.config.dead_letter_topic and not d.reported):
                self._on_dead_letter(wal, dkey, d)

    def _forward_dead_letters(self) -> None:
        from confluent_kafka import KafkaException

        producer = self.producer()
        while self._dlq_pending:
            wal, dkey, d, omit = self._dlq_pending.popleft()
            headers = [(self.config.id_header, d.record_id.encode()), ("rks-error", d.error.encode()),
                       ("rks-error-code", str(d.error_code).encode()), ("rks-topic", d.topic.encode())]
            value = d.value
            if omit:
                # The payload itself is what the topic refuses: send the id and the
                # reason; the WAL's dead-letter store keeps the full record.
                headers.append(("rks-payload-omitted", str(len(d.value or b"")).encode()))
                value = None
            headers.extend(d.headers)
            try:
                producer.produce(self.config.dead_letter_topic, value, d.key, headers=headers,
                                 on_delivery=partial(self._on_dlq_delivery, wal, dkey, d, omit))
            except BufferError:
                self._dlq_pending.appendleft((wal, dkey, d, omit))
                return
            except KafkaException as exc:
                self._dlq_failed(wal, dkey, d, omit, exc.args[0])

    def _dlq_failed(self, wal: Any, dkey: bytes, d: DeadLetter, omit: bool, err: Any) -> None:
        log.warning("sink=%s dead letter record_id=%s not forwarded to %s: %s",
                    self.config.name, d.record_id, self.config.dead_letter_topic, self.config.scrub(err.str()))
        if err.code() in NON_RETRIABLE and omit:
            # Not even the id alone can go: keep it in the WAL and report it instead.
            self.unreported_dead.append((wal, dkey, d))
            return
        self._dlq_pending.append((wal, dkey, d, omit or err.code() in NON_RETRIABLE))

    def _on_dlq_delivery(self, wal: Any, dkey: bytes, d: DeadLetter, omit: bool, err: Any, _msg: Any) -> None:
        if err is not None:
            self._dlq_failed(wal, dkey, d, omit, err)
            return
        from dataclasses import replace

        try:
            wal.put_dead_letters([(dkey, replace(d, forwarded=True))])
        except WalError:
            log.exception("sink=%s cannot mark dead letter %s forwarded", self.config.name, d.record_id)

    def take_unreported_dead(self, limit: int = 1000) -> list[tuple[str, str]]:
        """Dead letters not yet reported to the driver (no dead-letter topic set).

        They are marked reported in their WAL; they stay in its dead-letter store.
        """
        from dataclasses import replace

        taken: list[tuple[Any, bytes, DeadLetter]] = []
        while self.unreported_dead and len(taken) < limit:
            taken.append(self.unreported_dead.popleft())
        by_wal: dict[int, tuple[Any, list[tuple[bytes, DeadLetter]]]] = {}
        for wal, dkey, d in taken:
            by_wal.setdefault(id(wal), (wal, []))[1].append((dkey, replace(d, reported=True)))
        for wal, items in by_wal.values():
            try:
                wal.put_dead_letters(items)
            except WalError:
                log.exception("sink=%s cannot mark dead letters reported in %s", self.config.name, wal.path)
        return [(d.record_id, d.error) for _w, _k, d in taken]

    def references(self, wal: Any) -> bool:
        """Whether anything in flight or queued still needs ``wal`` open."""
        for t in list(self._watch) + list(self._retry) + list(self._incoming) + list(self._done):
            if t.wal is wal:
                return True
        return any(x[0] is wal for x in list(self._dlq_pending) + list(self.unreported_dead))

    # -- waiting -------------------------------------------------------------------

    def wait_finished(self, trackers: list[ChunkTracker], deadline: Deadline) -> bool:
        """Wait until every tracker's records are acked or dead, or the deadline passes."""
        with self._cv:
            while True:
                if all(t.finished for t in trackers):
                    return True
                if deadline.expired():
                    return False
                self._cv.wait(deadline.cap(0.1))

    def attempt_closed(self, attempt: Any) -> None:
        """A task committed (or abandoned) its attempt; drop its record once its chunks are gone."""
        if attempt.close():
            self._attempts_done.append(attempt)

    def in_flight(self) -> int:
        """Records not yet acked or dead (approximate; read from another thread)."""
        ts = list(self._watch) + list(self._retry) + list(self._incoming)
        return sum(t.pending for t in ts)

    def idle(self) -> bool:
        return not (self._watch or self._retry or self._incoming or self._done)

    def close(self, timeout_s: float = 5.0) -> None:
        """Stop the poller after a last flush and checkpoint. Optional: correctness never needs it."""
        if self._thread is not None and self._thread.is_alive():
            end = Deadline(timeout_s)
            while not self.idle() and not end.expired():
                time.sleep(0.02)
            self._stop.set()
            self._thread.join(timeout_s)
        self.checkpoint()
        # Whatever the producer still holds is in the WAL: dropping it loses nothing.
        self._producer = None
        self._zombies.clear()
