"""Per-process state on an executor: the worker's WAL slot, publisher, and recovery.

Spark reuses Python workers across tasks and runs several at once; each
process builds one :class:`WorkerRuntime` per sink configuration, lazily, the
first time a task of that sink runs in it (after Spark forked the worker), and
keeps it for the following tasks. Nothing here is ever pickled.

Recovery (run when a runtime takes its slot, and at the start of every task
for slots whose owner died; implemented in :mod:`..recovery.adopter`, which
the operator CLI's ``rks replay`` uses too, wired by :mod:`..recovery.deliver`):

1. take the slot's lock; a free lock means the owner is dead;
2. open its WAL and read its attempts;
3. drop the chunks of attempts that never committed (Spark re-runs those);
4. replay the chunks of committed attempts that were never acked, skipping
   records already in the dead-letter store;
5. keep the slot until all of that is acked and pruned, then remove it.

On a full disk a worker recovers and delivers without new space; with no
free slot and no room for a new one it runs without a slot of its own
(tasks fail naming the full disk until there is room; see :mod:`..wal.space`).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from typing import TYPE_CHECKING

from .. import _points
from ..config import SinkConfig
from ..deadline import Deadline
from ..delivery.exactly_once.topic import forget_marker_topics
from ..errors import WalError, WalFullError, WalWriteError
from ..recovery.deliver import Delivery

if TYPE_CHECKING:  # pragma: no cover
    from ..delivery.exactly_once.units import UnitBook
from ..wal.log import Wal
from ..wal.slots import SlotLock, acquire_free_slot, list_slots, sink_dir
from ..wal.space import RENEW_ABOVE_BYTES

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
                    "what it held stays in the WAL for adoption", config.name, old.wal.path if old.wal else None)
        try:
            old.close(flush_s=0.0)
        except Exception:  # its slot lock goes with the process at worst; the WAL keeps every record
            log.exception("sink=%s closing the previous runtime failed", config.name)


def reset_runtimes() -> None:
    """Close every runtime of this process, and forget its marker topic checks (tests and tools: the next use is
    as in a new process; tasks never need it)."""
    with _RUNTIMES_LOCK:
        for rt in _RUNTIMES.values():
            rt.close()
        _RUNTIMES.clear()
    forget_marker_topics()


class WorkerRuntime:
    """One worker process's slot, its delivery (publisher, units, adopter) and adopted orphan slots for one sink."""

    def __init__(self, config: SinkConfig) -> None:
        self.config = config
        self.sdir = sink_dir(config.wal_dir, config.name)
        self.delivery = Delivery.build(config, self.sdir)
        self.publisher = self.delivery.publisher
        self.adopter = self.delivery.adopter  # recovery of slots and adoption of orphans
        self._replayed = 0
        self._last_scan = self._last_units = time.monotonic()
        self.lock: SlotLock | None = None
        self.wal: Wal | None = None  # None: no room for a slot of its own (it still delivers what others left)
        try:
            self._own_slot()
        except WalWriteError as exc:
            log.error("sink=%s pid=%d no room for a WAL slot of its own: it delivers what the WAL holds and "
                      "accepts nothing until there is room: %s", config.name, os.getpid(), exc)
        except BaseException:
            self.delivery.close(0.0)
            raise
        # Fully built: only now the poller starts (a failed construction leaks nothing).
        try:
            self.publisher.poller.on_idle = self._on_idle
            self.publisher.start()
        except BaseException:
            self.close(0.0)
            raise
        log.info("sink=%s pid=%d slot=%s opened live_bytes=%d replayed=%d", config.name, os.getpid(),
                 self.wal.path if self.wal else None, self.wal.live_bytes if self.wal else 0, self._replayed)

    def _own_slot(self) -> None:
        """Take a slot of this worker's own, recover what it holds; recreate it if it holds nothing but free pages.

        Raises:
            WalWriteError: no free slot, and no room on the disk for a new one (or to renew an empty one).
        """
        for _ in range(len(list_slots(self.sdir)) + 2):  # each failed slot is skipped from then on
            lock = acquire_free_slot(self.sdir, skip=set(self.adopter.unreadable))
            wal: Wal | None = None
            try:
                wal = self.adopter.open(lock)
                self._replayed += self.adopter.recover(wal)  # nothing is replayed or dropped before it is checked
                if wal.data_file_bytes() > RENEW_ABOVE_BYTES and wal.renewable():
                    wal.renew()  # the pages its drained records held go back to the file system
            except BaseException as exc:
                self.adopter.give_up(lock, wal, exc, "cannot be used")
                if not isinstance(exc, WalError) or isinstance(exc, WalWriteError):
                    raise
                continue
            self.lock, self.wal = lock, wal
            return
        raise WalError(f"sink={self.config.name}: no usable WAL slot under {self.sdir}: "
                       f"{'; '.join(self.adopter.problems()) or 'every one failed'}", self.sdir)

    def own_wal(self) -> Wal:
        """This worker's slot, taken now if there was no room for one before.

        Raises:
            WalWriteError: still no room for a slot (nothing of the task is accepted; Spark re-runs it).
        """
        if self.wal is None:
            self._own_slot()
        assert self.wal is not None
        return self.wal

    def renew_own_slot(self) -> bool:
        """Recreate this worker's slot if it holds nothing to keep (a task's first append found the disk full).

        Returns whether it was recreated. The caller holds the poll lock.

        Raises:
            WalWriteError: the new environment cannot be created (the slot is let go: :meth:`own_wal` retries).
        """
        if self.wal is None or self.lock is None or not self.wal.renewable():
            return False
        try:
            self.wal.renew()
        except BaseException:  # the old Wal is retired (its prunes do nothing): its files are gone
            self.wal.close()
            self.lock.release()
            self.lock = self.wal = None
            raise
        return True

    def write_deferred(self) -> None:
        """Write the deletions a full disk refused; recreate this worker's slot if it holds nothing else.

        Without it they would wait for the next prune, which an idle worker never
        makes. The caller holds the poll lock. Best effort: what stays deferred is
        still proven delivered.
        """
        if self.wal is None or not self.wal.deferred():
            return
        try:
            self.wal.prune()  # the deferred deletions alone
            if self.wal.deferred() and self.wal.renewable():
                self.renew_own_slot()
        except WalError as exc:
            log.warning("sink=%s slot=%s deferred deletions not written yet: %s", self.config.name,
                        self.wal.path if self.wal else None, exc)

    @property
    def units(self) -> "UnitBook | None":
        """Exactly-once units waiting for their transaction (``None`` until this worker met one)."""
        return self.delivery.units

    def adopt_orphans(self) -> int:
        """Adopt every slot of this sink (but this worker's own) whose owner is dead and which holds records."""
        return self.adopter.adopt_orphans(skip=(self.lock.index,) if self.lock is not None else ())

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
                _points.point("eo.idle_retry", pid=os.getpid(), sink=self.config.name)
                self.units.retry_pending(Deadline(_IDLE_COMMIT_S), blocking=False)
            if self.adopter.adopted:
                self.adopter.release_drained()
            self.write_deferred()
        finally:
            self.publisher.lock.release()

    def problems(self) -> tuple[str, ...]:
        """What every task report of this worker names: slots set aside, units that do not match Kafka."""
        return self.adopter.problems() + (self.units.problems() if self.units is not None else ())

    def take_replayed(self) -> int:
        n, self._replayed = self._replayed, 0
        return n

    # -- space -----------------------------------------------------------------------

    def reserve_space(self, nbytes: int) -> None:
        """Wait until the slot has room for ``nbytes`` more, up to ``max_block_s``.

        Raises:
            WalFullError: still no room after ``max_block_s``; nothing was dropped.
        """
        assert self.wal is not None  # the task took it (own_wal)
        ok = self.wal.wait_for_space(nbytes, self.config.max_wal_bytes, self.config.max_block_s,
                                     on_wait=self.publisher.make_room, held=self.adopter.live_bytes)
        if not ok:
            adopted = self.adopter.live_bytes()
            raise WalFullError(
                f"sink={self.config.name} WAL slot {self.wal.path} holds {self.wal.live_bytes} bytes not yet "
                f"acked by Kafka (and the slots this worker adopted {adopted}); max_wal_bytes="
                f"{self.config.max_wal_bytes}; waited max_block_s="
                f"{self.config.max_block_s}s for acks. Nothing was dropped: the task fails and Spark re-runs it.",
                self.wal.path,
            )

    def close(self, flush_s: float = 5.0) -> None:
        """Flush (up to ``flush_s``), prune and release every slot. Optional: nothing depends on it."""
        self.delivery.close(flush_s)
        if self.wal is not None:
            self.wal.close()
        if self.lock is not None:
            self.lock.release()
