"""The exactly-once commit: a unit published in one transaction of its lane, over the lane's states (:mod:`.lane`).

Steps of :meth:`Committer.commit`, each resumable after a failure or a deadline:

1. the lane's producer, initialised once (``NEW -> READY``); re-created when
   the lane's marker moved since this producer last saw it (another worker
   committed there, so this producer was fenced); swept since its init or its
   last abort (``READY -> SWEPT``, :func:`.sweep.sweep`), over every topic the unit
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
* **in parts** (:func:`.parts.commit_parts`): a unit too large for one transaction,
  one bucket of records per transaction with a partial marker
  (:mod:`.subunits` says what a bucket is), steps 2-4 once per bucket.

A record refused for good inside the transaction *refuses* the unit: no
transaction commits it, and the unit book (:mod:`.units`) stores its records
as dead letters.

Where it runs: a worker (the task, its poller thread, a drain job, an adopter), the unit book's lock
serialising calls per process. Nothing here pickles.
"""

from __future__ import annotations

import logging
from functools import partial
from typing import Any, Callable

from ... import _points
from ...config import SinkConfig
from ...deadline import Deadline
from ...errors import ConfigError, MarkerError
from ...wal.format import AttemptKey
from ..codes import NON_RETRIABLE, PRODUCER_RESET
from ..engine import WEDGED
from ..rows import record_index
from . import subunits
from .lane import (
    COMMITTED,
    MISMATCH,
    PENDING,
    REFUSED,
    SKIPPED,
    Decided,
    Lane,
    LanePool,
    LaneState,
    StepTimeout,
    SweepFailed,
    Unit,
    left,
    on_delivery,
    produce_unit,
    send_marker,
    unswept_topics,
)
from .markers import UNANSWERED, Marker
from .names import lane_id
from .parts import commit_parts, plan_parts
from .subunits import txn_timeout_ms
from .sweep import lane_topics, sweep
from .topic import UNKNOWN_TOPIC_CODES, recheck_marker_topic

__all__ = ["Committer", "InlineTransaction", "COMMITTED", "SKIPPED", "PENDING", "MISMATCH", "REFUSED", "Unit"]

#: How long a lane's marker is read before its producer is initialised (``MarkerReader.read_before_init``),
#: at most: and no more than :data:`PRE_INIT_SHARE` of what the step is given (:func:`.lane.left`: at least 2 s).
#: A read that long without an answer is an open transaction of a dead or frozen producer (its offset is unstable
#: until the lane's init ends it) far more often than a slow broker: the lane is then initialised at once, with most
#: of the window still left.
PRE_INIT_READ_S = 2.0
PRE_INIT_SHARE = 1 / 3

log = logging.getLogger(__name__)


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

        lid = lane_id(self.config.name, unit.run, unit.lane)
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
        lane.finalize_open(owner, partial(left, deadline))
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
            send_marker(self.config, lane, lid, unit, deadline)
        _points.point("eo.committing", batch=unit.batch, lane=unit.lane, rows=unit.rows)
        lane.commit(left(deadline, "commit_transaction"))  # an error from here on: a new producer finalizes it
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
                log.warning("sink=%s lane=%s commit/abort without outcome (%s): a new producer finalizes it",
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
        lane.finalize_open(None, partial(left, deadline))  # a failed sweep's transaction
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

        lid = lane_id(self.config.name, run, key.origin)
        try:
            lane = self._lane(lid, None, deadline)
            if not self.config.topic and not lane.swept_topics:
                return None  # its sweep needs the unit's topics: published from the WAL once committed
            lane.finalize_open(None, partial(left, deadline))
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
        _points.point("eo.produced_chunk", batch=self._key.batch, lane=self._key.origin,
                      rows=first_seq + batch.num_rows, records=batch.num_rows)

    def finish(self) -> None:
        """Every chunk is in: the commit step only sends the marker and commits (unless it broke)."""
        if not self.broken:
            self._lane.produced(self._owner)

