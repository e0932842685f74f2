"""``rks inspect``: what every slot of a WAL directory holds, and why a slot cannot be read.

A slot held by a live process is never opened (its owner is writing it);
only its bytes on disk and the holder its lock file names are shown. A slot
whose owner is dead is locked for the time of the look, opened and read
(every chunk's checksum checked, as recovery would).
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import asdict, dataclass

from ..config import DEFAULT_MAX_WAL_BYTES
from ..errors import WalError
from ..wal.log import Wal, map_size_for
from ..wal.quarantine import quarantined_chunks
from ..wal.slots import SlotLock, list_slots
from .common import find_sinks, lock_owner

__all__ = ["SlotRow", "inspect_wal", "chunks_set_aside", "describe_slot", "bytes_on_disk"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SlotRow:
    """One slot as an operator sees it (counts are ``None`` when the slot was not read).

    ``pending_records``: records of committed task attempts not yet acked (an
    upper bound: acks are tracked in memory, so a dead owner's partial acks
    are not known), minus those in the dead-letter store.
    ``uncommitted_records``: records of attempts that never committed (recovery drops them).
    ``oldest_pending_age_s``: age of the oldest committed attempt holding pending records.
    """

    sink: str
    slot: int
    path: str
    owner_alive: bool
    owner: str
    pending_records: int | None
    uncommitted_records: int | None
    dead_letters: int | None
    bytes_on_disk: int
    oldest_pending_age_s: float | None
    error: str | None

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


def bytes_on_disk(path: str) -> int:
    """Bytes the files of a slot directory occupy (allocated blocks; links are not followed)."""
    total = 0
    try:
        entries = list(os.scandir(path))
    except OSError:
        return 0
    for e in entries:
        try:
            st = e.stat(follow_symlinks=False)
        except OSError:
            continue
        total += st.st_blocks * 512
    return total


def describe_slot(wal: Wal, now: float | None = None) -> tuple[int, int, int, float | None]:
    """``(pending records, uncommitted records, dead letters, oldest pending age in s)`` of an open slot.

    Raises:
        WalFormatError: a chunk, attempt or dead letter does not decode (what recovery would refuse).
        WalReadError: LMDB failed while reading.
    """
    now = time.time() if now is None else now
    attempts = wal.attempts()
    rows_of = wal.check_chunks()
    dead = len(wal.dead_letters())
    pending = uncommitted = 0
    oldest: float | None = None
    for ck, rows in rows_of.items():
        state = attempts.get(ck.attempt)
        if state is None or not state.committed:
            uncommitted += rows
            continue
        n = rows - len(wal.dead_keys_in_chunk(ck, rows))
        pending += n
        if n and (oldest is None or state.started_at < oldest):
            oldest = state.started_at
    return pending, uncommitted, dead, (None if oldest is None else max(0.0, now - oldest))


def _look(sink: str, sdir: str, index: int) -> SlotRow:
    lock = SlotLock(sdir, index)
    size = bytes_on_disk(lock.wal_path)

    def row(alive: bool, counts: tuple[int, int, int, float | None] | None, error: str | None,
            owner: str = "") -> SlotRow:
        p, u, d, age = counts if counts is not None else (None, None, None, None)
        return SlotRow(sink, index, lock.wal_path, alive, owner, p, u, d, size, age, error)

    try:
        free = lock.try_acquire()
    except WalError as exc:
        return row(False, None, str(exc))
    if not free:
        return row(True, None, None, lock_owner(lock.lock_path))
    try:
        if not os.path.exists(os.path.join(lock.wal_path, "data.mdb")):
            return row(False, (0, 0, 0, None), None)
        try:
            # sync=True: a look must not mark the slot as written without fsync
            wal = Wal(lock.wal_path, sink_name=sink, map_size=map_size_for(DEFAULT_MAX_WAL_BYTES), sync=True)
        except WalError as exc:
            return row(False, None, str(exc))
        try:
            return row(False, describe_slot(wal), None)
        except WalError as exc:
            return row(False, None, str(exc))
        finally:
            wal.close()
    finally:
        lock.release()


def inspect_wal(wal_dir: str, sink: str | None = None) -> list[SlotRow]:
    """Every slot of every sink under ``wal_dir`` (or of ``sink``), in sink and slot order.

    Raises:
        OpsError: ``wal_dir`` is not a WAL directory, or ``sink`` has no slots there.
    """
    rows = []
    for name, sdir in find_sinks(wal_dir, sink):
        for index in list_slots(sdir):
            r = _look(name, sdir, index)
            log.info("inspect sink=%s slot=%d owner_alive=%s pending=%s error=%s",
                     name, index, r.owner_alive, r.pending_records, r.error is not None)
            rows.append(r)
    return rows


def chunks_set_aside(wal_dir: str, sink: str | None = None) -> list[dict[str, str]]:
    """Chunks recovery set aside (damaged), per sink: ``{"sink", "file", "why"}`` (their bytes are in ``file``).

    Raises:
        OpsError: ``wal_dir`` is not a WAL directory, or ``sink`` has no slots there.
    """
    return [{"sink": name, "file": path, "why": why}
            for name, sdir in find_sinks(wal_dir, sink) for path, why in quarantined_chunks(sdir)]
