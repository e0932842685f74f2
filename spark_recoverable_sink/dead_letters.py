"""Records refused for good: stored in the WAL, forwarded or reported.

A record whose delivery failed with a non-retriable error is written to its
slot's dead-letter table in the same transaction that deletes its chunk, so it
is never nowhere. Then, in order of preference:

* with ``dead_letter_topic`` set, it is produced there (headers ``rks-id``,
  ``rks-error``, ``rks-error-code``, ``rks-topic``); a payload the topic also
  refuses is sent without its value, flagged ``rks-payload-omitted``; once
  acked it is marked forwarded;
* without one, it is handed to the next task report, so the driver raises
  :class:`.DeadLetterError` naming it; it is then marked reported.

It stays in the WAL's dead-letter table either way, for the operator.
"""

from __future__ import annotations

import logging
import struct
from collections import deque
from dataclasses import replace
from functools import partial
from typing import TYPE_CHECKING, Any, Callable

from .config import SinkConfig
from .encoding import DeadLetter, decode_chunk, iter_rows, record_id
from .errors import WalError
from .explain import explain
from .tracking import NON_RETRIABLE, ChunkTracker

if TYPE_CHECKING:  # pragma: no cover
    from .wal import Wal

__all__ = ["DeadLetterRouter", "dead_letters_of"]

log = logging.getLogger(__name__)

_DEAD_KEY = struct.Struct(">QIQI")


def dead_letters_of(config: SinkConfig, t: ChunkTracker,
                    partitions_of: Callable[[str], int | None] | None = None) -> list[tuple[bytes, DeadLetter]]:
    """The dead letters of a settled chunk, with their records read back from the WAL.

    ``partitions_of`` (topic -> partition count) lets the reason of an
    unknown partition say how many the topic has (see :mod:`.explain`).
    """
    raw = t.wal.read_chunk(t.key)
    rows = list(iter_rows(decode_chunk(raw), config.topic)) if raw is not None else []
    out = []
    for i, code, text in t.dead:
        seq = t.key.first_seq + i
        r = rows[i] if i < len(rows) else {}
        d = DeadLetter(
            record_id=record_id(config.name, t.key.batch, t.key.partition, seq),
            error_code=code, error=config.scrub(explain(
                config, code, text, r.get("topic") or "", r.get("partition"), _size(r), partitions_of)),
            topic=r.get("topic") or "",
            partition=r.get("partition"), key=r.get("key"), value=r.get("value"),
            headers=tuple(r.get("headers") or ()), timestamp_ms=r.get("timestamp"),
        )
        out.append((_DEAD_KEY.pack(t.key.batch, t.key.partition, seq, t.key.gen), d))
    return out


def _size(r: dict[str, Any]) -> int:
    headers = sum(len(k or "") + len(v or b"") for k, v in (r.get("headers") or ()))
    return len(r.get("value") or b"") + len(r.get("key") or b"") + headers


class DeadLetterRouter:
    """Forwards stored dead letters to the dead-letter topic, or queues them for the report."""

    def __init__(self, config: SinkConfig) -> None:
        self.config = config
        self._pending: deque[tuple["Wal", bytes, DeadLetter, bool]] = deque()  # (..., omit payload)
        self._unreported: deque[tuple["Wal", bytes, DeadLetter]] = deque()

    @property
    def busy(self) -> bool:
        return bool(self._pending)

    def stored(self, wal: "Wal", dkey: bytes, d: DeadLetter) -> None:
        """A dead letter is in the WAL: route it."""
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
        """Produce pending dead letters to the dead-letter topic (called under the poll lock)."""
        from confluent_kafka import KafkaException

        while self._pending:
            wal, dkey, d, omit = self._pending.popleft()
            headers = [(self.config.id_header, d.record_id.encode()), ("rks-error", d.error.encode()),
                       ("rks-error-code", str(d.error_code).encode()), ("rks-topic", d.topic.encode())]
            value = d.value
            if omit:
                # The payload itself is what the topic refuses: send the id and the
                # reason; the WAL's dead-letter table keeps the full record.
                headers.append(("rks-payload-omitted", str(len(d.value or b"")).encode()))
                value = None
            headers.extend(d.headers)
            try:
                producer.produce(self.config.dead_letter_topic, value, d.key, headers=headers,
                                 on_delivery=partial(self._delivered, wal, dkey, d, omit))
            except BufferError:
                self._pending.appendleft((wal, dkey, d, omit))
                return
            except KafkaException as exc:
                self._failed(wal, dkey, d, omit, exc.args[0])

    def _failed(self, wal: "Wal", dkey: bytes, d: DeadLetter, omit: bool, err: Any) -> None:
        log.warning("sink=%s dead letter record_id=%s not forwarded to %s: %s",
                    self.config.name, d.record_id, self.config.dead_letter_topic, self.config.scrub(err.str()))
        if err.code() in NON_RETRIABLE and omit:
            # Not even the id alone can go there: report it to the driver instead.
            self._unreported.append((wal, dkey, d))
            return
        self._pending.append((wal, dkey, d, omit or err.code() in NON_RETRIABLE))

    def _delivered(self, wal: "Wal", dkey: bytes, d: DeadLetter, omit: bool, err: Any, _msg: Any) -> None:
        if err is not None:
            self._failed(wal, dkey, d, omit, err)
            return
        try:
            wal.put_dead_letters([(dkey, replace(d, forwarded=True))])
        except WalError:
            log.exception("sink=%s cannot mark dead letter %s forwarded", self.config.name, d.record_id)

    def take_unreported(self, limit: int = 1000) -> list[tuple[str, str]]:
        """(record id, error) of dead letters for the driver; marked reported in their WAL."""
        taken: list[tuple["Wal", bytes, DeadLetter]] = []
        while self._unreported and len(taken) < limit:
            taken.append(self._unreported.popleft())
        by_wal: dict[int, tuple["Wal", list[tuple[bytes, DeadLetter]]]] = {}
        for wal, dkey, d in taken:
            by_wal.setdefault(id(wal), (wal, []))[1].append((dkey, replace(d, reported=True)))
        for wal, items in by_wal.values():
            try:
                wal.put_dead_letters(items)
            except WalError:
                log.exception("sink=%s cannot mark dead letters reported in %s", self.config.name, wal.path)
        return [(d.record_id, d.error) for _w, _k, d in taken]

    def references(self, wal: "Wal") -> bool:
        return any(x[0] is wal for x in list(self._pending) + list(self._unreported))
