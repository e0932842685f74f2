"""Lanes that committed under their former name: their marker adopted by the lane's current name, once.

Lanes used to be named ``rks-eo.<sink>.<run>.<lane>``
(:func:`.markers.legacy_lane_id`); dots are allowed in sink names and run
ids, so sink ``orders`` with run ``eu.prod`` and sink ``orders.eu`` with run
``prod`` shared a lane (its transactional id, its marker). Lane ids are now
``rks-eo.<sink>:<run>:<lane>`` (:func:`.markers.lane_id`). A query that
ran before the upgrade has its lanes' markers under the former names: a
re-run batch, or a unit recovered from a WAL, must be skipped by them, not
published again.

Where it runs: a worker, the first time in a process it opens a lane
(:meth:`.transactions.Committer._lane`); nothing of it pickles. Steps of
:func:`adopt_legacy`:

1. the lane's marker under its current name: one there means nothing to
   adopt (the lane committed since, or adopted before);
2. the former lane's marker, and whose it is (:func:`legacy_marker`): the
   former name is unambiguous when neither sink name nor run id holds a dot;
   else the marker counts only when its record names this run (a record is
   written with every marker offset, in the same transaction, and names the
   run; with the former name and the run, the sink follows). None, or
   another sink's: nothing to adopt;
3. a producer with the former ``transactional.id`` is initialised (it
   fences any producer left under that name and aborts what it left open)
   and sweeps the lane's topics (:mod:`.sweep`: closes records the former
   producer id left without markers);
4. the former marker is read again (final: no producer can commit under the
   former name now), and written, in one transaction of the lane's producer
   (initialised and swept first), as the lane's marker (offset, and record
   when its whole digest is known) unless the lane has one by then.

Guarantees: a lane never publishes a unit before what it committed under its
former name is its marker (skips hold as before the upgrade); a former name
shared with another sink is never adopted on a guess: a marker that cannot
be attributed stops the lane with :class:`.MarkerError` naming
``rks adopt-lanes`` (the operator says whose it is). Limits: a process of
the former version still running beside this one could commit under the
former name after step 4 (stop every such process before upgrading).
"""

from __future__ import annotations

import logging
import time
from functools import partial
from typing import Any

from ...config import SinkConfig
from ...deadline import Deadline
from ...errors import MarkerError
from ..engine import open_engine
from .lanes import Lane, lane_conf, send_marker
from .marker_reads import MarkerReader
from .markers import UNANSWERED, Marker, client_conf, legacy_lane_id, parse_lane_id
from .steps import left
from .sweep import lane_topics, sweep

__all__ = ["adopt_legacy", "legacy_marker"]

log = logging.getLogger(__name__)


def legacy_marker(config: SinkConfig, reader: MarkerReader, run: str, partition: int, timeout_s: float,
                  vouched: bool = False) -> Marker | None:
    """The marker lane (``run``, ``partition``) committed under its former name; ``None`` if none, or another sink's.

    ``vouched``: the operator said the former lane is this sink's (``rks adopt-lanes``).

    Raises:
        MarkerError: it has a marker that cannot be told to be this sink's (its record is gone, or another).
        confluent_kafka.KafkaException: the broker did not answer.
    """
    from confluent_kafka import Consumer

    old = legacy_lane_id(config.name, run, partition)
    conf = client_conf(config)
    conf.update({"group.id": old, "enable.auto.commit": "false", "isolation.level": "read_committed"})
    c = Consumer(conf)
    try:
        offset = reader.from_offset(c, timeout_s, old)
    finally:
        c.close()
    # The latest record is the latest commit's. Read again (to the end) only when the one read before in this
    # process does not match the offset: a record young enough to be missing from it has its offset still.
    found = reader.record(old, timeout_s)
    if offset is not None and (found is None or (found[0].batch, found[0].digest32) != (offset.batch, offset.digest32)):
        found = reader.record(old, timeout_s, fresh=True)
    record = found[0] if found is not None else None
    if offset is None and record is None:
        return None
    if record is not None and (offset is None or (offset.batch, offset.digest32) == (record.batch, record.digest32)):
        if record.run != run and not vouched:
            log.info("sink=%s former lane %s is another sink's (its marker names run %r): not adopted",
                     config.name, old, record.run)
            return None
        if offset is not None:
            return record
        age_s = time.time() - found[1] / 1000.0  # the offset expired: the record stands in once old enough
        return record if age_s >= config.offsets_retention_s else None
    if vouched or ("." not in config.name and "." not in run):
        return offset  # a name only this sink and run could have written (or vouched for)
    raise MarkerError(
        f"sink={config.name} run={run} lane {partition}: the former lane {old} has a marker (batch "
        f"{offset.batch if offset else '?'}) whose record, which names its run, is gone or is another's, and that "
        f"name is shared by any sink and run that join to {old[len('rks-eo.'):-len(str(partition)) - 1]!r}. Not "
        "adopted on a guess (another sink's marker would skip this lane's units). If the query that committed it "
        f"was this sink's run {run}, adopt it: rks adopt-lanes --sink {config.name} --run {run} --kafka-conf "
        f"FILE.json --topic TOPIC --marker-topic {config.marker_topic}; if not, give this query a new run id.",
        config.marker_topic, old)


def adopt_legacy(committer: Any, lid: str, lane: Lane, unit: Any, deadline: Deadline,
                 vouched: bool = False, topics: set[str] | None = None) -> Marker | None:
    """Steps 1-4 for the lane ``lid`` (its :class:`.Lane` in the pool of ``committer``, a
    :class:`.transactions.Committer`); the marker adopted, if one.

    Skipped, to be done by a later call, when the lane's topics are not known
    yet (a topic column and no unit). ``topics``: those to sweep, when given.

    Raises:
        MarkerError: the former lane's marker cannot be attributed (see :func:`legacy_marker`).
        confluent_kafka.KafkaException, StepTimeout, SweepFailed: resumed by the next try.
    """
    config, pool = committer.config, committer.lanes
    parsed = parse_lane_id(lid)
    if topics is None:
        if not config.topic and unit is None:
            return None  # its sweeps need the unit's topics: done when the unit is published from the WAL
        topics = lane_topics(config, unit)
    # Step 1 (before the lane's init: a read that times out is no answer, and step 4 reads it again after init)
    if parsed is None or committer._marker(lid, lane, deadline, before_init=True) not in (None, UNANSWERED):
        pool.adopted.add(lid)
        return None
    _sink, run, partition = parsed
    step = partial(left, deadline)
    if legacy_marker(config, pool.markers, run, partition, step("former marker"), vouched) is None:  # Step 2
        pool.adopted.add(lid)
        return None
    old = legacy_lane_id(config.name, run, partition)  # Step 3
    from confluent_kafka import Consumer

    cconf = client_conf(config)
    cconf.update({"group.id": old, "enable.auto.commit": "false", "isolation.level": "read_committed"})
    former = Lane(open_engine(config, lane_conf(config, old)), Consumer(cconf))
    try:
        former.producer.init_transactions(step("init_transactions"))
        sweep(config, former, old, topics, step)
        marker = legacy_marker(config, pool.markers, run, partition, step("former marker"), vouched)  # Step 4
    finally:
        former.close()
        try:
            former.producer.close()
        except Exception:  # closing is best effort: it holds nothing open (its sweep aborted)
            pass
    if marker is None:
        pool.adopted.add(lid)
        return None
    if not lane.ready:
        lane.producer.init_transactions(step("init_transactions"))
        lane.ready = True
    committer._sweep(lane, lid, unit, deadline)
    if committer._marker(lid, lane, deadline) is None:
        lane.producer.begin_transaction()
        lane.must_abort = True  # until it commits: an error leaves it to be aborted
        lane.failures = []
        send_marker(config, lane, lid, marker, run, step)
        timeout = step("commit_transaction")
        lane.ending = True
        lane.producer.commit_transaction(timeout)
        lane.ending = lane.must_abort = False
        lane.reset()
        lane.known = Marker(marker.batch, marker.digest32)
        log.warning("sink=%s lane=%s adopted the marker of its former name %s (batch=%d): units it proves are "
                    "skipped as before", config.name, lid, old, marker.batch)
    pool.adopted.add(lid)
    return marker
