"""``rks dead-letters``: list, export and re-send the records a sink refused for good.

Dead letters live in each slot's ``dead`` table with their full record
(topic, partition, key, value, headers, timestamp, id) and the reason. Only
slots whose owner is dead are read, under their lock, held until the command
ends: a re-sent record is removed from its slot's store only after Kafka
acked it, in one write transaction per slot.
"""

from __future__ import annotations

import base64
import contextlib
import logging
import os
import time
from dataclasses import dataclass, field
from typing import Any, Collection, Iterator

from ..config import DEFAULT_MAX_WAL_BYTES, SinkConfig
from ..errors import ProducerError, WalError
from ..wal.format import ChunkKey
from ..wal.log import Wal, map_size_for
from ..wal.records import DeadLetter
from ..wal.slots import SlotLock, list_slots
from .common import lock_owner

__all__ = ["StoredLetter", "HeldSlots", "ResendResult", "held_slots", "letter_json", "resend"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class StoredLetter:
    """A dead letter with where it is stored: slot, open WAL and key."""

    slot: int
    wal: Wal
    key: bytes
    letter: DeadLetter


@dataclass
class HeldSlots:
    """The slots of a sink whose owner is dead, open and locked; the others, and why."""

    sink: str
    opened: dict[int, Wal] = field(default_factory=dict)
    owned: dict[int, str] = field(default_factory=dict)  # slot -> its holder (lock file text)
    unreadable: dict[int, str] = field(default_factory=dict)

    def letters(self, ids: Collection[str] = ()) -> list[StoredLetter]:
        """Every dead letter of the open slots (only those whose record id is in ``ids``, if given).

        Raises:
            WalFormatError: a stored dead letter does not decode. WalReadError: LMDB failed.
        """
        out = []
        for index, wal in sorted(self.opened.items()):
            for key, d in wal.dead_letters():
                if not ids or d.record_id in ids:
                    out.append(StoredLetter(index, wal, key, d))
        return out


@contextlib.contextmanager
def held_slots(sink: str, sdir: str) -> Iterator[HeldSlots]:
    """Lock and open every slot of ``sink`` whose owner is dead; release them all on exit.

    A slot with no LMDB file yet is locked but not opened (looking must not
    create one); one that cannot be opened is named in ``unreadable``.

    Raises:
        OSError: the sink directory cannot be listed.
    """
    held = HeldSlots(sink)
    locks: list[SlotLock] = []
    try:
        for index in list_slots(sdir):
            lock = SlotLock(sdir, index)
            try:
                if not lock.try_acquire():
                    held.owned[index] = lock_owner(lock.lock_path)
                    continue
            except WalError as exc:
                held.unreadable[index] = str(exc)
                continue
            locks.append(lock)
            if not os.path.exists(os.path.join(lock.wal_path, "data.mdb")):
                continue  # a slot that never held a record: opening it would create an environment
            try:
                held.opened[index] = Wal(lock.wal_path, sink_name=sink,
                                         map_size=map_size_for(DEFAULT_MAX_WAL_BYTES), sync=True)
            except WalError as exc:
                held.unreadable[index] = str(exc)
        yield held
    finally:
        for wal in held.opened.values():
            wal.close()
        for lock in locks:
            lock.release()


def _b64(b: bytes | None) -> str | None:
    return None if b is None else base64.b64encode(b).decode("ascii")


def letter_json(sink: str, s: StoredLetter) -> dict[str, Any]:
    """A dead letter as one JSON-able object (key, value and header values base64).

    Raises:
        WalFormatError: its stored key is not a chunk key.
    """
    d = s.letter
    k = ChunkKey.unpack(s.key)
    return {
        "sink": sink, "slot": s.slot, "batch": k.batch, "origin": k.origin, "seq": k.first_seq,
        "record_id": d.record_id, "topic": d.topic, "partition": d.partition, "error_code": d.error_code,
        "error": d.error, "timestamp_ms": d.timestamp_ms, "key_b64": _b64(d.key), "value_b64": _b64(d.value),
        "headers": [{"key": hk, "value_b64": _b64(hv)} for hk, hv in d.headers],
        "forwarded": d.forwarded, "reported": d.reported,
    }


@dataclass(frozen=True)
class ResendResult:
    """Dead letters acked (and removed from the store) and those that failed again, with the reason."""

    acked: int
    removed: int
    failed: tuple[tuple[str, str], ...]


def resend(config: SinkConfig, letters: list[StoredLetter], timeout_s: float = 60.0) -> ResendResult:
    """Produce ``letters`` to their original topic (and partition), wait for acks, remove the acked ones.

    Each record goes out as the sink sent it: key, value, headers, timestamp,
    and its ``rks-id`` header first.

    Raises:
        ProducerError: the Kafka client cannot be created (secrets scrubbed).
        WalWriteError: an acked letter could not be removed from its store (it stays; a re-send duplicates it).
    """
    from confluent_kafka import KafkaException, Producer

    try:
        producer = Producer(config.producer_conf())
    except (KafkaException, ValueError, TypeError) as exc:
        raise ProducerError(f"cannot create the Kafka producer: {config.scrub(str(exc))}") from None
    results: dict[int, str | None] = {}  # index -> None (acked) or the error

    def on_delivery(i: int, err: Any, _msg: Any) -> None:
        results[i] = None if err is None else config.scrub(err.str())

    end = time.monotonic() + timeout_s
    for i, s in enumerate(letters):
        d = s.letter
        kwargs: dict[str, Any] = {
            "headers": [(config.id_header, bytes.fromhex(d.record_id))] + list(d.headers),
            "on_delivery": lambda err, msg, i=i: on_delivery(i, err, msg)}
        if d.partition is not None:
            kwargs["partition"] = d.partition
        if d.timestamp_ms is not None:
            kwargs["timestamp"] = d.timestamp_ms
        while True:
            try:
                producer.produce(d.topic, d.value, d.key, **kwargs)
                break
            except BufferError:
                if time.monotonic() >= end:
                    results[i] = "the client's queue stayed full"
                    break
                producer.poll(0.1)
            except KafkaException as exc:
                results[i] = config.scrub(exc.args[0].str())
                break
    left = producer.flush(max(0.0, end - time.monotonic()))
    if left:
        producer.purge()
        producer.flush(1.0)
    acked_by_wal: dict[int, tuple[Wal, list[bytes]]] = {}
    failed = []
    for i, s in enumerate(letters):
        err = results.get(i, "no ack within the timeout")
        if err is None:
            acked_by_wal.setdefault(id(s.wal), (s.wal, []))[1].append(s.key)
        else:
            failed.append((s.letter.record_id, err))
            log.warning("sink=%s dead letter record_id=%s not re-sent: %s", config.name, s.letter.record_id, err)
    removed = 0
    for wal, keys in acked_by_wal.values():  # only now, after their acks
        removed += wal.delete_dead_letters(keys)
    acked = sum(len(k) for _w, k in acked_by_wal.values())
    log.info("sink=%s dead letters re-sent acked=%d removed=%d failed=%d", config.name, acked, removed, len(failed))
    return ResendResult(acked, removed, tuple(failed))
