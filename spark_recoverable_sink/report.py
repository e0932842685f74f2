"""What a batch did: one row per partition from the executors, one report per batch."""

from __future__ import annotations

import json
from collections import OrderedDict
from dataclasses import asdict, dataclass, field
from typing import Any, Iterable

__all__ = ["TaskReport", "BatchReport", "DeadLetterLedger", "REPORT_DDL", "REPORT_FIELDS"]

#: (name, Spark type) of the report row each task returns.
REPORT_FIELDS: tuple[tuple[str, str], ...] = (
    ("origin", "bigint"), ("spark_attempt", "bigint"), ("rows", "bigint"), ("bytes", "bigint"),
    ("acked", "bigint"), ("pending", "bigint"), ("retried", "bigint"), ("dead_lettered", "bigint"),
    ("replayed", "bigint"), ("seconds", "double"), ("pid", "bigint"), ("slot", "string"),
    ("dead_letters", "string"), ("problems", "string"),
    # first-contact check (see contact.py): did this worker's sink ever reach a broker, its last connection error
    ("broker_reached", "bigint"), ("last_error", "string"),
    # live bytes of the task's WAL slot when it ended; librdkafka statistics (-1 / "": not enabled or not yet
    # emitted; see delivery/stats.py)
    ("wal_bytes", "bigint"), ("kafka_queue_msgs", "bigint"), ("kafka_rtt_ms", "double"),
    ("kafka_txn_state", "string"),
    # exactly-once: rows not published again because their lane's marker proves Kafka has them
    ("skipped", "bigint"),
    ("lanes_opened", "bigint"),
    ("txns_aborted", "bigint"),
)
REPORT_DDL = ", ".join(f"{n} {t}" for n, t in REPORT_FIELDS)


@dataclass(frozen=True)
class TaskReport:
    """One task's counts. ``pending`` = records of this task not acked yet (still in the WAL).

    ``dead_letters`` holds (record id, error, token) of every dead letter its
    worker still offers: not only this task's, and again in every report until
    the driver confirms the token (see :class:`DeadLetterLedger`).

    ``wal_bytes`` is the live (unacked) bytes of the task's own WAL slot when
    it ended, to compare with ``max_wal_bytes``. With ``statistics.interval.ms``
    in the Kafka configuration, ``kafka_queue_msgs`` (librdkafka's ``msg_cnt``),
    ``kafka_rtt_ms`` (mean broker round trip) and ``kafka_txn_state`` come
    from the worker's latest statistics; otherwise they are -1, -1.0 and "".
    Exactly-once: ``lanes_opened`` counts the lane producers its worker opened
    while the task ran (a lane new to the worker, or one replaced: each an
    ``init_transactions`` and a sweep), ``txns_aborted`` the transactions it
    aborted.
    """

    origin: int
    spark_attempt: int
    rows: int
    bytes: int
    acked: int
    pending: int
    retried: int
    dead_lettered: int
    replayed: int
    seconds: float
    pid: int
    slot: str
    dead_letters: tuple[tuple[str, str, str], ...] = ()
    problems: tuple[str, ...] = ()
    broker_reached: int = 0
    last_error: str = ""
    wal_bytes: int = 0
    kafka_queue_msgs: int = -1
    kafka_rtt_ms: float = -1.0
    kafka_txn_state: str = ""
    skipped: int = 0
    lanes_opened: int = 0
    txns_aborted: int = 0

    def to_row(self) -> dict[str, Any]:
        d = asdict(self)
        d["dead_letters"] = json.dumps([list(x) for x in self.dead_letters])
        d["problems"] = json.dumps(list(self.problems))
        return d

    @classmethod
    def from_row(cls, row: Any) -> "TaskReport":
        d = row.asDict() if hasattr(row, "asDict") else dict(row)
        d["dead_letters"] = tuple(tuple(x) for x in json.loads(d.get("dead_letters") or "[]"))
        d["problems"] = tuple(json.loads(d.get("problems") or "[]"))
        return cls(**d)


@dataclass(frozen=True)
class BatchReport:
    """Totals of one micro-batch (or one ``write``), built on the driver.

    ``pending`` counts records still in executors' WALs when their tasks
    ended (delivered later by the background thread); ``dead_letters`` lists
    (record id, error) of records that failed with a non-retriable error and
    that no earlier report of this sink object listed; ``run`` is the run
    component of this batch's record ids (``sink:run:batch:...``, :mod:`.ids`).

    ``wal_bytes`` sums the live WAL bytes of the slots the tasks ran on (each
    slot once, its largest figure); ``wal_slot_bytes_max`` is the fullest
    slot's (the limit ``max_wal_bytes`` is per worker, its slot and adopted ones). The ``kafka_*`` figures
    aggregate the tasks' librdkafka statistics: the largest queue, the mean
    and largest round-trip time, the distinct transaction states; -1 (and
    ``()``) when no task had statistics.
    """

    batch_id: int
    rows: int
    bytes: int
    acked: int
    pending: int
    retried: int
    dead_lettered: int
    replayed: int
    seconds: float
    tasks: int
    dead_letters: tuple[tuple[str, str], ...] = ()
    problems: tuple[str, ...] = ()
    run: str = ""
    task_reports: tuple[TaskReport, ...] = field(default=(), repr=False)
    wal_bytes: int = 0
    wal_slot_bytes_max: int = 0
    kafka_queue_msgs_max: int = -1
    kafka_rtt_ms_avg: float = -1.0
    kafka_rtt_ms_max: float = -1.0
    kafka_txn_states: tuple[str, ...] = ()
    skipped: int = 0
    lanes_opened: int = 0
    txns_aborted: int = 0

    @classmethod
    def from_tasks(cls, batch_id: int, parts: Iterable[TaskReport], seconds: float,
                        dead_letters: Iterable[tuple[str, str]] | None = None, run: str = "") -> "BatchReport":
        """Totals of the tasks' rows; ``dead_letters`` defaults to every one offered (once each)."""
        ps = tuple(sorted(parts, key=lambda p: p.origin))
        if dead_letters is None:
            dead_letters = {tok: (rid, err) for p in ps for rid, err, tok in p.dead_letters}.values()
        slots: dict[str, int] = {}
        for p in ps:  # tasks of one worker report the same slot, at different moments: keep its largest
            slots[p.slot] = max(slots.get(p.slot, 0), p.wal_bytes)
        rtts = [p.kafka_rtt_ms for p in ps if p.kafka_rtt_ms >= 0]
        return cls(
            batch_id=batch_id, rows=sum(p.rows for p in ps), bytes=sum(p.bytes for p in ps),
            acked=sum(p.acked for p in ps), pending=sum(p.pending for p in ps),
            retried=sum(p.retried for p in ps), dead_lettered=sum(p.dead_lettered for p in ps),
            replayed=sum(p.replayed for p in ps), seconds=seconds, tasks=len(ps),
            dead_letters=tuple(dead_letters),
            problems=tuple(sorted({x for p in ps for x in p.problems})), run=run, task_reports=ps,
            wal_bytes=sum(slots.values()), wal_slot_bytes_max=max(slots.values(), default=0),
            kafka_queue_msgs_max=max((p.kafka_queue_msgs for p in ps), default=-1),
            kafka_rtt_ms_avg=sum(rtts) / len(rtts) if rtts else -1.0, kafka_rtt_ms_max=max(rtts, default=-1.0),
            kafka_txn_states=tuple(sorted({p.kafka_txn_state for p in ps if p.kafka_txn_state})),
            skipped=sum(p.skipped for p in ps), lanes_opened=sum(p.lanes_opened for p in ps),
            txns_aborted=sum(p.txns_aborted for p in ps),
        )

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d.pop("task_reports")
        d["dead_letters"] = [list(x) for x in self.dead_letters]
        d["problems"] = list(self.problems)
        d["kafka_txn_states"] = list(self.kafka_txn_states)
        return d

    def log_line(self) -> str:
        line = (f"batch_id={self.batch_id} run={self.run} rows={self.rows} bytes={self.bytes} acked={self.acked} "
                f"pending={self.pending} skipped={self.skipped} retried={self.retried} "
                f"dead_lettered={self.dead_lettered} "
                f"replayed={self.replayed} tasks={self.tasks} seconds={self.seconds:.3f} "
                f"wal_bytes={self.wal_bytes} wal_slot_bytes_max={self.wal_slot_bytes_max}")
        if self.kafka_queue_msgs_max >= 0:  # librdkafka statistics enabled
            line += (f" kafka_queue_msgs_max={self.kafka_queue_msgs_max}"
                     f" kafka_rtt_ms_avg={self.kafka_rtt_ms_avg:.3f} kafka_rtt_ms_max={self.kafka_rtt_ms_max:.3f}"
                     f" kafka_txn_states={','.join(self.kafka_txn_states)}")
        return line


class DeadLetterLedger:
    """The driver's record of the dead letters it holds, by token.

    Tasks offer unreported dead letters in every report without marking them
    (a report is lost when another task fails the job). Once a job succeeded,
    :meth:`admit` takes its rows' offers and returns those new to the driver;
    :meth:`confirmed` is what the next jobs carry to the workers, which mark
    those dead letters reported in their WAL. It keeps the ``keep`` most
    recent tokens: a worker that runs no task for that long offers its dead
    letters again later and they are raised again (at least once, never lost).
    """

    def __init__(self, keep: int = 10_000) -> None:
        self.keep = keep
        self._tokens: OrderedDict[str, None] = OrderedDict()

    def admit(self, parts: Iterable[TaskReport]) -> tuple[tuple[str, str], ...]:
        """(record id, error) of the offered dead letters not held yet; they are held from now on."""
        return self.admit_offers(x for p in parts for x in p.dead_letters)

    def admit_offers(self, offers: Iterable[tuple[str, str, str]]) -> tuple[tuple[str, str], ...]:
        """(record id, error) of the offers (record id, error, token) not held yet; they are held from now on."""
        new: list[tuple[str, str]] = []
        for rid, err, token in offers:
            if token in self._tokens:
                self._tokens.move_to_end(token)
                continue
            self._tokens[token] = None
            new.append((rid, err))
        while len(self._tokens) > self.keep:
            self._tokens.popitem(last=False)
        return tuple(new)

    def confirmed(self) -> tuple[str, ...]:
        """Tokens of the dead letters the driver holds, for the next job's tasks."""
        return tuple(self._tokens)
