"""The one wiring of a sink's delivery in a process, and the one loop that delivers what it holds until a deadline.

Three callers need "take what the WAL holds and get it into Kafka before a
deadline": a worker's runtime (:mod:`..task.runtime`, for its own slot and
the orphans it adopts), a drain job's task (:mod:`..task.drain`) and the
operator's ``rks replay`` (:mod:`..ops.replay`). They all build the same
:class:`Delivery` and run the same :meth:`Delivery.deliver`:

1. adopt every orphan slot of the sink (its owner is dead) and queue what it
   committed (:class:`.adopter.SlotAdopter`);
2. until nothing is pending or the deadline passes: at-least-once, one
   publisher pass at a time (produce, poll, account, retry, prune);
   exactly-once, one pass over the waiting units, oldest first, each in its
   transaction, with a short pause between passes;
   both kinds may be in one slot: a unit is delivered under the guarantee its
   attempt was accepted under, whatever the sink's guarantee is now;
3. prune what is acked; return what is still pending (it stays in the WAL).

Nothing here runs unless called: a process that dies mid-loop leaves every
record in the WAL, found by the next adopter.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable

from ..config import EXACTLY_ONCE, SinkConfig
from ..deadline import Deadline
from ..delivery.exactly_once.commit import Committer
from ..delivery.exactly_once.units import UnitBook
from ..delivery.publisher import Publisher
from .adopter import SlotAdopter

__all__ = ["Delivery"]


def _unit_book(config: SinkConfig, publisher: Publisher) -> UnitBook:
    return UnitBook(config, Committer(config, publisher.contact.client_error), publisher.dead_letters)

_UNIT_PASS_PAUSE_S = 0.2  # exactly-once: between two passes over units still waiting
_TICK_S = 0.05  # at-least-once: longest poll of one publisher pass


@dataclass
class Delivery:
    """A sink's publisher, its exactly-once unit book and its slot adopter, in one process.

    ``units`` is ``None`` until the sink is exactly-once or recovery finds an
    exactly-once unit in a slot (accepted under that promise: it is published
    only in a transaction, whatever this process's guarantee). Built on the
    executor (or in the operator's process); never pickled.
    """

    config: SinkConfig
    publisher: Publisher
    units: UnitBook | None
    adopter: SlotAdopter

    def unit_book(self) -> UnitBook:
        """The exactly-once unit book, created on first need."""
        if self.units is None:
            self.units = _unit_book(self.config, self.publisher)
            self.adopter.units = self.units
        return self.units

    @classmethod
    def build(cls, config: SinkConfig, sdir: str) -> "Delivery":
        """Wire a publisher (its producer created lazily), a unit book for exactly-once, and an adopter.

        Raises:
            Exception: whatever a part raised; the parts already built are closed first.
        """
        publisher = Publisher(config, sink_dir=sdir)
        units = None
        try:
            if config.guarantee == EXACTLY_ONCE:
                units = _unit_book(config, publisher)
            delivery = cls(config, publisher, units, SlotAdopter(config, sdir, publisher, units))
            delivery.adopter.unit_book = delivery.unit_book
            return delivery
        except BaseException:
            publisher.close(0.0)
            if units is not None:
                units.close()
            raise

    def pending(self) -> int:
        """Records (and rows of exactly-once units) not yet known to be in Kafka."""
        units = max(0, self.units.pending_rows()) if self.units is not None else 0
        return units + self.publisher.in_flight()

    def deliver(self, deadline: Deadline, on_pass: Callable[[], object] | None = None) -> int:
        """Deliver until nothing is pending or ``deadline`` passes; returns what is still pending.

        The caller holds the publisher's poll lock (:meth:`.Publisher.task`).
        ``on_pass`` is called after every pass (progress of a replay).
        """
        while self.pending() > 0 and not deadline.expired():  # Step 2
            if self.units is not None and self.units.pending_rows() > 0:  # exactly-once units, each in its transaction
                self.units.retry_pending(deadline)
            if self.publisher.in_flight() > 0:  # at-least-once chunks: one publisher pass
                self.publisher.tick(deadline.cap(_TICK_S), backlog_chunks=None)
            elif self.pending() > 0:
                time.sleep(deadline.cap(_UNIT_PASS_PAUSE_S))
            if on_pass is not None:
                on_pass()
        self.publisher.prune()  # Step 3
        return self.pending()

    def close(self, flush_s: float = 5.0) -> None:
        """Flush (up to ``flush_s``), prune, close units and adopted slots. Optional: nothing depends on it."""
        try:
            self.publisher.close(flush_s)
        finally:
            if self.units is not None:
                self.units.close()
            self.adopter.close()
