"""The exactly-once commit: one lane's transaction as a state machine, and the steps that publish a unit through it.

A *unit* is what one Spark task committed to the WAL for one (run, batch,
partition): its chunks, in sequence order, and the digest of its records'
ids (:func:`...ids.unit_digest`). A unit is published in one transaction by
the producer of its *lane*, ``transactional.id = rks-eo.<sink>:<run>:<lane>``:
the same for every attempt at the unit, so a retried, speculative or adopting
producer fences the earlier one. The same transaction commits the lane's
marker (:mod:`.markers`, read back by :mod:`.marker_reads`): batch and
digest. The driver ends a batch only once every lane of it is committed
(:mod:`...driver.settle`), so batches of a lane commit in order.

A lane's producer is in exactly one :class:`LaneState`, the single truth
about its transaction; only :meth:`Lane.to` moves it, and it refuses a move
the machine does not make (a bug, never data)::

    NEW       -> READY                          init_transactions()
    READY     -> SWEEPING                       the sweep's transaction begins (SWEPT too: a topic met since)
    SWEEPING  -> ABORTING -> SWEPT              the sweep's abort (back where it began if the sweep failed)
    SWEPT     -> OPEN                           begin_transaction() for a unit, or one of its parts
    OPEN      -> PRODUCED -> MARKED             every record of the unit in it; then its marker
    MARKED    -> COMMITTING -> SWEPT            commit_transaction()
    any open  -> DOOMED -> ABORTING -> READY    it can only be aborted
    OPEN, PRODUCED -> ABORTING -> READY         another unit's unfinished transaction, aborted first

* ``NEW``: the producer exists; ``init_transactions()`` has not returned;
* ``READY``: initialised, not swept since its init or its last abort;
* ``SWEEPING``: the sweep's own transaction is open (:func:`sweep`): it is aborted whatever happens;
* ``SWEPT``: nothing open; it may begin a transaction on the topics it swept;
* ``OPEN``: a unit's transaction is begun and its records are going in (``chunks_in`` of its chunks are);
* ``PRODUCED``: every record of the unit is in it; ``MARKED``: its marker too, only the commit is left;
* ``COMMITTING`` / ``ABORTING``: the call was made and has not returned an outcome: an error now leaves
  the outcome unknown, and a new producer settles it (:meth:`Committer.note_error`); a call that raised
  something else is resumed by calling it again (librdkafka resumes a timed-out call only so);
* ``DOOMED``: a transaction is open that can only be aborted (a record failed, a chunk met a topic not
  swept, the unit outgrew one transaction, or the broker said it must abort).

Steps of :meth:`Committer.commit`, each resumable after a failure or a deadline:

1. the lane's producer, initialised once (``NEW -> READY``); re-created when
   the lane's marker moved since this producer last saw it (another worker
   committed there, so this producer was fenced); swept since its init or its
   last abort (``READY -> SWEPT``, :func:`sweep`), over every topic the unit
   writes;
2. read the marker; decide (:meth:`Committer.decide`): a unit the marker
   proves committed (same batch, same digest) is *skipped*; a later batch on
   the marker skips a recovered unit (batches end in order) but is a
   *mismatch* for a task's own unit (its run id was reused with new data), as
   is the same batch with another digest; else ``begin_transaction``
   (``SWEPT -> OPEN``);
3. produce the unit's chunks from the WAL, resuming after the chunks already
   in the open transaction (the deadline is checked between chunks only)
   (``OPEN -> PRODUCED``);
4. the marker, offset and record (``PRODUCED -> MARKED``), then
   ``commit_transaction`` (``MARKED -> COMMITTING -> SWEPT``); a commit (or
   abort) that ended without an outcome drops the lane's producer: the next
   one's ``init_transactions`` completes or aborts it, and step 2 reads which.

Three paths run these steps over the same states:

* **in the task** (:class:`InlineTransaction`): steps 1-2 when the task's
  first chunk reaches the WAL, step 3 chunk by chunk right after each WAL
  append, step 4 once the attempt is committed in the WAL (WAL first);
* **from the WAL** (:meth:`Committer.commit`): any retry, a drain job, an
  adopter, and a task whose inline transaction broke or could not begin;
* **in parts** (:func:`commit_parts`): a unit too large for one transaction,
  one bucket of records per transaction with a partial marker
  (:mod:`.subunits` says what a bucket is), steps 2-4 once per bucket.

A record refused for good inside the transaction *refuses* the unit: no
transaction commits it, and the unit book (:mod:`.units`) stores its records
as dead letters.

Where it runs: a worker (the task, its poller thread, a drain job, an
adopter), the unit book's lock serialising calls per process. Nothing here
pickles. Lanes seen from outside a task: :func:`sink_lanes`,
:func:`abort_lingering` (operators), and :func:`.marker_reads.lane_markers`
(the driver).
"""

from __future__ import annotations

import enum
import logging
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Callable, Iterable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ... import _points
from ...arrays import column
from ...config import SinkConfig
from ...deadline import Deadline
from ...errors import ConfigError, MarkerError
from ...ids import digest_terms
from ...wal.format import AttemptKey, ChunkKey, decode_chunk
from ..admin import client_conf
from ..codes import NON_RETRIABLE, PRODUCER_RESET
from ..engine import WEDGED, open_engine
from ..rows import chunk_topic, record_index
from . import subunits
from .marker_reads import MarkerReader
from .markers import PRE_INIT_READ_S, PRE_INIT_SHARE, UNANSWERED, Marker, encode_commit, lane_id, sink_lane_prefix
from .subunits import Partial, txn_timeout_ms
from .topic import UNKNOWN_TOPIC_CODES, marker_topic_id, recheck_marker_topic

__all__ = ["COMMITTED", "SKIPPED", "PENDING", "MISMATCH", "REFUSED", "STEP_S", "COUNTS", "LaneState",
           "LaneTransitionError", "Unit", "Lane", "LanePool", "Committer", "InlineTransaction", "Parts",
           "StepTimeout", "Decided", "SweepFailed", "SWEEP_KEY", "left", "lane_conf", "sweep", "lane_topics",
           "chunk_topics", "unswept_topics", "plan_parts", "commit_parts", "produce_unit", "chunk_terms",
           "uncommitted_rows", "sink_lanes", "abort_lingering"]

log = logging.getLogger(__name__)

#: How a try at a unit ends (:meth:`Committer.commit`).
COMMITTED, SKIPPED, PENDING, MISMATCH, REFUSED = "committed", "skipped", "pending", "mismatch", "refused"
STEP_S = 2.0  # the least time one step gets: the deadline is checked between steps, a step is not cut short
#: This process's counts, read by each exactly-once task around its work for its report (metrics): lane producers
#: opened (a lane new to this worker, or one replaced) and transactions aborted.
COUNTS = {"opened": 0, "aborted": 0}
SWEEP_KEY = b"rks-sweep"
_SWEEP_CHUNK = -2  # the lane's round id for the sweep's records (chunks are >= 0, the marker -1)
_MASK64 = (1 << 64) - 1


# -- how a try ends early ------------------------------------------------------------------------------------------


class StepTimeout(Exception):
    """No time left for a step: the unit stays pending (resumed later)."""


class Decided(Exception):
    """The lane's marker decided the unit before any producer was touched (skipped, or a mismatch)."""

    def __init__(self, outcome: str) -> None:
        super().__init__(outcome)
        self.outcome = outcome


class SweepFailed(Exception):
    """The sweep could not complete before its deadline; the lane is tried again later (its producer stays)."""


def left(deadline: Deadline, what: str) -> float:
    """The timeout of one step (client call): what is left, at least ``STEP_S``.

    The deadline is checked before a step starts, never in the middle of one, so a unit longer than any
    window still progresses (each try resumes where the last one stopped); a try ends at most one step late.

    Raises:
        StepTimeout: no time is left.
    """
    rest = deadline.remaining()
    if rest is not None and rest <= 0:
        raise StepTimeout(f"no time left for {what} (resumed later)")
    return 30.0 if rest is None else max(STEP_S, rest)


# -- the unit ------------------------------------------------------------------------------------------------------


@dataclass
class Unit:
    """One committed WAL attempt, published as one transaction.

    ``own``: the unit of the task that calls (a mismatch is its error), not one recovered
    from a WAL. ``refused``: (chunk, index, code, text) of the records refused for good.
    """

    wal: Any
    key: AttemptKey
    run: str
    rows: int
    chunks: list[tuple[ChunkKey, int]]  # (key, stored size), in sequence order
    digest: int = 0
    own: bool = False
    abandoned: bool = False  # own, but its task returned without it (a mismatch is then set aside)
    outcome: str = PENDING
    last_error: str = ""
    attempts: int = 0
    why: str = ""  # why it was skipped, or does not match
    found: Marker | None = None
    refused: list[tuple[ChunkKey, int, int, str]] = field(default_factory=list)
    parts: tuple[int, int] | None = None  # committed in parts: (buckets, those committed) (commit_parts)
    dead_rows: int = 0  # refused: its records in the dead-letter store (all but the parts committed before)

    @property
    def batch(self) -> int:
        return self.key.batch

    @property
    def partition(self) -> int:
        return self.key.partition


# -- the lane: its states ------------------------------------------------------------------------------------------


class LaneState(enum.Enum):
    NEW = "new"
    READY = "ready"
    SWEEPING = "sweeping"
    SWEPT = "swept"
    OPEN = "open"
    PRODUCED = "produced"
    MARKED = "marked"
    COMMITTING = "committing"
    ABORTING = "aborting"
    DOOMED = "doomed"


_S = LaneState
_ALLOWED: dict[LaneState, frozenset[LaneState]] = {
    _S.NEW: frozenset({_S.READY}),
    _S.READY: frozenset({_S.SWEEPING, _S.DOOMED}),
    _S.SWEEPING: frozenset({_S.ABORTING, _S.DOOMED}),
    _S.SWEPT: frozenset({_S.SWEEPING, _S.OPEN, _S.DOOMED}),
    _S.OPEN: frozenset({_S.PRODUCED, _S.ABORTING, _S.DOOMED}),
    _S.PRODUCED: frozenset({_S.MARKED, _S.ABORTING, _S.DOOMED}),
    _S.MARKED: frozenset({_S.COMMITTING, _S.DOOMED}),
    _S.COMMITTING: frozenset({_S.SWEPT, _S.DOOMED}),
    _S.ABORTING: frozenset({_S.READY, _S.SWEPT, _S.DOOMED}),  # SWEPT: the sweep's own abort
    _S.DOOMED: frozenset({_S.ABORTING}),
}
_IDLE = frozenset({_S.NEW, _S.READY, _S.SWEPT})  # no transaction open
_OWNED = frozenset({_S.OPEN, _S.PRODUCED, _S.MARKED, _S.COMMITTING})  # a unit's transaction, resumable by that unit
_SWEPT = _OWNED | {_S.SWEPT}


class LaneTransitionError(RuntimeError):
    """A lane was asked to move where its state machine does not go (a bug, never data)."""


class Lane:
    """One lane's producer, its marker consumer, its :class:`LaneState`, and what its open transaction holds."""

    def __init__(self, producer: Any, consumer: Any) -> None:
        self.producer = producer
        self.consumer = consumer
        self.state = _S.NEW
        self.born = time.monotonic()  # producers born before a wedge seen in this process are replaced (LanePool)
        #: a read of its marker before its init went unanswered: the next one before init is not waited for
        self.unanswered = False
        self.swept_topics: set[str] = set()  # what its last sweep covered (meaningful while it is swept)
        self.need_topics: set[str] = set()  # topics its units write, met since (swept by the next sweep)
        self.known: Marker | None = None  # the marker as this producer last committed or read it
        self.marked_as: Marker | None = None  # MARKED: the marker its open transaction carries, as a read returns it
        self.owner: tuple[str, AttemptKey] | None = None  # (slot path, attempt) whose transaction is open
        self.chunks_in = 0  # chunks of the open unit produced into the transaction (a retry resumes after them)
        #: delivery failures inside the open transaction: (error, record index or (topic, key, value), chunk)
        self.failures: list[tuple[Any, Any, int]] = []
        self.parts: Parts | None = None  # the open unit's plan when it is committed in parts
        self._rids: dict[int, tuple[int, Any]] = {}  # the engine's round id -> (chunk, rows) of the open transaction
        self._next_rid = 0

    def to(self, state: LaneState) -> None:
        """Move to ``state``.

        Raises:
            LaneTransitionError: the machine makes no such move.
        """
        self._can(state)
        self.state = state

    def _can(self, state: LaneState) -> None:
        if state not in _ALLOWED[self.state]:
            raise LaneTransitionError(f"lane {self.state.value} -> {state.value}")

    @property
    def idle(self) -> bool:
        """No transaction is open: the lane may be replaced or swept."""
        return self.state in _IDLE

    @property
    def swept(self) -> bool:
        """Its last sweep (over :attr:`swept_topics`) completed since its init and its last abort: it may begin a
        transaction there, or has one open that it began so."""
        return self.state in _SWEPT or (self.owner is not None and self.state in (_S.DOOMED, _S.ABORTING))

    @property
    def ending(self) -> bool:
        """A commit or abort was called and has not returned: an error now leaves its outcome unknown."""
        return self.state is _S.COMMITTING or self.state is _S.ABORTING

    def init(self, timeout_s: float) -> None:
        """``NEW -> READY``: ``init_transactions()`` (fences every earlier producer of the lane, ends its
        transaction)."""
        self._can(_S.READY)
        self.producer.init_transactions(timeout_s)
        self.to(_S.READY)

    def begin(self, owner: tuple[str, AttemptKey]) -> None:
        """``SWEPT -> OPEN``: a transaction for ``owner``'s unit (or one of its parts)."""
        self._can(_S.OPEN)
        self.producer.begin_transaction()
        self.to(_S.OPEN)
        self.owner, self.chunks_in, self.failures = owner, 0, []

    def doom(self) -> None:
        """The open transaction can only be aborted (or, ``READY``/``SWEPT``, the broker said the producer must
        abort). Nothing is open before its init: a ``NEW`` lane stays so."""
        if self.state not in (_S.NEW, _S.DOOMED, _S.SWEEPING):
            self.to(_S.DOOMED)

    def produced(self, owner: Any) -> None:
        """``OPEN -> PRODUCED``: every record of ``owner``'s unit is in the open transaction (a doomed one
        stays doomed)."""
        if self.owner == owner and self.state is _S.OPEN:
            self.to(_S.PRODUCED)

    def mark(self, reads_as: Marker) -> None:
        """``PRODUCED -> MARKED``: the marker is in the open transaction; ``reads_as``: the lane's offset once it
        commits."""
        self.to(_S.MARKED)
        self.marked_as = reads_as

    def commit(self, timeout_s: float) -> None:
        """``MARKED -> COMMITTING -> SWEPT`` (``COMMITTING``: a call that raised, resumed); the lane's marker is then
        the one its transaction carried."""
        if self.state is not _S.COMMITTING:
            self.to(_S.COMMITTING)
        self.producer.commit_transaction(timeout_s)
        self.to(_S.SWEPT)
        self.known = self.marked_as
        self._clear()

    def abort(self, timeout_s: float) -> None:
        """``-> ABORTING -> READY``: an abort may leave records open as well (:func:`sweep`): swept again first."""
        if self.state is not _S.ABORTING:
            self.to(_S.ABORTING)
        self.producer.abort_transaction(timeout_s)
        COUNTS["aborted"] += 1
        self.to(_S.READY)
        self._clear()

    def settle_open(self, owner: Any, left: Callable[[str], float]) -> None:
        """Finish what the lane has open before anything else, unless it is ``owner``'s own (it resumes).

        librdkafka resumes an API call that timed out only by calling it again
        (an abort during a pending commit fails with ``_CONFLICT``): another
        unit's transaction with its records and marker all sent is committed
        (resumed), anything else open or failed is aborted (or the abort
        resumed). ``left(what)`` bounds each call.
        """
        if self.idle:
            return
        if self.owner == owner and self.state in _OWNED:
            return  # the caller's own transaction: steps 3-4 resume it
        if self.state is _S.MARKED or self.state is _S.COMMITTING:  # another unit's, complete: resumed
            self.commit(left("commit_transaction"))
        else:
            self.abort(left("abort_transaction"))
        self.failures = []

    def round_for(self, chunk: int, rows: Any = None) -> int:
        """A fresh round id for a chunk (``-1``: the marker record) of the open transaction; ``rows``: the chunk's
        row of each record produced, when only some of them are (a part's)."""
        self._next_rid += 1
        self._rids[self._next_rid] = (chunk, rows)
        return self._next_rid

    def collect(self, results: Any) -> None:
        """Failures the native engine counted (its :meth:`.Engine.poll` results) into :attr:`failures`."""
        for rid, _acked, _reported, failed in results:
            chunk, rows = self._rids.get(rid, (None, None))
            if chunk is not None:
                self.failures.extend((err, row if rows is None else int(rows[row]), chunk) for row, err in failed)

    def _clear(self) -> None:
        self.owner, self.chunks_in, self.parts, self.marked_as = None, 0, None, None
        self._rids = {}

    def close(self) -> None:
        try:
            self.consumer.close()
        except Exception:  # closing is best effort: the process may be going away
            pass




def on_delivery(lane: Lane, chunk_index: int, err: Any, msg: Any) -> None:
    """A delivery report inside a lane's transaction: failures are kept with their chunk (-1: the marker)."""
    if err is not None:
        lane.failures.append((err, (msg.topic(), msg.key(), msg.value()), chunk_index))


def lane_conf(config: SinkConfig, lid: str) -> dict[str, Any]:
    """A lane producer's configuration: transactional, and never creating a topic (a deleted marker topic stays
    deleted rather than coming back with the broker's defaults; exactly-once needs its topics beforehand)."""
    conf = config.producer_conf()
    conf.update({"transactional.id": lid, "enable.idempotence": "true", "acks": "all",
                 "allow.auto.create.topics": "false"})
    return conf


class LanePool:
    """The lanes one worker process holds, least recently used first (at most ``max_lanes``).

    An idle lane beyond the bound is closed (its next user re-initialises it,
    which fences nobody alive); a lane with a unit's transaction open is never dropped.
    """

    def __init__(self, config: SinkConfig, on_client_error: Callable[[Any], None] | None = None,
                 max_lanes: int = 32) -> None:
        self.config = config
        self._on_error = on_client_error
        self._lanes: OrderedDict[str, Lane] = OrderedDict()
        self._max_lanes = max_lanes
        self.markers = MarkerReader(config)
        self.wedged_at = 0.0  # when a lane producer of this process last wedged (drop)

    def get(self, lid: str, timeout_s: float = 10.0) -> Lane:
        """The lane ``lid``, created (producer and marker consumer) on first use.

        Raises:
            confluent_kafka.KafkaException: the marker topic cannot be created, or the broker did not answer.
            ConfigError / MarkerError: the marker topic is not compacted, or was deleted (:mod:`.topic`).
        """
        lane = self._lanes.get(lid)
        if lane is not None and lane.born < self.wedged_at and lane.idle:
            log.info("sink=%s lane=%s producer predates a wedged one of this process: replaced before its unit",
                     self.config.name, lid)
            self.drop(lid)  # another lane's send_offsets wedged (a broker restart): this one would too
            lane = None
        if lane is not None:
            self._lanes.move_to_end(lid)
            return lane
        marker_topic_id(self.config, timeout_s)  # once per process
        from confluent_kafka import Consumer

        producer = open_engine(self.config, lane_conf(self.config, lid), error_cb=self._on_error)
        COUNTS["opened"] += 1  # a lane new to this worker (a hop), or its producer replaced
        cconf = client_conf(self.config)
        if self._on_error is not None:
            cconf["error_cb"] = self._on_error
        cconf.update({"group.id": lid, "enable.auto.commit": "false", "isolation.level": "read_committed"})
        lane = Lane(producer, Consumer(cconf))
        self._lanes[lid] = lane
        while len(self._lanes) > self._max_lanes:  # idle lanes go; a new owner re-initialises (and fences)
            old_id, old = self._lanes.popitem(last=False)
            if old.owner is None:
                old.close()
            else:
                self._lanes[old_id] = old  # never drop a lane with a unit's transaction open
                self._lanes.move_to_end(old_id, last=False)
                break
        return lane

    def known(self, lid: str) -> Lane | None:
        return self._lanes.get(lid)

    def drop(self, lid: str, wedged: bool = False) -> None:
        """Forget a lane (its producer failed fatally, or was fenced): the next use builds a new one.

        ``wedged``: its producer wedged in a call (:func:`..engine.bounded`; librdkafka #5456 after a broker
        restart): the lanes' producers born before now are replaced at their next unit too, instead of each
        wedging in turn (one init each rather than the call's bound).
        """
        if wedged:
            self.wedged_at = time.monotonic()
        lane = self._lanes.pop(lid, None)
        if lane is not None:
            lane.close()

    def close(self) -> None:
        for lid in list(self._lanes):
            self.drop(lid)
        self.markers.close()


# -- the commit ----------------------------------------------------------------------------------------------------


class Committer:
    """Publishes units through lane producers (callers serialise calls per runtime).

    Raises nothing for broker trouble: an outcome of ``PENDING`` with
    ``last_error`` says the unit stays in the WAL for a later call.
    """

    def __init__(self, config: SinkConfig, on_client_error: Callable[[Any], None] | None = None,
                 max_lanes: int = 32) -> None:
        self.config = config
        self.lanes = LanePool(config, on_client_error, max_lanes)

    def commit(self, unit: Unit, deadline: Deadline) -> str:
        """Try to publish ``unit`` before ``deadline`` (steps 1-4, from the WAL); returns its outcome (also in
        ``unit.outcome``).

        Raises:
            MarkerError / ConfigError: of a task's own unit, when the markers cannot be trusted (a recovered
                unit keeps it as its last error and stays in the WAL).
        """
        from confluent_kafka import KafkaException

        lid = lane_id(self.config.name, unit.run, unit.partition)
        unit.attempts += 1
        try:
            try:
                unit.outcome = self._commit(self._lane(lid, unit, deadline), lid, unit, deadline)
            except Decided as d:
                unit.outcome = d.outcome
            except KafkaException as exc:
                unit.last_error = self.note_error(lid, exc.args[0])
                unit.outcome = self._refused(lid, unit) or PENDING
            except (StepTimeout, SweepFailed) as exc:  # resumed by a later attempt
                unit.last_error = str(exc)
                unit.outcome = PENDING
        except (MarkerError, ConfigError) as exc:  # the markers cannot be trusted: the unit stays in the WAL
            unit.last_error, unit.outcome = self.config.scrub(str(exc)), PENDING
            if unit.own:
                raise  # the task fails with it; a retried unit carries it as its last error
        return unit.outcome

    def _commit(self, lane: Lane, lid: str, unit: Unit, deadline: Deadline) -> str:
        """Steps 2-4 on a lane of step 1 (:meth:`_lane`): resumes ``unit``'s own open transaction, or begins one
        once its marker says to publish."""
        owner = (unit.wal.path, unit.key)
        lane.settle_open(owner, partial(left, deadline))
        if lane.parts is not None and lane.parts.owner != owner:  # another unit's plan: never this one's
            lane.parts = None
        if lane.idle:  # Step 2
            marker = lane.known if self._sweep(lane, lid, unit, deadline) else self._marker(lid, lane, deadline)
            decided = self.decide(unit, marker)
            if decided is not None:
                return decided
            if lane.parts is None or lane.parts.owner != owner or marker != lane.known:  # else: kept from a try
                lane.parts = plan_parts(unit, marker, txn_timeout_ms(self.config.kafka_conf_items))
            if lane.parts is None:
                lane.begin(owner)
        if lane.parts is not None:  # too large for one transaction: one per bucket
            commit_parts(self.config, lane, lid, unit, deadline)
            return COMMITTED
        if lane.state is LaneState.OPEN:  # Step 3
            produce_unit(self.config, lane, unit, deadline)
            lane.produced(owner)
        if lane.state is LaneState.PRODUCED:  # Step 4
            _send_marker(self.config, lane, lid, unit, deadline)
        _points.point("eo.committing", batch=unit.batch, partition=unit.partition, rows=unit.rows)
        lane.commit(left(deadline, "commit_transaction"))  # an error from here on: a new producer settles it
        return COMMITTED

    def note_error(self, lid: str, err: Any) -> str:
        """What a Kafka error leaves the lane to do next time; returns the error's text (scrubbed).

        Raises:
            MarkerError: the error names an unknown topic, and the marker topic is gone or replaced (:mod:`.topic`).
        """
        from confluent_kafka import KafkaException

        text = self.config.scrub(err.str() if hasattr(err, "str") else str(err))
        if getattr(err, "code", lambda: None)() in UNKNOWN_TOPIC_CODES:
            try:
                recheck_marker_topic(self.config, 10.0, f"lane {lid}: {text}")
            except KafkaException:  # not answered now: the next error or marker read checks it again
                pass
        lane = self.lanes.known(lid)
        if lane is not None:
            abortable = getattr(err, "txn_requires_abort", lambda: False)()
            if getattr(err, "fatal", lambda: False)() or getattr(err, "code", lambda: None)() in PRODUCER_RESET:
                log.warning("sink=%s lane=%s producer failed fatally (%s); a new one takes over",
                            self.config.name, lid, text)
                self.lanes.drop(lid, wedged=WEDGED in text)
            elif lane.ending and not abortable:
                # No outcome (timed out): its request could still land on a later transaction of this epoch. A
                # new producer fences it; its init completes or aborts the transaction; the marker tells which.
                log.warning("sink=%s lane=%s commit/abort without outcome (%s): a new producer settles it",
                            self.config.name, lid, text)
                self.lanes.drop(lid)
            elif abortable:
                lane.doom()
        return text

    def decide(self, unit: Unit, marker: Marker | None) -> str | None:
        """What the lane's marker says of ``unit``: ``SKIPPED``, ``MISMATCH`` (``unit.why`` says why), or ``None``:
        publish."""
        if marker is None or marker.latest < unit.batch:
            return None
        unit.found = marker
        if marker.batch == unit.batch:
            if marker.proves(unit.batch, unit.digest):
                unit.why = "its lane's marker shows this very unit committed (same batch, same digest of its ids)"
                return SKIPPED
            unit.why = (f"its lane's marker shows batch {unit.batch} committed with other records (another digest "
                        "of the record ids)")
            return MISMATCH
        if marker.latest == unit.batch:
            return None  # committed in part: the rest (commit_parts)
        if unit.own:
            unit.why = (f"its lane already committed a later batch ({marker.latest}): run id {unit.run!r} was used "
                        "before with other batches")
            return MISMATCH
        unit.why = (f"its lane committed batch {marker.latest} > {unit.batch} since, and batches end in order: "
                    f"batch {unit.batch}'s unit was committed first")
        return SKIPPED

    def _lane(self, lid: str, unit: Unit | None, deadline: Deadline) -> Lane:
        """Step 1: the lane's producer, initialised, and not fenced by a commit of another producer since.

        Raises:
            Decided: ``unit``'s marker decides it before a new producer is initialised (nobody is fenced).
        """
        lane = self.lanes.get(lid, left(deadline, "marker topic"))
        if lane.state is LaneState.SWEPT:
            marker = self._marker(lid, lane, deadline, before_init=True)
            if marker is UNANSWERED or marker != lane.known:  # another worker committed on this lane, or may be at it
                log.info("sink=%s lane=%s moved on elsewhere since this worker used it, or its marker went unanswered: "
                         "re-initialised", self.config.name, lid)
                self.lanes.drop(lid)
                lane = self.lanes.get(lid, left(deadline, "marker topic"))
        if lane.state is LaneState.NEW:
            if unit is not None:  # a unit Kafka already has is skipped without fencing anyone (if its marker reads)
                marker = self._marker(lid, lane, deadline, before_init=True)
                decided = None if marker is UNANSWERED else self.decide(unit, marker)
                if decided is not None:
                    raise Decided(decided)
            lane.init(left(deadline, "init_transactions"))
        return lane

    def _sweep(self, lane: Lane, lid: str, unit: Unit | None, deadline: Deadline) -> bool:
        """Step 1b: an unswept lane sweeps ``unit``'s topics; a swept one only topics its chunks met since. True: it
        swept a fresh lane and read its ``known`` marker since its init; a new producer's before the sweep (which
        commits nothing, and whose abort leaves the offset unstable for a moment), else (unanswered) after it."""
        if lane.swept and lane.need_topics <= lane.swept_topics:
            return False
        fresh = not lane.swept
        topics = lane.need_topics | (lane_topics(self.config, unit) if fresh else set())
        lane.settle_open(None, partial(left, deadline))  # a failed sweep's transaction
        before = self._marker(lid, lane, deadline, before_init=True) if fresh and lane.known is None else UNANSWERED
        sweep(self.config, lane, lid, topics, partial(left, deadline))
        if fresh:
            lane.known = self._marker(lid, lane, deadline) if before is UNANSWERED else before
        return fresh

    def begin_inline(self, wal_path: str, key: AttemptKey, run: str, deadline: Deadline) -> "InlineTransaction | None":
        """A task's unit, produced into its transaction as its chunks reach the WAL (steps 1-2 now, step 3 chunk by
        chunk: :class:`InlineTransaction`).

        ``None`` when that cannot start before ``deadline`` or the lane's
        marker is at the batch or later: the task then publishes from the WAL
        after its attempt is committed (:meth:`commit`), as any retry does.
        """
        from confluent_kafka import KafkaException

        lid = lane_id(self.config.name, run, key.partition)
        try:
            lane = self._lane(lid, None, deadline)
            if not self.config.topic and not lane.swept_topics:
                return None  # its sweep needs the unit's topics: published from the WAL once committed
            lane.settle_open(None, partial(left, deadline))
            marker = lane.known if self._sweep(lane, lid, None, deadline) else self._marker(lid, lane, deadline)
            if marker is not None and marker.latest >= key.batch:
                return None  # a re-run: the commit step decides
            lane.begin((wal_path, key))
            lane.parts = None  # (a plan of parts another unit left: replanned)
            return InlineTransaction(self.config, self.note_error, lid, lane, (wal_path, key))
        except KafkaException as exc:
            self.note_error(lid, exc.args[0])
        except (StepTimeout, SweepFailed):
            pass
        return None

    def _marker(self, lid: str, lane: Lane, deadline: Deadline, before_init: bool = False) -> Marker | None:
        """The lane's marker; one gone back from what this producer last saw makes the marker topic checked.

        ``before_init``: read for at most ``PRE_INIT_READ_S`` (and a share of
        the time left), and :data:`UNANSWERED` if the broker gave no answer
        (:meth:`.MarkerReader.read_before_init`), or gave none before to this
        lane's producer, not initialised since (not waited for twice).

        Raises:
            MarkerError: it went back because the marker topic is gone or replaced (:mod:`.topic`).
        """
        if before_init:
            if lane.unanswered and lane.state is LaneState.NEW:  # its init ends what kept the last read unanswered
                return UNANSWERED
            marker = self.lanes.markers.read_before_init(
                lid, lane.consumer, min(left(deadline, "marker") * PRE_INIT_SHARE, PRE_INIT_READ_S))
            if marker is UNANSWERED:
                lane.unanswered = True
                return marker
        else:
            marker = self.lanes.markers.read(lid, lane.consumer, left(deadline, "marker"))
        if lane.known is not None and (marker is None or marker.batch < lane.known.batch):
            recheck_marker_topic(self.config, left(deadline, "marker topic"),
                                 f"lane {lid}'s marker went back from batch {lane.known.batch}")
        return marker

    def _refused(self, lid: str, unit: Unit) -> str | None:
        """After a failure: ``REFUSED`` (``unit.refused`` filled) if a record of it was refused for good."""
        lane = self.lanes.known(lid)
        if lane is None:
            return None
        lane.collect(lane.producer.poll(0))  # the native engine's counts of the failed transaction
        permanent = [(e, msg, i) for e, msg, i in lane.failures if e.code() in NON_RETRIABLE and i >= 0]
        if not permanent:  # (no failure at all, or none for good)
            return None
        for err, where, i in permanent:  # where: the record's index (refused at produce) or its content
            ck = unit.chunks[i][0]
            index = where if isinstance(where, int) else record_index(unit.wal.read_chunk(ck), where)
            unit.refused.append((ck, index, err.code(), self.config.scrub(err.str())))
        unit.last_error = unit.refused[0][3]
        return REFUSED

    def close(self) -> None:
        self.lanes.close()


def _send_marker(config: SinkConfig, lane: Lane, lid: str, unit: Unit, deadline: Deadline,
                 part: Partial | None = None, base: Marker | None = None) -> None:
    """``PRODUCED -> MARKED``: the unit's marker into the lane's open transaction, its record and the lane group's
    offset (``part``: the partial marker of the unit's parts so far, ``base`` the lane's last complete marker).

    Raises:
        confluent_kafka.KafkaException: a client call failed (a record that failed is in ``lane.failures``).
    """
    c = encode_commit(unit.batch, unit.rows, unit.digest, unit.run, int(time.time() * 1000), part, base)
    batch = pa.RecordBatch.from_arrays([column([c.record], pa.binary()), column([lid.encode()], pa.binary()),
                                        column([0], pa.int32())], names=["value", "key", "partition"])
    _n, failed = lane.producer.produce_chunk(lane.round_for(-1), partial(on_delivery, lane, -1), batch, None,
                                             config.marker_topic, config.id_header, f"{lid}:".encode(), 0,
                                             left(deadline, "marker"))
    lane.failures.extend((e, j, -1) for j, e in failed)
    offset = (config.marker_topic, 0, c.offset) if c.metadata is None else (config.marker_topic, 0, c.offset,
                                                                           c.metadata)
    lane.producer.send_offsets(lid, lane.consumer, [offset], left(deadline, "send_offsets_to_transaction"))
    lane.mark(c.reads_as)


# -- step 3 in the task: the inline transaction --------------------------------------------------------------------


class InlineTransaction:
    """A lane's open transaction being filled by the task, chunk after chunk, right after each WAL append.

    Overlaps producing with writing the WAL: each chunk is committed to the WAL
    before it is produced, and the transaction is committed only after the
    attempt is (:meth:`Committer.commit`, which resumes it). A failure only
    dooms it: the commit step then aborts it and produces the unit again from
    the WAL. So does a unit that grows past :func:`.subunits.whole_limit`:
    too large for one transaction, it is committed in parts from the WAL.
    """

    def __init__(self, config: SinkConfig, note_error: Callable[[str, Any], str], lid: str, lane: Lane,
                 owner: tuple[str, AttemptKey]) -> None:
        self._config = config
        self._note_error = note_error  # the committer's: what a Kafka error leaves the lane to do
        self._lid, self._lane, self._owner = lid, lane, owner
        self._key = owner[1]
        self.broken = False
        self._bytes = 0  # of the chunks produced into it
        self._limit = subunits.whole_limit(subunits.txn_timeout_ms(config.kafka_conf_items))

    def produce(self, batch: Any, first_seq: int, block_s: float) -> None:
        """Produce one chunk (already committed to the WAL) into the transaction; failures break it."""
        from confluent_kafka import KafkaException

        if self.broken:
            return
        cfg = self._config
        lane = self._lane
        self._bytes += batch.nbytes
        if self._bytes > self._limit or unswept_topics(lane, batch, cfg.topic):
            # aborted at the commit step, then (swept and) produced again from the WAL, in parts if too large
            self.broken = True
            lane.doom()
            return
        try:
            _n, sync_failed = lane.producer.produce_chunk(
                lane.round_for(lane.chunks_in), partial(on_delivery, lane, lane.chunks_in), batch, None, cfg.topic,
                cfg.id_header, b"", first_seq, block_s)  # the chunk's ids come from its own id scheme
            lane.collect(lane.producer.poll(0))
        except KafkaException as exc:
            self._note_error(self._lid, exc.args[0])
            self.broken = True
            return
        lane.failures.extend((e, j, lane.chunks_in) for j, e in sync_failed)
        if lane.failures:
            self.broken = True  # aborted at the commit step, then produced again from the WAL
            lane.doom()
            return
        lane.chunks_in += 1
        _points.point("eo.produced_chunk", batch=self._key.batch, partition=self._key.partition,
                      rows=first_seq + batch.num_rows, records=batch.num_rows)

    def finish(self) -> None:
        """Every chunk is in: the commit step only sends the marker and commits (unless it broke)."""
        if not self.broken:
            self._lane.produced(self._owner)


# -- step 3 from the WAL -------------------------------------------------------------------------------------------


def produce_unit(config: SinkConfig, lane: Lane, unit: Any, deadline: Deadline, j: int = 0, count: int = 1) -> None:
    """The unit's records (``count`` > 1: bucket ``j``'s) into the open transaction, chunk by chunk from the WAL,
    after the chunks already in it; the deadline is checked between chunks only.

    Raises:
        StepTimeout: no time left, or a chunk writes topics its lane has not swept (resumed by a later attempt).
        confluent_kafka.KafkaException: a record failed (``lane.failures``; the transaction must abort).
    """
    for i in range(lane.chunks_in, len(unit.chunks)):
        if lane.failures:
            break
        if deadline.expired():
            raise StepTimeout(f"no time left to produce the unit (chunks {i}/{len(unit.chunks)} in; resumed later)")
        ck = unit.chunks[i][0]
        raw = unit.wal.read_chunk(ck)
        if raw is None:
            raise RuntimeError(f"WAL slot {unit.wal.path}: chunk {ck} of a committed attempt is missing")
        batch = decode_chunk(raw)
        rows = None if count <= 1 else np.flatnonzero(chunk_terms(batch, ck.first_seq) % np.uint64(count)
                                                       == np.uint64(j))
        n = 0
        if rows is None or len(rows):  # the bucket's rows by index: a row keeps its id (and position) in the chunk
            sub = batch if rows is None else batch.take(pa.array(rows))
            if unswept_topics(lane, sub, config.topic):  # swept first by the next attempt
                lane.doom()
                raise StepTimeout(f"chunk {i} writes topics {sorted(lane.need_topics)} its lane has not swept yet")
            n, failed = lane.producer.produce_chunk(
                lane.round_for(i), partial(on_delivery, lane, i), batch, rows, config.topic, config.id_header,
                b"", ck.first_seq, max(0.5, deadline.cap(30.0)))
            lane.failures.extend((e, r, i) for r, e in failed)
            lane.collect(lane.producer.poll(0))
        if not lane.failures:
            lane.chunks_in = i + 1
        _points.point("eo.produced_chunk", batch=unit.batch, partition=unit.partition, rows=ck.first_seq + n,
                      records=n)
    if lane.failures:  # the transaction cannot commit: aborted, then the unit is tried again (or refused)
        from confluent_kafka import KafkaException

        lane.doom()
        raise KafkaException(lane.failures[0][0])


# -- steps 2-4 in parts: a unit too large for one transaction ------------------------------------------------------


@dataclass
class Parts:
    """A unit's plan of parts: ``count`` buckets, ``next`` the first not committed, ``sums`` each bucket's digest,
    ``base`` the lane's last complete marker (every partial commit keeps it in the lane's offset); ``owner`` the
    unit's (slot, attempt). Kept on the lane between tries while its marker stays as this producer left it."""

    count: int
    next: int
    sums: list[int]
    base: Marker | None
    owner: tuple[str, Any] = ("", None)

    def prefix(self, n: int) -> int:
        """The digest of buckets ``0..n-1``."""
        return sum(self.sums[:n]) & _MASK64


def chunk_terms(batch: pa.RecordBatch, first_seq: int) -> np.ndarray:
    """Each record's term of the unit digest (:func:`.subunits.terms`); its bucket is the term mod the count."""
    return subunits.terms(*digest_terms(batch, first_seq))


def plan_parts(unit: Any, marker: Marker | None, txn_ms: int = 60000) -> Parts | None:
    """How ``unit`` is committed in parts after ``marker`` (step 2); ``None``: in one transaction.

    A unit that fits one transaction (:func:`.subunits.in_parts`), with no
    partial marker of its batch, is one transaction. Else its bucket count is
    the partial marker's (a re-run's) or its own size's, and the sum of each
    bucket's terms is read from the WAL. ``txn_ms``: the lane's
    ``transaction.timeout.ms``; a try of ``unit`` failed before when
    ``unit.last_error`` says so.

    Raises:
        Decided: ``MISMATCH`` (``unit.why`` says why): the buckets a partial marker shows committed hold other
            records than this unit's (the re-run brought other records): nothing more of the unit is produced.
    """
    done = marker.partial if marker is not None and marker.partial is not None else None
    if done is not None and done.batch != unit.batch:
        done = None
    size = sum(n for _ck, n in unit.chunks)
    if done is None and not subunits.in_parts(size, txn_ms, bool(unit.last_error)):
        return None
    count = done.count if done is not None else subunits.bucket_count(size, subunits.part_bytes(size, txn_ms))
    if count <= 1:
        return None
    sums = [0] * count
    for ck, _size in unit.chunks:
        raw = unit.wal.read_chunk(ck)
        if raw is None:
            raise RuntimeError(f"WAL slot {unit.wal.path}: chunk {ck} of a committed attempt is missing")
        t = chunk_terms(decode_chunk(raw), ck.first_seq)
        b = (t % np.uint64(count)).astype(np.int64)
        for k in np.unique(b).tolist():
            sums[k] = (sums[k] + int(t[b == k].sum(dtype=np.uint64))) & _MASK64
    base = marker if marker is not None and marker.batch >= 0 else None
    parts = Parts(count, 0 if done is None else done.k + 1, sums, base, (unit.wal.path, unit.key))
    if done is not None and parts.prefix(parts.next) != done.digest:
        unit.why = (f"its lane committed buckets 0..{done.k} of {count} of batch {unit.batch} with other records "
                    "(another digest of their ids)")
        raise Decided(MISMATCH)
    return parts


def commit_parts(config: SinkConfig, lane: Lane, lid: str, unit: Any, deadline: Deadline) -> None:
    """Every bucket of ``lane.parts`` from ``next`` on, one transaction each: begin, produce the bucket's records
    chunk by chunk (resuming after the chunks already in it), put in the partial marker (the last bucket: the
    complete one), commit. The lane is idle, or holds this unit's own open transaction.

    Raises:
        StepTimeout: no time left before a bucket (resumed by a later attempt, from the marker).
        confluent_kafka.KafkaException: a client call or a record failed (``lane.failures``; the lane doomed).
    """
    parts = lane.parts
    assert parts is not None
    owner = (unit.wal.path, unit.key)
    while parts.next < parts.count:
        j = parts.next
        unit.parts = (parts.count, j)
        if lane.idle:
            if deadline.expired():
                raise StepTimeout(f"no time left for bucket {j} of {parts.count} (resumed later)")
            lane.begin(owner)
            lane.parts = parts
        if lane.state is LaneState.OPEN:
            produce_unit(config, lane, unit, deadline, j, parts.count)
            lane.produced(owner)
        done = Partial(unit.batch, j, parts.count, parts.prefix(j + 1)) if j < parts.count - 1 else None
        if lane.state is LaneState.PRODUCED:
            _send_marker(config, lane, lid, unit, deadline, done, parts.base)
        _points.point("eo.committing_part", batch=unit.batch, partition=unit.partition, part=j, parts=parts.count)
        lane.commit(left(deadline, "commit_transaction"))  # an error from here on: a new producer settles it
        parts.next = j + 1
        lane.parts = parts
    lane.parts = None
    unit.parts = (parts.count, parts.count)


def uncommitted_rows(unit: Any, batch: pa.RecordBatch, first_seq: int) -> Callable[[int], bool]:
    """Whether row ``i`` of a chunk of ``unit`` is not in Kafka: all of them, unless buckets were committed."""
    if unit.parts is None or unit.parts[1] == 0:
        return lambda i: True
    count, done = unit.parts
    b = chunk_terms(batch, first_seq) % np.uint64(count)
    return lambda i: int(b[i]) >= done


# -- step 1b: the sweep --------------------------------------------------------------------------------------------


def sweep(config: SinkConfig, lane: Lane, lid: str, topics: Iterable[str], left: Callable[[str], float]) -> int:
    """Close, as aborted, what a lane's earlier producers left open, before its new producer commits anything;
    returns the number of partitions closed. ``left(what)`` is the time left for one client call (raising when
    none is).

    Why: every producer of a lane has the same producer id (the coordinator
    bumps only the epoch), and a partition closes *all* the open records of a
    producer id with the next control marker of that id, whatever epoch wrote
    them. Records an earlier producer left without a marker therefore become
    committed with the lane's next COMMIT on that partition: read twice. Apache
    Kafka leaves such records when it aborts a transaction while the partition
    has no leader. Measured on 4.4.0 (single node, SIGKILLed with a transaction
    open, restarted on its log after the transaction's timeout): in its first
    seconds the restarted broker aborts the expired transaction while its
    previous incarnation is still registered; when the controller fences that
    incarnation the partitions lose their leader, and the coordinator writes
    "Couldn't find leader endpoint for partitions ... likely deleted already",
    skips the ABORT markers and records the transaction as aborted
    (tests/broker/test_exactly_once_restart.py reproduces it on every run).
    So every new producer of a lane runs one aborted transaction over every
    partition the lane can write before its first real one: the ABORT marker
    on each partition closes, as aborted, whatever the lane's producer id left
    open there.

    When: before a lane's producer begins a transaction, if it has not swept
    since it was initialised or since its last abort (an abort of the lane's
    own can meet the same broker state), or if the unit writes a topic it has
    not swept (a record of a chunk on such a topic dooms the transaction, and
    the next attempt sweeps that topic first: :func:`unswept_topics`).

    Steps (``READY`` or ``SWEPT`` -> ``SWEEPING`` -> ``ABORTING`` -> ``SWEPT``):

    1. the partitions: every partition of the topics to sweep, and the marker
       topic's partition 0 (a marker topic the broker does not know fails the
       sweep with its error: the caller then checks it, :mod:`.topic`);
    2. begin a transaction, produce one record to each (key ``rks-sweep``, no
       value, the id header ``<lane>:sweep:<n>``) and the lane's group offset
       (so a transactional offset left pending is closed too);
    3. flush, bounded: each record must be in its partition's log (a partition
       without a leader fails the sweep, which the next attempt runs again);
    4. abort, serve the purged records' reports, then the lane is *swept*
       (a sweep that failed leaves it as it was before, its abort done).

    Guarantees: a lane's producer begins no transaction before a sweep over
    every topic it writes has completed since its last abort. Limits: an abort
    that returns is the broker's word that markers were written, which is what
    the measured defect breaks; the sweep's own records reached their leaders
    just before its abort, so only a partition losing its leader in that
    interval escapes it. Costs one small aborted transaction per new lane
    producer and per abort (read_uncommitted readers see its records).

    Raises:
        confluent_kafka.KafkaException: a client call failed (the caller notes it: the lane may be dropped).
        SweepFailed: a record was not acknowledged in time, or was refused (the transaction is aborted
            when it can be; otherwise the lane must abort first).
    """
    from confluent_kafka import KafkaError, KafkaException

    p = lane.producer
    # Step 1
    md = p.list_topics(config.marker_topic, timeout=left("metadata")).topics.get(config.marker_topic)
    if md is None or md.error is not None or not md.partitions:  # the caller checks the topic (.topic): deleted?
        raise KafkaException(md.error if md is not None and md.error is not None else
                             KafkaError(KafkaError._UNKNOWN_TOPIC, f"marker topic {config.marker_topic} not found"))
    before = lane.state  # READY or SWEPT: where a sweep that fails leaves it
    todo = set(topics) if not lane.swept else set(topics) - lane.swept_topics
    targets: list[tuple[str, int]] = [(config.marker_topic, 0)]
    for topic in sorted(todo):
        md = p.list_topics(topic, timeout=left("metadata"))
        t = md.topics.get(topic)
        if t is None or t.error is not None:
            if t is not None and t.error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
                log.info("sink=%s lane=%s sweep topic=%s: unknown to the broker, nothing can be open there",
                         config.name, lid, topic)
                continue  # its records fail as the broker says (UNKNOWN_TOPIC_OR_PART), refused with that reason
            raise KafkaException(t.error if t is not None else KafkaError(KafkaError._UNKNOWN_TOPIC, topic))
        targets.extend((topic, part) for part in sorted(t.partitions))
    # Step 2
    p.begin_transaction()
    lane.to(LaneState.SWEEPING)  # from here until the abort returns, whatever happens, it can only abort
    batch = pa.RecordBatch.from_arrays([
        column([None] * len(targets), pa.binary()), column([SWEEP_KEY] * len(targets), pa.binary()),
        column([t for t, _ in targets], pa.string()), column([part for _, part in targets], pa.int32())],
        names=["value", "key", "topic", "partition"])
    lane.failures = []
    _n, failed = p.produce_chunk(lane.round_for(_SWEEP_CHUNK), partial(on_delivery, lane, _SWEEP_CHUNK), batch,
                                 None, None, config.id_header, f"{lid}:sweep:".encode(), 0, left("sweep"))
    lane.failures.extend((e, j, _SWEEP_CHUNK) for j, e in failed)
    p.send_offsets(lid, lane.consumer, [(config.marker_topic, 0, 0)], left("send_offsets_to_transaction"))
    # Step 3
    unsent = p.flush(left("sweep flush")) if not lane.failures else 0
    lane.collect(p.poll(0))
    problem = (f"{len(lane.failures)} of its records failed ({lane.failures[0][0]})" if lane.failures
               else f"{unsent} of its records unacknowledged" if unsent else "")
    # Step 4
    timeout = left("abort_transaction")
    lane.to(LaneState.ABORTING)
    p.abort_transaction(timeout)
    p.poll(0)  # the purged records' reports, served now rather than inside the next transaction
    lane.failures = []
    if problem:
        lane.to(before)
        lane._clear()
        raise SweepFailed(f"lane {lid}: the sweep over {len(targets)} partitions did not complete: {problem}")
    lane.swept_topics = todo | (lane.swept_topics if before is LaneState.SWEPT else set())
    lane.to(LaneState.SWEPT)
    lane._clear()
    lane.need_topics -= lane.swept_topics
    log.info("sink=%s lane=%s swept partitions=%d: anything an earlier producer left open there is aborted",
             config.name, lid, len(targets))
    return len(targets)


def lane_topics(config: SinkConfig, unit: Any) -> set[str]:
    """The topics known to be written by ``unit`` before it is produced: the sink's topic, and with no sink topic
    (a topic column is then required) those of its WAL chunks.

    A chunk on another topic (a topic column beside a sink topic) is met
    while it is produced: :func:`unswept_topics`.
    """
    if config.topic or unit is None:
        return {config.topic} if config.topic else set()
    out: set[str] = set()
    for ck, _size in unit.chunks:
        raw = unit.wal.read_chunk(ck)
        if raw is not None:  # the commit step reports a missing chunk
            out |= chunk_topics(decode_chunk(raw), None)
    return out


def chunk_topics(batch: pa.RecordBatch, default_topic: str | None) -> set[str]:
    """The topics the records of one normalised chunk go to."""
    i = batch.schema.get_field_index("topic")
    if i < 0:
        topic = chunk_topic(batch, default_topic)
        return {topic} if topic else set()
    out = {v for v in pc.unique(batch.column(i)).to_pylist() if v}
    if default_topic and batch.column(i).null_count:
        out.add(default_topic)
    return out


def unswept_topics(lane: Lane, batch: pa.RecordBatch, default_topic: str | None) -> set[str]:
    """Topics of ``batch`` the lane's last sweep did not cover, noted for the next sweep (empty: produce it)."""
    seen = chunk_topics(batch, default_topic)
    new = seen - lane.swept_topics if lane.swept else seen
    lane.need_topics |= new
    return new


# -- lanes seen from outside a task --------------------------------------------------------------------------------


def sink_lanes(config: SinkConfig, timeout_s: float = 10.0) -> list[str]:
    """The lane names of the sink that committed at least once (their marker groups exist).

    Raises:
        concurrent.futures.TimeoutError: the admin client gave no answer within ``timeout_s`` + 5 s.
        confluent_kafka.KafkaException: the broker refused the listing.
    """
    from confluent_kafka.admin import AdminClient

    admin = AdminClient(client_conf(config))
    prefix = sink_lane_prefix(config.name)
    listed = admin.list_consumer_groups(request_timeout=timeout_s).result(timeout_s + 5.0)
    return sorted(g.group_id for g in listed.valid if g.group_id.startswith(prefix))


def abort_lingering(config: SinkConfig, lanes: Iterable[str] | None = None, timeout_s: float = 30.0) -> list[str]:
    """Abort every transaction a lane of the sink left open; returns the lanes handled.

    For each lane (default: :func:`sink_lanes`), a producer with its
    ``transactional.id`` calls ``init_transactions``: the broker fences every
    earlier producer of the lane and aborts its open transaction (Apache
    Kafka; a broker that makes such a transaction visible instead does not
    give this guarantee). A lane that is in use is fenced too: its owner
    re-initialises, reads its marker again and carries on.

    Raises:
        confluent_kafka.KafkaException: a lane could not be initialised in ``timeout_s``.
    """
    from confluent_kafka import Producer

    names = list(lanes) if lanes is not None else sink_lanes(config, timeout_s)
    for lid in names:
        if not lid.startswith(sink_lane_prefix(config.name)):
            raise ValueError(f"{lid!r} is not a lane of sink {config.name!r}")
        p = Producer(lane_conf(config, lid))
        p.init_transactions(timeout_s)
        log.warning("sink=%s lane=%s initialised: any transaction it left open is aborted", config.name, lid)
    return names
