"""What an exactly-once task does with each chunk once it is in the WAL, and at its end: its unit in one transaction.

While the task writes, each chunk committed to the WAL is produced into the
lane's open transaction (the inline transaction, begun at the first chunk).
The unit is committed in the WAL before its transaction commits (WAL first);
the task then tries, until ``ack_timeout_s``, to commit the transaction with
its lane's marker (:mod:`..delivery.exactly_once.transactions`). A unit still
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
from ..delivery.exactly_once.transactions import (
    COMMITTED,
    MISMATCH,
    SKIPPED,
    InlineTransaction,
    Unit,
)
from ..errors import ExactlyOnceMismatchError
from ..wal.format import AttemptKey, ChunkKey

if TYPE_CHECKING:  # pragma: no cover
    from .runtime import WorkerRuntime

__all__ = ["ExactlyOnceTask", "publish_unit", "abandon_unit"]

log = logging.getLogger(__name__)


class ExactlyOnceTask:
    """One exactly-once task's unit: its chunks into the inline transaction, then the commit."""

    def __init__(self, rt: "WorkerRuntime", akey: AttemptKey, run: str) -> None:
        self.rt = rt
        self.akey = akey
        self.run = run
        self.chunks: list[tuple[ChunkKey, int]] = []
        self._inline: InlineTransaction | None = None
        self._begun = False

    @contextlib.contextmanager
    def writing(self) -> Iterator[None]:
        yield

    def chunk(self, key: ChunkKey, norm: pa.RecordBatch, size: int) -> None:
        """The chunk ``key`` is committed in the WAL: produce it into the unit's transaction."""
        self.chunks.append((key, size))
        rt, cfg = self.rt, self.rt.config
        if not self._begun:
            self._begun = True
            _points.point("eo.before_transaction", batch=key.batch, partition=key.partition, rows=key.first_seq)
            assert rt.units is not None
            self._inline = rt.units.committer.begin_inline(
                rt.wal.path, self.akey, self.run, ContactDeadline(cfg.ack_timeout_s, rt.publisher.contact))
        if self._inline is not None:  # else: published from the WAL once committed there
            self._inline.produce(norm, key.first_seq, rt.publisher.block_s)

    def abandon(self) -> None:
        """The task failed before its unit was committed in the WAL: nothing of it was committed to Kafka."""
        abandon_unit(self.rt, self.akey)

    def finish(self, rows: int) -> int:
        """The unit is committed in the WAL: commit its transaction; returns the rows now in Kafka (all or none)."""
        if self._inline is not None:
            self._inline.finish()
        return publish_unit(self.rt, self.rt.config, self.akey, self.run, rows, self.chunks)

    def dead(self) -> int:
        return 0


def publish_unit(rt: "WorkerRuntime", config: SinkConfig, akey: AttemptKey, run: str, rows: int,
                 chunks: list[tuple[ChunkKey, int]]) -> int:
    """Publish the task's committed unit; returns the rows now known to be in Kafka (all or none).

    Raises:
        ExactlyOnceMismatchError: this batch ran before and its committed unit
            for this partition has another row count; this attempt's unit is
            deleted from the WAL, nothing of it published.
    """
    if not chunks or rt.units is None:
        return 0
    unit = Unit(rt.wal, akey, run, rows, list(chunks))
    _points.point("eo.before_commit", batch=akey.batch, partition=akey.partition, rows=rows)
    outcome = rt.units.commit(unit, ContactDeadline(config.ack_timeout_s, rt.publisher.contact))
    if outcome == MISMATCH:
        rt.units.mismatched.pop(f"{unit.wal.path}:{unit.key}", None)
        rt.wal.abort_attempt(akey)
        raise ExactlyOnceMismatchError(
            f"sink={config.name} batch={akey.batch} partition={akey.partition}: this run has {rows} rows, but "
            f"the unit committed to Kafka for it earlier had {unit.found_rows} (mod 2^24). A batch re-run "
            "after a restart must put the same rows in the same Spark partitions: read from a replayable "
            "source, and avoid non-deterministic steps before the sink (repartition() without columns, "
            "rand(), limit without order, unordered sampling); see README 'Choosing a guarantee'. Nothing "
            "of this attempt was published.", akey.batch, akey.partition, rows, unit.found_rows)
    if outcome in (COMMITTED, SKIPPED):
        rt.publisher.contact.mark_reached()
        return rows
    return 0


def abandon_unit(rt: "WorkerRuntime", akey: AttemptKey) -> None:
    """A task failed before its unit was committed in the WAL: delete what it wrote (nothing was produced).

    Best effort: if the WAL refuses, the attempt stays open and the next
    recovery of the slot drops it (an open attempt is never published).
    """
    try:
        rt.wal.abort_attempt(akey)
    except Exception:  # the task's own error is the one to raise
        log.warning("sink=%s batch=%d partition=%d abandoned attempt left for recovery to drop",
                    rt.config.name, akey.batch, akey.partition, exc_info=True)
