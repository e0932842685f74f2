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
5. keep the slot until all of that is acked and pruned, then release it.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from typing import TYPE_CHECKING

from ..config import SinkConfig
from ..deadline import Deadline
from ..errors import WalError, WalFullError
from ..recovery.deliver import Delivery

if TYPE_CHECKING:  # pragma: no cover
    from ..delivery.exactly_once.units import UnitBook
from ..wal.log import Wal
from ..wal.slots import SlotLock, acquire_free_slot, sink_dir

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
    """One worker process's slot, its delivery (publisher, units, adopter) and adopted orphan slots for one sink."""

    def __init__(self, config: SinkConfig) -> None:
        self.config = config
        self.sdir = sink_dir(config.wal_dir, config.name)
        self.delivery = Delivery.build(config, self.sdir)
        self.publisher = self.delivery.publisher
        self.adopter = self.delivery.adopter  # recovery of slots and adoption of orphans
        self._replayed = 0
        self._last_scan = self._last_units = time.monotonic()
        try:
            while True:
                self.lock, self.wal = self._take_own_slot()
                try:
                    self._replayed += self.adopter.recover(self.wal)
                    break
                except BaseException as exc:  # nothing was replayed or dropped: checked first
                    self.adopter.give_up(self.lock, self.wal, exc, "cannot be recovered")
                    if not isinstance(exc, WalError):
                        raise
        except BaseException:
            self.delivery.close(0.0)
            raise
        # Fully built: only now the poller starts (a failed construction leaks nothing).
        try:
            self.publisher.poller.on_idle = self._on_idle
            self.publisher.start()
        except BaseException:
            self.delivery.close(0.0)
            self.wal.close()
            self.lock.release()
            raise
        log.info("sink=%s pid=%d slot=%s opened live_bytes=%d replayed=%d",
                 config.name, os.getpid(), self.wal.path, self.wal.live_bytes, self._replayed)

    def _take_own_slot(self) -> tuple[SlotLock, Wal]:
        while True:
            lock = acquire_free_slot(self.sdir, skip=set(self.adopter.unreadable))
            try:
                return lock, self.adopter.open(lock)
            except BaseException as exc:
                self.adopter.give_up(lock, None, exc, "cannot be used")
                if not isinstance(exc, WalError):
                    raise

    @property
    def units(self) -> "UnitBook | None":
        """Exactly-once units waiting for their transaction (``None`` until this worker met one)."""
        return self.delivery.units

    def adopt_orphans(self) -> int:
        """Adopt every slot of this sink (but this worker's own) whose owner is dead and which holds records."""
        return self.adopter.adopt_orphans(skip=(self.lock.index,))

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
            if self.adopter.adopted:
                self.adopter.release_drained()
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
        self.delivery.close(flush_s)
        self.wal.close()
        self.lock.release()
