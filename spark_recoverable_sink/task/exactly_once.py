"""A task's last step in exactly-once mode: its unit in one Kafka transaction.

The unit is committed in the WAL before this runs (WAL first); the task then
tries, until ``ack_timeout_s``, to publish it in one transaction with its
lane's marker (:mod:`.delivery.transactions`). A unit still pending at the
deadline stays in the WAL, retried by the worker, a drain job or an adopter;
the driver ends the batch only once every lane of it is committed.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from .. import _points
from ..config import SinkConfig
from ..delivery.contact import ContactDeadline
from ..delivery.exactly_once.transactions import COMMITTED, MISMATCH, SKIPPED, Unit
from ..errors import ExactlyOnceMismatchError
from ..wal.format import AttemptKey, ChunkKey

if TYPE_CHECKING:  # pragma: no cover
    from .runtime import WorkerRuntime

__all__ = ["publish_unit", "abandon_unit"]

log = logging.getLogger(__name__)


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
