"""Tier 1: a task's own exactly-once unit that its task gave up waiting for (no broker: a scripted committer).

Before: a unit still pending when its task returned stayed a task's own;
once its lane's marker moved on, every retry ended in a mismatch that only a
task handles, so the unit stayed in the book, unreported, and held back every
later unit of its lane on that worker: the driver's settle timed out batch
after batch. Now it is set aside (kept in the WAL, named in every report):
a later batch on the marker does not prove it is in Kafka (a run id reused
with new data looks the same), so it is not deleted.
"""

from __future__ import annotations

from types import SimpleNamespace

from spark_recoverable_sink.config import SinkConfig
from spark_recoverable_sink.deadline import Deadline
from spark_recoverable_sink.delivery.exactly_once.markers import Marker, encode_offset
from spark_recoverable_sink.delivery.exactly_once.commit import PENDING, Committer, Unit
from spark_recoverable_sink.delivery.exactly_once.units import UnitBook
from spark_recoverable_sink.wal.format import AttemptKey


def _config() -> SinkConfig:
    return SinkConfig.build("book", {"bootstrap.servers": "127.0.0.1:1"}, "/tmp/unused-book", topic="t",
                            guarantee="exactly_once")


class ScriptedCommitter:
    """Pending while ``marker`` is None; then decides as the real committer does from that marker."""

    def __init__(self, config: SinkConfig) -> None:
        self.real = Committer(config)
        self.marker: Marker | None = None

    def commit(self, unit: Unit, deadline: Deadline) -> str:
        unit.attempts += 1
        decided = self.real.decide(unit, self.marker) if self.marker is not None else None
        unit.outcome = decided or PENDING
        return unit.outcome


class Wal:
    path = "/w/slot-0"

    def __init__(self) -> None:
        self.pruned: list[AttemptKey] = []

    def prune(self, chunks, attempts_done=(), dead=()) -> None:
        self.pruned.extend(attempts_done)


def _unit(wal: Wal, batch: int, own: bool) -> Unit:
    return Unit(wal, AttemptKey(batch, 3, 1), "run1", rows=10, chunks=[], digest=1234 + batch, own=own)


def test_a_unit_its_task_gave_up_on_is_set_aside_once_its_lane_moved_on_and_frees_the_lane():
    cfg = _config()
    committer = ScriptedCommitter(cfg)
    book = UnitBook(cfg, committer, router=SimpleNamespace())  # type: ignore[arg-type]
    wal = Wal()
    mine = _unit(wal, 5, own=True)
    assert book.commit(mine, Deadline(0.05)) == PENDING  # the broker is away: the task returns without it
    # another attempt committed batch 5 on the lane, then the driver went on to batch 6 there
    committer.marker = Marker(6, encode_offset(6, 99) & 0xFFFFFFFF)
    later = _unit(wal, 7, own=True)
    book.add(later)
    assert book._blocked(later)  # batch 5 of the same lane first
    book.retry_pending(Deadline(1.0))
    # no proof it is in Kafka (a run id reused with new data looks the same): kept in the WAL, reported
    assert mine.outcome == "mismatch" and mine.key not in wal.pruned, mine.why
    assert any("set aside" in p and "batch 5" in p for p in book.problems())
    assert not book._blocked(later) and book.pending_rows() == later.rows


def test_a_task_still_waiting_keeps_its_unit_as_its_own():
    cfg = _config()
    committer = ScriptedCommitter(cfg)
    committer.marker = Marker(6, encode_offset(6, 99) & 0xFFFFFFFF)
    book = UnitBook(cfg, committer, router=SimpleNamespace())  # type: ignore[arg-type]
    mine = _unit(Wal(), 5, own=True)
    assert book.commit(mine, Deadline(5.0)) == "mismatch"  # its run id was used before: the task's error
    assert mine.own and not mine.abandoned
