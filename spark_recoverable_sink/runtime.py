"""Per-process state on an executor: the worker's WAL slot, publisher, and recovery.

Spark reuses Python workers across tasks and runs several at once; each
process builds one :class:`WorkerRuntime` per sink configuration, lazily, the
first time a task of that sink runs in it (after Spark forked the worker), and
keeps it for the following tasks. Nothing here is ever pickled.

Recovery (run when a runtime takes its slot, and at the start of every task
for slots whose owner died):

1. take the slot's lock; a free lock means the owner is dead;
2. open its WAL and read its attempts;
3. drop the chunks of attempts that never committed (Spark re-runs those);
4. replay the chunks of committed attempts that were never acked, skipping
   records already in the dead-letter store;
5. keep the slot until all of that is acked and pruned, then release it.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from typing import Any

from .config import EXACTLY_ONCE, SinkConfig
from .deadline import Deadline
from .encoding import AttemptKey
from .admin import quarantine_held
from .errors import WalError, WalFullError, WalUncleanError
from .delivery.transactions import Committer
from .delivery.units import UnitBook, units_of
from .publisher import Publisher
from .slots import SlotLock, acquire_free_slot, list_slots, sink_dir, slot_paths
from .tracking import AttemptTracker, ChunkTracker
from .wal import Wal, map_size_for

__all__ = ["WorkerRuntime", "get_runtime", "reset_runtimes"]

log = logging.getLogger(__name__)

_IDLE_SCAN_S = 5.0  # how often an idle worker looks for orphan slots
_IDLE_COMMIT_S = 5.0  # exactly-once: how long one idle pass may spend on waiting units
_IDLE_UNITS_EVERY_S = 2.0  # exactly-once: how often an idle worker retries its waiting units
_RUNTIMES: dict[SinkConfig, "WorkerRuntime"] = {}
_RUNTIMES_PID = os.getpid()
_RUNTIMES_LOCK = threading.Lock()


def get_runtime(config: SinkConfig) -> "WorkerRuntime":
    """This process's runtime for ``config``, built on first use.

    A runtime inherited through ``fork`` is never used: the child builds its own.
    """
    global _RUNTIMES_PID
    with _RUNTIMES_LOCK:
        if _RUNTIMES_PID != os.getpid():
            _RUNTIMES.clear()  # the parent's handles; not closed, they are the parent's
            _RUNTIMES_PID = os.getpid()
        rt = _RUNTIMES.get(config)
        if rt is None:
            _evict_same_name(config)
            rt = _RUNTIMES[config] = WorkerRuntime(config)
        return rt


def _evict_same_name(config: SinkConfig) -> None:
    """Close this process's runtimes of the same sink name under another configuration.

    A new configuration of a sink (a rotated password, a changed option)
    replaces the old one: its producer stops, its slot is released, and
    whatever it still held stays in the WAL, adopted by the new runtime.
    """
    for old_cfg in [c for c in _RUNTIMES if c.name == config.name and c != config]:
        old = _RUNTIMES.pop(old_cfg)
        log.warning("sink=%s configuration changed: closing the previous runtime of this worker (slot=%s); "
                    "what it held stays in the WAL for adoption", config.name, old.wal.path)
        try:
            old.close(flush_s=0.0)
        except Exception:  # its slot lock goes with the process at worst; the WAL keeps every record
            log.exception("sink=%s closing the previous runtime failed", config.name)


def reset_runtimes() -> None:
    """Close every runtime of this process (tests and tools; tasks never need it)."""
    with _RUNTIMES_LOCK:
        for rt in _RUNTIMES.values():
            rt.close()
        _RUNTIMES.clear()


class WorkerRuntime:
    """One worker process's slot, publisher and adopted orphan slots for one sink."""

    def __init__(self, config: SinkConfig) -> None:
        self.config = config
        self.sdir = sink_dir(config.wal_dir, config.name)
        self.publisher = Publisher(config, sink_dir=self.sdir)
        #: exactly-once: units waiting for their transaction (at-least-once: None)
        self.units = (UnitBook(config, Committer(config, self.publisher.contact.client_error))
                      if config.guarantee == EXACTLY_ONCE else None)
        self.unreadable: dict[int, str] = {}  # slot index -> why it cannot be read
        self.quarantined: dict[str, str] = {}  # where a slot was set aside automatically -> why
        self.adopted: dict[int, tuple[SlotLock, Wal]] = {}
        self._seen_empty: dict[int, Any] = {}
        self._adopt_lock = threading.Lock()
        self._replayed = 0
        self._last_scan = self._last_units = time.monotonic()
        while True:
            self.lock, self.wal = self._take_own_slot()
            try:
                self._replayed += self.recover(self.wal)
                break
            except BaseException as exc:  # nothing was replayed or dropped: checked first
                self._give_up(self.lock, self.wal, exc, "cannot be recovered")
                if not isinstance(exc, WalError):
                    raise
        # Fully built: only now the poller starts (a failed construction leaks nothing).
        try:
            self.publisher.on_idle = self._on_idle
            self.publisher.start()
        except BaseException:
            self.publisher.close(0.0)
            self.wal.close()
            self.lock.release()
            raise
        log.info("sink=%s pid=%d slot=%s opened live_bytes=%d replayed=%d",
                 config.name, os.getpid(), self.wal.path, self.wal.live_bytes, self._replayed)

    def _open(self, lock: SlotLock) -> Wal:
        return Wal(lock.wal_path, sink_name=self.config.name, map_size=map_size_for(self.config.max_wal_bytes),
                   sync=self.config.wal_sync == "commit")

    def _take_own_slot(self) -> tuple[SlotLock, Wal]:
        while True:
            lock = acquire_free_slot(self.sdir, skip=set(self.unreadable))
            try:
                return lock, self._open(lock)
            except BaseException as exc:
                self._give_up(lock, None, exc, "cannot be used")
                if not isinstance(exc, WalError):
                    raise

    def _give_up(self, lock: SlotLock, wal: Wal | None, exc: BaseException, what: str) -> None:
        """A slot failed to open or recover: close it and release its lock, whatever the failure.

        A :class:`WalError` is never skipped silently: logged with the file and
        reported in every task report of this worker; a slot written with
        ``wal_sync="none"`` that fails validation after a reboot
        (:class:`WalUncleanError`) is quarantined, its bytes kept.
        """
        try:
            if wal is not None:
                wal.close()
            if isinstance(exc, WalError):
                log.error("sink=%s slot=%s %s: %s", self.config.name, lock.wal_path, what, exc)
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

    # -- recovery ------------------------------------------------------------------

    def recover(self, wal: Wal) -> int:
        """Drop uncommitted attempts, replay committed unacked chunks; returns records replayed.

        Every chunk is validated (header and checksum) before anything is
        replayed or dropped; then chunks are decoded and produced one at a
        time, so a large slot never has to fit in memory.

        Raises:
            WalFormatError: the slot holds a corrupt chunk (it needs quarantine).
        """
        attempts = wal.attempts()
        rows_of = wal.check_chunks()
        wal.dead_letters()  # decoded too before anything is queued: a bad one sets the slot aside untouched
        drop: list[tuple[Any, int]] = []
        replay: list[tuple[Any, int]] = []
        trackers: dict[AttemptKey, AttemptTracker] = {}
        for ck, size in wal.chunk_keys():
            state = attempts.get(ck.attempt)
            if state is None or not state.committed:
                drop.append((ck, size))
            else:
                replay.append((ck, size))
                if ck.attempt not in trackers:
                    trackers[ck.attempt] = AttemptTracker(wal, ck.attempt)
                trackers[ck.attempt].add_chunk(ck)
        wal.gen = max([wal.gen] + [ck.gen for ck in rows_of])
        finished = [k for k, st in attempts.items() if not st.committed or k not in trackers]
        if drop or finished:
            log.warning("sink=%s slot=%s dropping %d chunks of %d uncommitted attempts (Spark re-runs them)",
                        self.config.name, wal.path, len(drop), sum(not s.committed for s in attempts.values()))
            wal.prune(chunks=drop, attempts_done=finished)
        if self.units is not None:  # exactly-once: each committed attempt is a unit for a transaction
            units = units_of(wal, {k: st.rows for k, st in attempts.items() if st.committed},
                             [(ck, size) for ck, size in replay])
            for unit in units:
                self.units.add(unit)
            replayed = sum(u.rows for u in units)
            if replayed:
                log.warning("sink=%s slot=%s units=%d rows=%d of committed attempts wait for their transaction "
                            "(skipped if their lane's marker shows them in Kafka)", self.config.name, wal.path,
                            len(units), replayed)
            return replayed
        # Replays wait in the publisher's backlog (read back from the WAL when
        # their turn comes): adopting never blocks a task, even with the broker down.
        replayed = 0
        for ck, size in replay:
            t = ChunkTracker(wal, ck, rows_of[ck], size, trackers[ck.attempt], replayed=True,
                             skip=frozenset(wal.dead_keys_in_chunk(ck, rows_of[ck])))
            self.publisher.enqueue_chunk(t, None)
            replayed += t.rows - len(t.skip)
        for at in trackers.values():
            self.publisher.attempt_closed(at)
        self.publisher.load_dead_letters(wal)
        if replayed:
            log.warning("sink=%s slot=%s replaying records=%d of committed, unacked attempts=%d",
                        self.config.name, wal.path, replayed, len(trackers))
        return replayed

    def adopt_orphans(self) -> int:
        """Adopt every slot of this sink whose owner is dead and which holds records."""
        total = 0
        with self._adopt_lock:
            for index in list(self.unreadable):  # quarantined by an operator since
                if not any(os.path.exists(p) for p in slot_paths(self.sdir, index)):
                    del self.unreadable[index]
            for index in list_slots(self.sdir):
                if index == self.lock.index or index in self.adopted or index in self.unreadable:
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
                        continue  # its owner is alive
                except WalError as exc:  # a lock file that is not ours to trust: never opened
                    log.error("sink=%s slot=%s cannot be locked: %s", self.config.name, lock.lock_path, exc)
                    self.unreadable[index] = str(exc)
                    continue
                if stamp is None:
                    self._seen_empty[index] = stamp
                    lock.release()
                    continue
                wal: Wal | None = None
                try:
                    wal = self._open(lock)
                    if wal.is_empty() and not wal.dead_letters_pending(self.config.dead_letter_topic is not None):
                        wal.close()
                        lock.release()
                        self._seen_empty[index] = stamp
                        continue
                    log.warning("sink=%s pid=%d adopting orphan slot=%s", self.config.name, os.getpid(), wal.path)
                    self.adopted[index] = (lock, wal)
                    total += self.recover(wal)
                except BaseException as exc:
                    self.adopted.pop(index, None)
                    self._give_up(lock, wal, exc, "(orphan) cannot be read")
                    if not isinstance(exc, WalError):
                        raise
        return total

    def _on_idle(self) -> None:
        """Poller idle hook: release drained adopted slots; every few seconds, adopt orphans.

        Lock order is poll lock, then adopt lock (as in a task); the poller
        only tries, so it never waits behind a running task.
        """
        if not self.publisher.lock.acquire(blocking=False):
            return
        try:
            if time.monotonic() - self._last_scan >= _IDLE_SCAN_S:
                self._last_scan = time.monotonic()
                self._replayed += self.adopt_orphans()
            if self.units is not None and time.monotonic() - self._last_units >= _IDLE_UNITS_EVERY_S:
                self._last_units = time.monotonic()
                self.units.retry_pending(Deadline(_IDLE_COMMIT_S), blocking=False)
            if self.adopted:
                self._release_drained()
        finally:
            self.publisher.lock.release()

    def _release_drained(self) -> None:
        with self._adopt_lock:
            for index, (lock, wal) in list(self.adopted.items()):
                if (self.publisher.references(wal) or (self.units is not None and self.units.references(wal))
                        or not wal.is_empty()):
                    continue
                wal.close()
                lock.release()
                del self.adopted[index]
                log.info("sink=%s released drained orphan slot=%s", self.config.name, wal.path)

    def problems(self) -> tuple[str, ...]:
        """What every task report of this worker names: slots set aside, units that do not match Kafka."""
        return (tuple(f"unreadable WAL slot {i}: {why}" for i, why in sorted(self.unreadable.items()))
                + tuple(f"WAL slot quarantined automatically to {dest}: {why}"
                        for dest, why in sorted(self.quarantined.items()))
                + tuple(f"exactly-once unit set aside ({where}): {why}"
                        for where, why in sorted((self.units.mismatched if self.units else {}).items())))

    def take_replayed(self) -> int:
        n, self._replayed = self._replayed, 0
        return n

    # -- space -----------------------------------------------------------------------

    def reserve_space(self, nbytes: int) -> None:
        """Wait until the slot has room for ``nbytes`` more, up to ``max_block_s``.

        Raises:
            WalFullError: still no room after ``max_block_s``; nothing was dropped.
        """
        ok = self.wal.wait_for_space(nbytes, self.config.max_wal_bytes, self.config.max_block_s,
                                     on_wait=self.publisher.make_room)
        if not ok:
            raise WalFullError(
                f"sink={self.config.name} WAL slot {self.wal.path} holds {self.wal.live_bytes} bytes not yet "
                f"acked by Kafka; max_wal_bytes={self.config.max_wal_bytes}; waited max_block_s="
                f"{self.config.max_block_s}s for acks. Nothing was dropped: the task fails and Spark re-runs it.",
                self.wal.path,
            )

    def close(self, flush_s: float = 5.0) -> None:
        """Flush (up to ``flush_s``), checkpoint and release every slot. Optional: nothing depends on it."""
        self.publisher.close(flush_s)
        if self.units is not None:
            self.units.close()
        with self._adopt_lock:
            for lock, wal in self.adopted.values():
                wal.close()
                lock.release()
            self.adopted.clear()
        self.wal.close()
        self.lock.release()
