"""What an exactly-once task does with each chunk once it is in the WAL, and at its end: its unit in one transaction.

While the task writes, each chunk committed to the WAL is produced into the
lane's open transaction (the inline transaction, begun at the first chunk).
The unit is committed in the WAL before its transaction commits (WAL first);
the task then tries, until ``ack_timeout_s``, to commit the transaction with
its lane's marker (:mod:`..delivery.exactly_once.lane`). A unit still
pending at the deadline stays in the WAL, retried by the worker, a drain job
or an adopter; the driver ends the batch only once every lane of it is committed.
"""

from __future__ import annotations

import contextlib
import logging
from typing import TYPE_CHECKING, Iterator

import pyarrow as pa

from .. import _points
from ..config import SinkConfig
from ..delivery.contact import ContactDeadline
from ..delivery.exactly_once.commit import InlineTransaction
from ..delivery.exactly_once.lane import COMMITTED, COUNTS, MISMATCH, REFUSED, SKIPPED, Unit
from ..errors import ExactlyOnceMismatchError, RecoverableSinkError
from ..ids import unit_digest
from ..wal.format import AttemptKey, ChunkKey
from ..wal.records import EXACTLY_ONCE

if TYPE_CHECKING:  # pragma: no cover
    from .runtime import WorkerRuntime

__all__ = ["ExactlyOnceTask", "publish_unit", "abandon_unit"]

log = logging.getLogger(__name__)


class ExactlyOnceTask:
    """One exactly-once task's unit: its chunks into the inline transaction, then the commit."""

    guarantee = EXACTLY_ONCE

    def __init__(self, rt: "WorkerRuntime", akey: AttemptKey, run: str) -> None:
        self.rt = rt
        self.akey = akey
        self.run = run
        self.chunks: list[tuple[ChunkKey, int]] = []
        self._inline: InlineTransaction | None = None
        self._begun = False
        self.digest = 0  # the unit digest so far (ids.unit_digest), recorded with the committed attempt
        self._outcome = ""
        self._rows = 0
        self._dead = 0
        self._counts0 = dict(COUNTS)  # this worker's lane counts when the task began (its report's deltas)

    @contextlib.contextmanager
    def writing(self) -> Iterator[None]:
        yield

    def begin(self, origin: int) -> AttemptKey:
        """The unit's WAL attempt: a unit is the rows of one Spark partition (never a coalesced task).

        Raises:
            RecoverableSinkError: the task brought rows of a second Spark partition.
        """
        if origin != self.akey.origin or self.chunks:
            raise RecoverableSinkError(f"sink={self.rt.config.name} batch={self.akey.batch}: an exactly-once task "
                                       f"got rows of two Spark partitions (origins {self.akey.origin} and {origin})")
        return self.akey

    def chunk(self, key: ChunkKey, norm: pa.RecordBatch, size: int) -> None:
        """The chunk ``key`` is committed in the WAL: produce it into the unit's transaction."""
        self.chunks.append((key, size))
        self.digest = unit_digest(norm, key.first_seq, self.digest)
        rt, cfg = self.rt, self.rt.config
        if not self._begun:
            self._begun = True
            _points.point("eo.before_transaction", batch=key.batch, lane=key.origin, rows=key.first_seq)
            units = rt.delivery.unit_book()
            self._inline = units.committer.begin_inline(
                rt.own_wal().path, self.akey, self.run, ContactDeadline(cfg.ack_timeout_s, rt.publisher.contact))
        if self._inline is not None:  # else: published from the WAL once committed there
            self._inline.produce(norm, key.first_seq, rt.publisher.block_s)

    def abandon(self) -> None:
        """The task failed before its unit was committed in the WAL: nothing of it was committed to Kafka."""
        abandon_unit(self.rt, self.akey)

    def finish(self, rows: int) -> int:
        """The unit is committed in the WAL: commit its transaction; returns the rows it put in Kafka (all or none,
        but for a refused unit committed in parts: those of the parts before the refusal)."""
        if self._inline is not None:
            self._inline.finish()
        self._outcome, self._dead = publish_unit(self.rt, self.rt.config, self.akey, self.run, rows, self.chunks,
                                                 self.digest)
        self._rows = rows
        return self._acked()

    def _acked(self) -> int:
        return self._rows if self._outcome == COMMITTED else self._rows - self._dead if self._outcome == REFUSED else 0

    def share(self, key: AttemptKey) -> tuple[int, int, int]:
        """(acked, dead-lettered, skipped) records of the unit (after :meth:`finish`)."""
        return self._acked(), self.dead(), self.skipped()

    def dead(self) -> int:
        """Rows of a refused unit in the dead-letter store: all of them, but those of parts committed before."""
        return self._dead if self._outcome == REFUSED else 0

    def counts(self) -> tuple[int, int]:
        """(lane producers opened, transactions aborted) by this worker while the task ran."""
        return COUNTS["opened"] - self._counts0["opened"], COUNTS["aborted"] - self._counts0["aborted"]

    def skipped(self) -> int:
        """Rows of a unit the lane's marker proves Kafka already has (not published again)."""
        return self._rows if self._outcome == SKIPPED else 0


def publish_unit(rt: "WorkerRuntime", config: SinkConfig, akey: AttemptKey, run: str, rows: int,
                 chunks: list[tuple[ChunkKey, int]], digest: int) -> tuple[str, int]:
    """Publish the task's committed unit; returns its outcome (committed, skipped, refused or pending) and, refused,
    how many of its rows went to the dead-letter store.

    A refused unit's records are in the dead-letter store and the report
    offers them (the driver raises DeadLetterError); a pending one stays in
    the WAL, retried by the worker, a drain job or an adopter.

    Raises:
        ExactlyOnceMismatchError: the lane's marker shows this batch committed
            with other records, or a later batch (the run id was used before);
            this attempt's unit is deleted from the WAL, nothing of it published.
    """
    units = rt.delivery.unit_book()
    if not chunks:
        return COMMITTED, 0
    unit = Unit(rt.wal, akey, run, rows, list(chunks), digest=digest, own=True)
    _points.point("eo.before_commit", batch=akey.batch, lane=akey.origin, rows=rows)
    outcome = units.commit(unit, ContactDeadline(config.ack_timeout_s, rt.publisher.contact))
    if outcome == MISMATCH:
        units.forget(unit)
        rt.own_wal().abort_attempt(akey)
        found = unit.found.latest if unit.found is not None else None
        raise ExactlyOnceMismatchError(
            f"sink={config.name} run={run} batch={akey.batch} lane={akey.origin}: {unit.why}. A batch "
            "re-run after a restart must bring the same records (in any split and order: read from a replayable "
            "source; avoid non-deterministic steps before the sink: rand(), limit without order, unordered "
            "sampling), with the same exactly_once_lanes; new data needs a new run id (a new checkpoint's query "
            "id, or another run_id=). See docs/guarantees.md, 'Exactly-once'. Nothing of this attempt was "
            "published.", akey.batch, akey.origin, rows, found, run, unit.why)
    if outcome in (COMMITTED, SKIPPED):
        rt.publisher.contact.mark_reached()
    return outcome, unit.dead_rows


def abandon_unit(rt: "WorkerRuntime", akey: AttemptKey) -> None:
    """A task failed before its unit was committed in the WAL: delete what it wrote (nothing was produced).

    Best effort: if the WAL refuses, the attempt stays open and the next
    recovery of the slot drops it (an open attempt is never published).
    """
    try:
        if rt.wal is not None:
            rt.wal.abort_attempt(akey)
    except Exception:  # the task's own error is the one to raise
        log.warning("sink=%s batch=%d lane=%d abandoned attempt left for recovery to drop",
                    rt.config.name, akey.batch, akey.origin, exc_info=True)
