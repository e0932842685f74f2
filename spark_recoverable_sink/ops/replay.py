"""``rks replay``: deliver what the slots of dead processes hold, from a process that is not a Spark worker.

The sink's own recovery path does the work (:class:`..recovery.deliver.Delivery`,
the same wiring and loop as a worker's and a drain job's): every slot whose owner is dead
is locked, validated, its uncommitted attempts dropped and its committed,
unacked records produced again -- each with its original topic, partition,
key, headers, timestamp and record id, read from the WAL chunks -- and pruned
as their acks arrive. Slots held by a live process are never opened. This
process owns no slot of its own: it only adopts.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass, field
from typing import Callable

from ..config import SinkConfig
from ..deadline import Deadline
from ..recovery.deliver import Delivery
from ..wal.slots import resolve_wal_dir

__all__ = ["ReplayProgress", "ReplayResult", "replay_sink"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ReplayProgress:
    """Where a replay is: records (and their WAL bytes) queued and finished (acked or dead-lettered)."""

    records_total: int
    records_done: int
    bytes_total: int
    bytes_done: int
    seconds: float


@dataclass(frozen=True)
class ReplayResult:
    """What a replay did. ``ok``: every adopted record was acked and no slot was set aside."""

    sink: str
    adopted: tuple[int, ...]
    owned: tuple[int, ...]  # slots skipped: a live process holds them
    replayed: int  # records queued from adopted slots (exactly-once: rows of units)
    delivered: int
    dead_lettered: int
    pending: int  # still in the WAL
    bytes_total: int  # WAL bytes of the chunks replayed
    bytes_done: int  # of those, chunks finished (acked or dead-lettered)
    seconds: float
    problems: tuple[str, ...] = ()
    last_error: str = ""
    unreadable: dict[int, str] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.pending == 0 and self.dead_lettered == 0 and not self.problems


def replay_sink(config: SinkConfig, timeout_s: float = 300.0,
                on_progress: Callable[[ReplayProgress], None] | None = None,
                progress_every_s: float = 0.2) -> ReplayResult:
    """Adopt the sink's slots whose owner is dead and deliver what they hold, up to ``timeout_s``.

    ``config.wal_dir`` and ``config.name`` say where; the Kafka settings of
    ``config`` are used to produce. Records not acked by the end stay in the
    WAL (the next replay, or a worker of the sink, delivers them).

    Raises:
        ProducerError: the Kafka client cannot be created with this configuration.
        Exception: anything but a :class:`.WalError` raised while opening a slot (a WalError only
            sets the slot aside, named in ``problems``).
    """
    t0 = time.monotonic()
    deadline = Deadline(timeout_s)
    sdir = os.path.join(resolve_wal_dir(config.wal_dir), config.name)
    delivery = Delivery.build(config, sdir)  # nothing adopted yet if this fails: it closed what it built
    publisher, adopter = delivery.publisher, delivery.adopter
    adopter.replaying = []
    last = [0.0]

    def unit_rows() -> int:  # rows of exactly-once units still waiting (a slot may hold both kinds)
        return max(0, delivery.units.pending_rows()) if delivery.units is not None else 0

    def progress(force: bool = False) -> ReplayProgress:
        done_records = (units0 - unit_rows()) + sum(t.rows - len(t.skip) - t.pending for t in trackers)
        total_bytes = sum(t.size for t in trackers)
        done_bytes = sum(t.size for t in trackers if t.finished)
        p = ReplayProgress(queued, done_records, total_bytes, done_bytes, time.monotonic() - t0)
        if on_progress is not None and (force or time.monotonic() - last[0] >= progress_every_s):
            last[0] = time.monotonic()
            on_progress(p)
        return p

    try:
        with publisher.task():  # this thread polls; no poller thread is started
            queued = adopter.adopt_orphans()
            trackers = adopter.replaying
            units0 = unit_rows()
            log.info("replay sink=%s adopted=%s owned=%s records=%d", config.name, sorted(adopter.adopted),
                     sorted(adopter.owned), queued)
            adopted = tuple(sorted(adopter.adopted))
            progress(force=True)
            pending = delivery.deliver(deadline, on_pass=progress)
            final = progress(force=True)
            adopter.release_drained()
    finally:
        delivery.close(0.0)  # prune what is acked; whatever the client still holds is in the WAL
    units = delivery.units
    dead = sum(len(t.dead) for t in trackers) + (units.refused_rows if units is not None else 0)
    delivered = sum(t.acked for t in trackers) + (units0 - unit_rows() - (units.refused_rows + units.skipped_rows
                                                                          if units is not None else 0))
    problems = adopter.problems() + (units.problems() if units is not None else ())
    result = ReplayResult(
        sink=config.name, adopted=adopted, owned=tuple(sorted(adopter.owned)), replayed=queued,
        delivered=delivered, dead_lettered=dead, pending=pending,
        bytes_total=final.bytes_total, bytes_done=final.bytes_done, seconds=time.monotonic() - t0, problems=problems,
        last_error=publisher.contact.last_error if pending else "", unreadable=dict(adopter.unreadable))
    log.info("replay sink=%s records=%d delivered=%d dead_lettered=%d pending=%d seconds=%.3f", config.name,
             result.replayed, result.delivered, result.dead_lettered, result.pending, result.seconds)
    return result
