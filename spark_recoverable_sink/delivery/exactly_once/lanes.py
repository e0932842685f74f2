"""Exactly-once lanes: a worker's lane producers, and lanes seen from outside a task.

Every lane of a sink is named ``rks-eo.<sink>:<run>:<lane>``: its
``transactional.id``, the consumer group holding its marker offset and the
key of its marker record (:mod:`.markers`). Inside a worker,
:class:`LanePool` keeps each lane's producer, marker consumer and what its
open transaction holds (:class:`Lane`), and creates the sink's marker topic
once; from outside, the driver asks whether every lane of a batch is
committed (:func:`lane_markers`) and operators abort what a dead process left
open (:func:`abort_lingering`).
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any, Callable, Iterable

from ...arrays import column
from ...config import SinkConfig
from ...wal.format import AttemptKey
from ..engine import open_engine
from .marker_reads import MarkerReader
from .markers import Marker, client_conf, encode_offset, encode_record, lane_id, sink_lane_prefix
from .topic import marker_topic_id

__all__ = ["COUNTS", "Lane", "LanePool", "on_delivery", "lane_conf", "send_marker", "lane_markers", "sink_lanes",
           "abort_lingering"]

log = logging.getLogger(__name__)
#: This process's counts, read by each exactly-once task around its work for its report (metrics): lane producers
#: opened (a lane new to this worker, or one replaced) and transactions aborted.
COUNTS = {"opened": 0, "aborted": 0}
_READERS = 8  # lanes whose markers :func:`lane_markers` reads at once (a consumer and its connections each)


class Lane:
    """One lane's producer, its marker consumer, and what its open transaction holds."""

    def __init__(self, producer: Any, consumer: Any) -> None:
        self.producer = producer
        self.consumer = consumer
        self.ready = False  # init_transactions() returned
        self.born = time.monotonic()  # producers born before a wedge seen in this process are replaced (LanePool)
        #: a read of its marker before its init went unanswered: the next one before init is not waited for
        self.unanswered = False
        self.swept = False  # its sweep aborted since its last abort (.sweep): it may commit on swept_topics
        self.swept_topics: set[str] = set()
        self.need_topics: set[str] = set()  # topics its units write, met since (swept by the next sweep)
        self.known: Marker | None = None  # the marker as this producer last committed or read it
        self.open: tuple[str, AttemptKey] | None = None  # (slot path, attempt) whose transaction is open
        self.chunks_in = 0  # chunks of the open unit produced into the transaction (a retry resumes after them)
        self.produced = False  # every record of the unit is in the open transaction
        self.offsets_sent = False  # the marker is in it too: only commit_transaction is left
        self.must_abort = False
        #: a commit or abort was called and has not returned: an error now leaves its outcome unknown
        self.ending = False
        #: delivery failures inside the open transaction: (error, record index or (topic, key, value), chunk)
        self.failures: list[tuple[Any, Any, int]] = []
        self.parts: Any = None  # the open unit's plan when it is committed in parts (.parts.Parts)
        self._rids: dict[int, tuple[int, Any]] = {}  # the engine's round id -> (chunk, rows) of the open transaction
        self._next_rid = 0

    def round_for(self, chunk: int, rows: Any = None) -> int:
        """A fresh round id for a chunk (``-1``: the marker record) of the open transaction; ``rows``: the chunk's
        row of each record produced, when only some of them are (a sub-unit's)."""
        self._next_rid += 1
        self._rids[self._next_rid] = (chunk, rows)
        return self._next_rid

    def collect(self, results: Any) -> None:
        """Failures the native engine counted (its :meth:`.Engine.poll` results) into :attr:`failures`."""
        for rid, _acked, _reported, failed in results:
            chunk, rows = self._rids.get(rid, (None, None))
            if chunk is not None:
                self.failures.extend((err, row if rows is None else int(rows[row]), chunk) for row, err in failed)

    def mark_produced(self, ident: Any) -> None:
        """Every record of ``ident``'s unit is in the open transaction: only the marker and the commit are left."""
        if self.open == ident:
            self.produced = True

    def settle_open(self, ident: Any, left: Callable[[str], float]) -> None:
        """Finish what the lane has open before anything else, unless it is ``ident``'s own (it resumes).

        librdkafka resumes an API call that timed out only by calling it again
        (an abort during a pending commit fails with ``_CONFLICT``): another
        unit's transaction with its records and marker all sent is committed
        (resumed), anything else open or failed is aborted (or the abort
        resumed). ``left(what)`` bounds each call. An abort un-sweeps the lane
        (it may have left records open as well: :mod:`.sweep`).
        """
        if self.open is None and not self.must_abort:
            return
        if self.open == ident and not self.must_abort:
            return  # the caller's own transaction: steps 3-4 resume it
        commit = self.offsets_sent and not self.must_abort  # another unit's, complete: resumed
        timeout = left("commit_transaction" if commit else "abort_transaction")
        self.ending = True
        if commit:
            self.producer.commit_transaction(timeout)
        else:
            self.producer.abort_transaction(timeout)
            COUNTS["aborted"] += 1
            self.swept = False
        self.ending = False
        self.reset()
        self.failures = []

    def reset(self) -> None:
        self.open, self.chunks_in, self.produced, self.offsets_sent, self.must_abort = None, 0, False, False, False
        self.parts = None
        self._rids = {}

    def close(self) -> None:
        try:
            self.consumer.close()
        except Exception:  # closing is best effort: the process may be going away
            pass


def send_marker(config: SinkConfig, lane: Lane, lid: str, marker: Marker, run: str,
                left: Callable[[str], float]) -> None:
    """Put ``marker`` into the lane's open transaction: its record (when its whole digest is known) and its offset.

    Raises:
        confluent_kafka.KafkaException: a client call failed (a record that failed is in ``lane.failures``).
    """
    import time

    import pyarrow as pa

    p = lane.producer
    if marker.full_digest is not None:
        record = encode_record(marker.batch, marker.rows or 0, marker.full_digest, run, int(time.time() * 1000))
        batch = pa.RecordBatch.from_arrays([column([record], pa.binary()), column([lid.encode()], pa.binary()),
                                            column([0], pa.int32())], names=["value", "key", "partition"])
        _n, failed = p.produce_chunk(lane.round_for(-1), partial(on_delivery, lane, -1), batch, None,
                                     config.marker_topic, config.id_header, f"{lid}:".encode(), 0, left("marker"))
        lane.failures.extend((e, j, -1) for j, e in failed)
    offset = encode_offset(marker.batch, marker.full_digest if marker.full_digest is not None else marker.digest32)
    p.send_offsets(lid, lane.consumer, [(config.marker_topic, 0, offset)], left("send_offsets_to_transaction"))


def lane_conf(config: SinkConfig, lid: str) -> dict[str, Any]:
    """A lane producer's configuration: transactional, and never creating a topic (a deleted marker topic stays
    deleted rather than coming back with the broker's defaults; exactly-once needs its topics beforehand)."""
    conf = config.producer_conf()
    conf.update({"transactional.id": lid, "enable.idempotence": "true", "acks": "all",
                 "allow.auto.create.topics": "false"})
    return conf


def on_delivery(lane: Lane, chunk_index: int, err: Any, msg: Any) -> None:
    """A delivery report inside a lane's transaction: failures are kept with their chunk (-1: the marker)."""
    if err is not None:
        lane.failures.append((err, (msg.topic(), msg.key(), msg.value()), chunk_index))


class LanePool:
    """The lanes one worker process holds, least recently used first (at most ``max_lanes``).

    An idle lane beyond the bound is closed (its next user re-initialises it,
    which fences nobody alive); a lane with a transaction open is never dropped.
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
        if lane is not None and lane.born < self.wedged_at and lane.open is None and not lane.must_abort:
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
            if old.open is None:
                old.close()
            else:
                self._lanes[old_id] = old  # never drop a lane with a transaction open
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


def lane_markers(config: SinkConfig, run: str, lanes: Iterable[int],
                 timeout_s: float = 10.0) -> dict[int, Marker | None]:
    """Each lane's committed marker offset, ``None`` if it never committed (or its offset expired).

    Read by a consumer of the lane's group with ``isolation.level=read_committed``
    (so a marker of a transaction not yet completed is never returned). Not
    the admin client: librdkafka 2.x can abort the process when an admin
    request that timed out is answered later (seen here with a stopped broker).
    A consumer is one group, so one per lane, and up to :data:`_READERS` of
    them ask at once: each spends about 60 ms (its connections and finding
    the group's coordinator) mostly waiting, which read in turn added up to
    half a second for 8 lanes at a run's first batch.

    Raises:
        confluent_kafka.KafkaException: the broker did not answer in ``timeout_s``.
    """
    from confluent_kafka import Consumer

    reader = MarkerReader(config)

    def one(lane: int) -> Marker | None:
        conf = client_conf(config)
        conf.update({"group.id": lane_id(config.name, run, lane), "enable.auto.commit": "false",
                     "isolation.level": "read_committed"})
        c = Consumer(conf)
        try:
            return reader.from_offset(c, timeout_s, lane_id(config.name, run, lane))
        finally:
            c.close()

    wanted = list(lanes)
    if len(wanted) <= 1:
        return {lane: one(lane) for lane in wanted}
    with ThreadPoolExecutor(max_workers=min(_READERS, len(wanted)), thread_name_prefix="rks-lane-markers") as pool:
        asked = [(lane, pool.submit(one, lane)) for lane in wanted]
        return {lane: fut.result() for lane, fut in asked}  # the first error raised; each read is bounded


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
