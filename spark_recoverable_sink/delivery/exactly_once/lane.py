"""An exactly-once lane: its transaction as a state machine, and the steps every path of the commit shares.

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
* ``SWEEPING``: the sweep's own transaction is open (:func:`.sweep.sweep`): it is aborted whatever happens;
* ``SWEPT``: nothing open; it may begin a transaction on the topics it swept;
* ``OPEN``: a unit's transaction is begun and its records are going in (``chunks_in`` of its chunks are);
* ``PRODUCED``: every record of the unit is in it; ``MARKED``: its marker too, only the commit is left;
* ``COMMITTING`` / ``ABORTING``: the call was made and has not returned an outcome: an error now leaves
  the outcome unknown, and a new producer finalizes it (:meth:`.commit.Committer.note_error`); a call that raised
  something else is resumed by calling it again (librdkafka resumes a timed-out call only so);
* ``DOOMED``: a transaction is open that can only be aborted (a record failed, a chunk met a topic not
  swept, the unit outgrew one transaction, or the broker said it must abort).

The commit's steps over these states: :mod:`.commit`; the sweep: :mod:`.sweep`; a unit in parts:
:mod:`.parts`.

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
from ...ids import digest_terms
from ...wal.format import AttemptKey, ChunkKey, decode_chunk
from ..admin import client_conf
from ..engine import open_engine
from ..rows import chunk_topic
from . import subunits
from .marker_reads import MarkerReader
from .markers import Marker, encode_commit
from .names import sink_lane_prefix
from .subunits import Partial
from .topic import marker_topic_id

__all__ = ["COMMITTED", "SKIPPED", "PENDING", "MISMATCH", "REFUSED", "STEP_S", "COUNTS", "LaneState",
           "LaneTransitionError", "Unit", "Lane", "LanePool", "StepTimeout", "Decided", "SweepFailed", "left",
           "lane_conf", "on_delivery", "send_marker", "produce_unit", "chunk_terms", "chunk_topics", "unswept_topics",
           "sink_lanes", "abort_lingering"]

log = logging.getLogger(__name__)

#: How a try at a unit ends (:meth:`.commit.Committer.commit`).
COMMITTED, SKIPPED, PENDING, MISMATCH, REFUSED = "committed", "skipped", "pending", "mismatch", "refused"
STEP_S = 2.0  # the least time one step gets: the deadline is checked between steps, a step is not cut short
#: This process's counts, read by each exactly-once task around its work for its report (metrics): lane producers
#: opened (a lane new to this worker, or one replaced) and transactions aborted.
COUNTS = {"opened": 0, "aborted": 0}


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
    def lane(self) -> int:
        """The unit's lane (its WAL keys' origin)."""
        return self.key.origin


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
        self.parts: Any = None  # the open unit's plan when it is committed in parts (.parts.Parts)
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
        """``-> ABORTING -> READY``: an abort may leave records open as well (:func:`.sweep.sweep`): swept again
        first."""
        if self.state is not _S.ABORTING:
            self.to(_S.ABORTING)
        self.producer.abort_transaction(timeout_s)
        COUNTS["aborted"] += 1
        self.to(_S.READY)
        self._clear()

    def finalize_open(self, owner: Any, left: Callable[[str], float]) -> None:
        """Finalize what the lane has open before anything else, unless it is ``owner``'s own (it resumes).

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


def send_marker(config: SinkConfig, lane: Lane, lid: str, unit: Unit, deadline: Deadline,
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
        _points.point("eo.produced_chunk", batch=unit.batch, lane=unit.lane, rows=ck.first_seq + n,
                      records=n)
    if lane.failures:  # the transaction cannot commit: aborted, then the unit is tried again (or refused)
        from confluent_kafka import KafkaException

        lane.doom()
        raise KafkaException(lane.failures[0][0])


def chunk_terms(batch: pa.RecordBatch, first_seq: int) -> np.ndarray:
    """Each record's term of the unit digest (:func:`.subunits.terms`); its bucket is the term mod the count."""
    return subunits.terms(*digest_terms(batch, first_seq))


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
