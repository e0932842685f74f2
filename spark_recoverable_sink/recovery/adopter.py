"""Recovery of WAL slots and adoption of slots whose owner died.

A slot whose lock can be taken belongs to nobody alive; if it still holds
records, they are orphans. :class:`SlotAdopter` is the one implementation of
what happens to them, used by a worker's :class:`.runtime.WorkerRuntime`
(for its own slot when it starts, and for other slots at every task and idle
pass) and by the operator CLI (``rks replay``, in a process that is not a
Spark worker and owns no slot of its own):

1. take the slot's lock; a free lock means the owner is dead;
2. open its WAL and validate every chunk, attempt and dead letter first
   (a slot of another version than this build's, or holding a chunk of
   one, and a slot whose attempts or dead letters fail, are left untouched
   and reported; a damaged chunk is set aside alone, with its bytes);
3. drop the chunks of attempts that never committed (Spark re-runs those);
4. replay the chunks of committed attempts that were never acked, skipping
   records already in the dead-letter store, each under the guarantee it was
   accepted under (exactly-once attempts: as units for their lane's
   transaction);
5. keep the slot until all of that is acked and pruned, then remove it (its
   files' space goes back to the file system), or release it if it holds
   dead letters. On a full disk none of this needs new space
   (:mod:`..wal.space`).
"""

from __future__ import annotations

import logging
import os
import threading
from typing import Any, Callable, Collection

from ..config import SinkConfig
from ..delivery.attempts import AttemptTracker
from ..delivery.chunks import ChunkTracker
from ..delivery.exactly_once.units import UnitBook, units_of
from ..errors import WalError, WalUncleanError, WalWriteError
from ..wal.format import AttemptKey
from ..wal.log import Wal, map_size_for
from ..wal.quarantine import quarantine_chunk, quarantine_held
from ..wal.slots import SlotLock, list_slots, slot_paths

__all__ = ["SlotAdopter"]

log = logging.getLogger(__name__)


class SlotAdopter:
    """Recovers slots and adopts orphan slots of one sink into a publisher (or a unit book).

    ``publisher`` is a :class:`.delivery.Publisher` of the same configuration;
    ``units`` a :class:`.delivery.units.UnitBook` for an exactly-once sink
    (``None`` otherwise). Set :attr:`replaying` to a list to have the tracker
    of every replayed chunk appended to it (progress of a replay tool).
    """

    def __init__(self, config: SinkConfig, sdir: str, publisher: Any, units: UnitBook | None = None) -> None:
        self.config = config
        self.sdir = sdir
        self.publisher = publisher
        self.units = units
        self.unreadable: dict[int, str] = {}  # slot index -> why it cannot be read
        self.quarantined: dict[str, str] = {}  # where a slot was set aside automatically -> why
        self.adopted: dict[int, tuple[SlotLock, Wal]] = {}
        self.owned: set[int] = set()  # slots a live process held at the last scan
        self.replaying: list[ChunkTracker] | None = None
        #: the exactly-once unit book, created on first need (set by :class:`.deliver.Delivery`)
        self.unit_book: Callable[[], UnitBook] = lambda: self._no_units()
        self.lock = threading.Lock()  # taken after the publisher's poll lock, never before
        self._seen_empty: dict[int, Any] = {}

    def _no_units(self) -> UnitBook:
        if self.units is None:
            raise RuntimeError("an exactly-once unit was found but no unit book was wired (recovery.deliver)")
        return self.units

    def open(self, lock: SlotLock) -> Wal:
        """Open the WAL of a slot whose lock the caller holds.

        Raises:
            WalFormatError: not a WAL of a readable format version, or corrupt.
            WalError: the environment cannot be opened.
        """
        return Wal(lock.wal_path, sink_name=self.config.name, map_size=map_size_for(self.config.max_wal_bytes),
                   sync=self.config.wal_sync == "commit")

    def give_up(self, lock: SlotLock, wal: Wal | None, exc: BaseException, what: str) -> None:
        """A slot failed to open or recover: close it and release its lock, whatever the failure.

        A :class:`WalError` is never skipped silently: logged with the file and
        kept in :attr:`unreadable` (reported in every task report of a worker);
        a slot written with ``wal_sync="none"`` that fails validation after a
        reboot (:class:`WalUncleanError`) is quarantined, its bytes kept.
        """
        try:
            if wal is not None:
                wal.close()
            if isinstance(exc, WalError):
                log.error("sink=%s slot=%s %s: %s", self.config.name, lock.wal_path, what, exc)
                if isinstance(exc, WalWriteError):  # no room on the disk (yet): tried again later
                    return
                if not isinstance(exc, WalUncleanError):
                    self.unreadable[lock.index] = str(exc)
                    return
                try:
                    dest = quarantine_held(lock, self.sdir)
                except WalError as why:  # the move failed: set aside and reported all the same
                    self.unreadable[lock.index] = f"{exc}; automatic quarantine failed: {why}"
                    return
                log.error("sink=%s slot=%s quarantined to %s", self.config.name, lock.wal_path, dest)
                self.quarantined[dest] = str(exc)
        finally:
            lock.release()

    def recover(self, wal: Wal) -> int:
        """Drop uncommitted attempts, queue committed unacked records; returns records replayed.

        Every chunk is validated (header and checksum) before anything is
        replayed or dropped; a chunk that fails is set aside on its own (its
        bytes kept under the sink's quarantine directory, named in every
        report) and the rest of the slot is delivered, each attempt under the
        guarantee it was accepted under: exactly-once units in a transaction
        (an at-least-once process included), everything else as at-least-once
        (never skipped by a marker). Then chunks are decoded and produced one
        at a time, so a large slot never has to fit in memory.

        Raises:
            WalVersionError: a chunk, attempt or dead letter of another version (the slot is left as it is).
            WalFormatError: an attempt record or dead letter of the slot does not decode (it needs quarantine).
            WalReadError: LMDB failed while reading.
        """
        attempts = wal.attempts()
        rows_of, damaged = wal.check_chunks_each()
        wal.dead_letters()  # decoded too before anything is queued: a bad one sets the slot aside untouched
        eo_units = {k: st for k, st in attempts.items() if st.committed and st.exactly_once}
        damaged_units = {ck.attempt for ck in damaged if ck.attempt in eo_units}
        drop: list[tuple[Any, int]] = []
        replay: list[tuple[Any, int]] = []
        aside: list[tuple[Any, int]] = []
        trackers: dict[AttemptKey, AttemptTracker] = {}
        for ck, size in wal.chunk_keys():
            state = attempts.get(ck.attempt)
            if ck in damaged or ck.attempt in damaged_units:
                aside.append((ck, size))
            elif state is None or not state.committed:
                drop.append((ck, size))
            else:
                replay.append((ck, size))
                if ck.attempt not in eo_units and ck.attempt not in trackers:
                    trackers[ck.attempt] = AttemptTracker(wal, ck.attempt)
                if ck.attempt not in eo_units:
                    trackers[ck.attempt].add_chunk(ck)
        if aside:
            self._set_aside(wal, aside, damaged, damaged_units)
        wal.gen = max([wal.gen] + [ck.gen for ck in rows_of])
        finished = [k for k, st in attempts.items()
                    if not st.committed or (k not in trackers and k not in eo_units) or k in damaged_units]
        if drop or finished:
            log.warning("sink=%s slot=%s dropping %d chunks of %d uncommitted attempts (Spark re-runs them)",
                        self.config.name, wal.path, len(drop), sum(not s.committed for s in attempts.values()))
            wal.prune(chunks=drop, attempts_done=finished)
        self.publisher.load_dead_letters(wal)  # under either guarantee, on every recovery
        eo_chunks = [(ck, size) for ck, size in replay if ck.attempt in eo_units and ck.attempt not in damaged_units]
        replayed = 0
        if eo_chunks:  # accepted under exactly-once: each unit in its lane's transaction, whatever this process is
            units = units_of(wal, eo_units, eo_chunks)
            book = self.unit_book()
            for unit in units:
                book.add(unit)
            replayed += sum(u.rows for u in units)
            log.warning("sink=%s slot=%s units=%d rows=%d of committed exactly-once attempts wait for their "
                        "transaction (skipped only if their lane's marker proves them in Kafka)", self.config.name,
                        wal.path, len(units), replayed)
        # At-least-once: replays wait in the publisher's backlog (read back from the WAL when their
        # turn comes): adopting never blocks a task, even with the broker down.
        al = 0
        for ck, size in replay:
            if ck.attempt in eo_units:
                continue
            t = ChunkTracker(wal, ck, rows_of[ck], size, trackers[ck.attempt], replayed=True,
                             skip=frozenset(wal.dead_keys_in_chunk(ck, rows_of[ck])))
            self.publisher.enqueue_chunk(t, None)
            if self.replaying is not None:
                self.replaying.append(t)
            al += t.rows - len(t.skip)
        for at in trackers.values():
            self.publisher.attempt_closed(at)
        if al:
            log.warning("sink=%s slot=%s replaying records=%d of committed, unacked attempts=%d",
                        self.config.name, wal.path, al, len(trackers))
        return replayed + al

    def _set_aside(self, wal: Wal, chunks: list[tuple[Any, int]], damaged: dict[Any, str],
                   units: set[AttemptKey]) -> None:
        """Damaged chunks (and the other chunks of an exactly-once unit with one) out of the WAL, bytes kept."""
        for ck, _size in chunks:
            why = damaged.get(ck) or f"another chunk of its exactly-once unit {ck.attempt} is damaged"
            dest = quarantine_chunk(self.sdir, wal, ck, why)
            self.quarantined[dest] = f"chunk {ck} of {wal.path}: {why}"
            log.error("sink=%s slot=%s chunk=%s set aside to %s: %s; the rest of the slot is delivered",
                      self.config.name, wal.path, ck, dest, why)
        wal.prune(chunks=chunks, attempts_done=sorted(units))

    def adopt_orphans(self, skip: Collection[int] = ()) -> int:
        """Adopt every slot of the sink whose owner is dead and which holds records; returns records replayed.

        ``skip``: slot indices never to look at (the caller's own slot). Slots
        a live process holds are never opened; they are listed in :attr:`owned`.

        Raises:
            Exception: anything but a :class:`WalError` from opening or recovering a slot
                (the slot is closed and released first; a WalError only sets it aside).
        """
        total = 0
        with self.lock:
            self.owned = set()
            for index in list(self.unreadable):  # quarantined by an operator since
                if not any(os.path.exists(p) for p in slot_paths(self.sdir, index)):
                    del self.unreadable[index]
            for index in list_slots(self.sdir):
                if index in skip or index in self.adopted or index in self.unreadable:
                    continue
                data = os.path.join(slot_paths(self.sdir, index)[1], "data.mdb")
                try:
                    st = os.stat(data)
                    stamp: Any = (st.st_ino, st.st_mtime_ns, st.st_size)
                except FileNotFoundError:
                    stamp = None
                if index in self._seen_empty and self._seen_empty[index] == stamp:
                    continue
                lock = SlotLock(self.sdir, index)
                try:
                    if not lock.try_acquire():
                        self.owned.add(index)
                        continue  # its owner is alive
                except WalError as exc:  # a lock file that is not ours to trust: never opened
                    log.error("sink=%s slot=%s cannot be locked: %s", self.config.name, lock.lock_path, exc)
                    self.unreadable[index] = str(exc)
                    continue
                if stamp is None:
                    self._seen_empty[index] = stamp
                    lock.release()
                    continue
                total += self._adopt(index, lock, stamp)
        return total

    def _adopt(self, index: int, lock: SlotLock, stamp: Any) -> int:
        wal: Wal | None = None
        try:
            wal = self.open(lock)
            if wal.is_empty() and not wal.dead_letters_pending(self.config.dead_letter_topic is not None):
                keep = bool(wal.dead_letters())
                if keep:
                    self._seen_empty[index] = stamp
                self._let_go(lock, wal, keep, "empty")
                return 0
            log.warning("sink=%s pid=%d adopting orphan slot=%s", self.config.name, os.getpid(), wal.path)
            self.adopted[index] = (lock, wal)
            return self.recover(wal)
        except BaseException as exc:
            self.adopted.pop(index, None)
            self.give_up(lock, wal, exc, "(orphan) cannot be read")
            if not isinstance(exc, WalError):
                raise
            return 0

    def live_bytes(self) -> int:
        """Bytes the adopted slots hold not yet acked: they count against the adopting worker's ``max_wal_bytes``.

        Read without :attr:`lock` (a task thread asks while the poller may be adopting): one copy of the
        values, each slot's own counter.
        """
        return sum(wal.live_bytes for _lock, wal in list(self.adopted.values()))

    def release_drained(self) -> list[int]:
        """Close and release adopted slots that hold nothing any more; returns their indices."""
        released = []
        with self.lock:
            for index, (lock, wal) in list(self.adopted.items()):
                if (self.publisher.references(wal) or (self.units is not None and self.units.references(wal))
                        or not wal.is_empty()):
                    continue
                try:
                    keep = bool(wal.dead_letters())
                except WalError:  # not readable now: kept, and looked at again by the next adopter
                    keep = True
                del self.adopted[index]
                self._let_go(lock, wal, keep, "drained")
                released.append(index)
        return released

    def _let_go(self, lock: SlotLock, wal: Wal, keep: bool, what: str) -> None:
        """Close a slot that holds nothing to deliver: release it if its dead letters are to be kept (they are the
        record of what was refused), else remove it (deletions a full disk refused included: the space goes back)."""
        wal.close()
        if keep:
            lock.release()
        else:
            lock.remove()
        log.info("sink=%s %s %s orphan slot=%s", self.config.name, "released" if keep else "removed", what, wal.path)

    def problems(self) -> tuple[str, ...]:
        """Slots set aside: unreadable ones and those quarantined automatically."""
        return (tuple(f"unreadable WAL slot {i}: {why}" for i, why in sorted(self.unreadable.items()))
                + tuple(f"WAL slot quarantined automatically to {dest}: {why}"
                        for dest, why in sorted(self.quarantined.items())))

    def close(self) -> None:
        """Close every adopted slot and release its lock (what it still holds stays in the WAL)."""
        with self.lock:
            for lock, wal in self.adopted.values():
                wal.close()
                lock.release()
            self.adopted.clear()
