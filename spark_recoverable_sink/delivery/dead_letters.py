"""Records refused for good: stored in the WAL, forwarded or reported.

A record whose delivery failed with a non-retriable error is written to its
slot's dead-letter table in the same transaction that deletes its chunk, so it
is never nowhere. Then, in order of preference:

* with ``dead_letter_topic`` set, it is produced there (headers ``rks-id``,
  ``rks-error``, ``rks-error-code``, ``rks-topic``); a payload the topic also
  refuses is sent without its value, flagged ``rks-payload-omitted``; once
  acked it is marked forwarded;
* without one, it is offered in every task report of this worker until the
  driver, holding a successful job's report rows, confirms it in a later job
  (its token travels in the task closure); it is then marked reported. The
  driver raises :class:`.DeadLetterError` naming it at the end of the batch
  that brought it.

It stays in the WAL's dead-letter table either way, for the operator.
"""

from __future__ import annotations

import itertools
import logging
import socket
import struct
from collections import deque
from dataclasses import replace
from functools import partial
from typing import TYPE_CHECKING, Any, Callable, Collection

import pyarrow as pa

from ..config import SinkConfig
from ..errors import WalError
from ..ids import record_id_at
from ..schema import iter_rows
from ..wal.format import ChunkKey, decode_chunk
from ..wal.records import DeadLetter
from .chunks import ChunkTracker
from .codes import NON_RETRIABLE
from .explain import explain

if TYPE_CHECKING:  # pragma: no cover
    from ..wal.log import Wal

__all__ = ["DeadLetterRouter", "dead_letters_of", "dead_letters_from", "dead_letter_token"]

log = logging.getLogger(__name__)

_DEAD_KEY = struct.Struct(">QIQI")


def dead_letters_of(config: SinkConfig, t: ChunkTracker,
                    partitions_of: Callable[[str], int | None] | None = None) -> list[tuple[bytes, DeadLetter]]:
    """The dead letters of an accounted chunk, with their records read back from the WAL.

    ``partitions_of`` (topic -> partition count) lets the reason of an
    unknown partition say how many the topic has (see :mod:`.explain`).

    Raises:
        WalError: the chunk is no longer in the WAL (nothing is stored; the next prune tries again).
    """
    raw = t.wal.read_chunk(t.key)
    if raw is None:
        raise WalError(f"chunk {t.key} vanished from {t.wal.path} before its dead letters were stored", t.wal.path)
    return dead_letters_from(config, t.key, decode_chunk(raw), t.dead, partitions_of)


def dead_letters_from(config: SinkConfig, key: ChunkKey, batch: pa.RecordBatch, dead: list[tuple[int, int, str]],
                      partitions_of: Callable[[str], int | None] | None = None) -> list[tuple[bytes, DeadLetter]]:
    """Dead letters (WAL key, record) of the records ``dead`` (index, error code, error text) of a chunk."""
    rows = list(iter_rows(batch, config.topic))
    out = []
    for i, code, text in dead:
        r = rows[i]
        d = DeadLetter(
            record_id=record_id_at(batch, key.first_seq, i).hex(),
            error_code=code, error=config.scrub(explain(
                config, code, text, r.get("topic") or "", r.get("partition"), _size(r), partitions_of)),
            topic=r.get("topic") or "",
            partition=r.get("partition"), key=r.get("key"), value=r.get("value"),
            headers=tuple(r.get("headers") or ()), timestamp_ms=r.get("timestamp"),
        )
        out.append((_DEAD_KEY.pack(key.batch, key.origin, key.first_seq + i, key.gen), d))
    return out


def _size(r: dict[str, Any]) -> int:
    headers = sum(len(k or "") + len(v or b"") for k, v in (r.get("headers") or ()))
    return len(r.get("value") or b"") + len(r.get("key") or b"") + headers


_HOST = socket.gethostname()


def dead_letter_token(wal: "Wal", dkey: bytes) -> str:
    """What tells one stored dead letter from every other: host, slot path and WAL key.

    Stable when another process adopts the slot (same path, same key), and
    different for a re-run that refuses the same record again (a new key).
    """
    return f"{_HOST}:{wal.path}:{dkey.hex()}"


class DeadLetterRouter:
    """Forwards stored dead letters to the dead-letter topic, or queues them for the report."""

    def __init__(self, config: SinkConfig) -> None:
        self.config = config
        self._pending: deque[tuple["Wal", bytes, DeadLetter, bool]] = deque()  # (..., omit payload)
        self._unreported: deque[tuple["Wal", bytes, DeadLetter]] = deque()
        # produced, report not in yet: token -> entry (re-queued if their producer is replaced)
        self._sent: dict[int, tuple["Wal", bytes, DeadLetter, bool]] = {}
        self._token = 0

    @property
    def busy(self) -> bool:
        return bool(self._pending) or bool(self._sent)

    def stored(self, wal: "Wal", dkey: bytes, d: DeadLetter, announce: bool = True) -> None:
        """A dead letter is in the WAL: route it (``announce``: one ERROR line for it)."""
        if announce:
            log.error("sink=%s dead_letter record_id=%s topic=%s error_code=%d error=%s dead_letter_topic=%s",
                      self.config.name, d.record_id, d.topic, d.error_code, d.error, self.config.dead_letter_topic)
        if self.config.dead_letter_topic and not d.forwarded:
            self._pending.append((wal, dkey, d, False))
        elif not self.config.dead_letter_topic and not d.reported:
            self._unreported.append((wal, dkey, d))

    def load(self, wal: "Wal") -> None:
        """Route a slot's stored dead letters that still need forwarding or reporting."""
        for dkey, d in wal.dead_letters():
            if (self.config.dead_letter_topic and not d.forwarded) or (
                    not self.config.dead_letter_topic and not d.reported):
                self.stored(wal, dkey, d)

    def forward(self, producer: Any) -> None:
        """Produce pending dead letters to the dead-letter topic through ``producer`` (an engine; under the poll
        lock)."""
        from confluent_kafka import KafkaException

        while self._pending:
            wal, dkey, d, omit = self._pending.popleft()
            headers: list[tuple[str, bytes | None]] = [
                (self.config.id_header, bytes.fromhex(d.record_id)), ("rks-error", d.error.encode()),
                ("rks-error-code", str(d.error_code).encode()), ("rks-topic", d.topic.encode())]
            value = d.value
            if omit:
                # The payload itself is what the topic refuses: send the id and the
                # reason; the WAL's dead-letter table keeps the full record.
                headers.append(("rks-payload-omitted", str(len(d.value or b"")).encode()))
                value = None
            headers.extend(d.headers)
            self._token += 1
            token = self._token
            try:
                producer.produce_one(self.config.dead_letter_topic, value, d.key, -1, headers,
                                     partial(self._delivered, token))
            except BufferError:
                self._pending.appendleft((wal, dkey, d, omit))
                return
            except KafkaException as exc:
                self._failed(wal, dkey, d, omit, exc.args[0])
                continue
            self._sent[token] = (wal, dkey, d, omit)

    def requeue_unacked(self) -> None:
        """The producer was replaced: what it held is sent again (its late reports are ignored)."""
        if self._sent:
            log.warning("sink=%s re-queueing dead letters=%d held by a replaced producer",
                        self.config.name, len(self._sent))
        for entry in self._sent.values():
            self._pending.append(entry)
        self._sent.clear()

    def _failed(self, wal: "Wal", dkey: bytes, d: DeadLetter, omit: bool, err: Any) -> None:
        log.warning("sink=%s dead letter record_id=%s not forwarded to %s: %s",
                    self.config.name, d.record_id, self.config.dead_letter_topic, self.config.scrub(err.str()))
        if err.code() in NON_RETRIABLE and omit:
            # Not even the id alone can go there: report it to the driver instead.
            self._unreported.append((wal, dkey, d))
            return
        self._pending.append((wal, dkey, d, omit or err.code() in NON_RETRIABLE))

    def _delivered(self, token: int, err: Any, _msg: Any) -> None:
        entry = self._sent.pop(token, None)
        if entry is None:
            return  # sent on a replaced producer: re-queued already
        wal, dkey, d, omit = entry
        if err is not None:
            self._failed(wal, dkey, d, omit, err)
            return
        try:
            wal.put_dead_letters([(dkey, replace(d, forwarded=True))])
        except Exception:  # stays unforwarded in the WAL: forwarded again after a restart
            log.exception("sink=%s cannot mark dead letter %s forwarded", self.config.name, d.record_id)

    def offer_unreported(self, limit: int = 1000) -> list[tuple[str, str, str]]:
        """(record id, error, token) of dead letters the driver has not confirmed yet.

        Nothing is marked: a report can be lost with its job, so the same dead
        letters are offered in every report until the driver confirms their
        tokens (:meth:`confirm`) in a later job.
        """
        return [(d.record_id, d.error, dead_letter_token(wal, dkey)) for wal, dkey, d in
                itertools.islice(self._unreported, limit)]

    def confirm(self, tokens: "Collection[str]") -> int:
        """The driver holds these dead letters: mark them reported in their WAL; returns how many."""
        if not tokens or not self._unreported:
            return 0
        keep: deque[tuple["Wal", bytes, DeadLetter]] = deque()
        by_wal: dict[int, tuple["Wal", list[tuple[bytes, DeadLetter]]]] = {}
        for wal, dkey, d in self._unreported:
            if dead_letter_token(wal, dkey) in tokens:
                by_wal.setdefault(id(wal), (wal, []))[1].append((dkey, replace(d, reported=True)))
            else:
                keep.append((wal, dkey, d))
        n = 0
        for wal, items in by_wal.values():
            try:
                wal.put_dead_letters(items)
            except WalError:  # still unreported in the WAL: offered again after a restart
                log.exception("sink=%s cannot mark dead letters reported in %s", self.config.name, wal.path)
            n += len(items)
        self._unreported = keep
        return n

    def references(self, wal: "Wal") -> bool:
        return any(x[0] is wal for x in list(self._pending) + list(self._unreported) + list(self._sent.values()))
