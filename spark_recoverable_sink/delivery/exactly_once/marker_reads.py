"""Reading lanes' markers back (their formats and where they are: :mod:`.markers`).

:class:`MarkerReader` reads the offset first; only when it is missing does it
look for the lane's record, and it trusts a record only once it is older than
``offsets_retention_s`` (so a record whose offset is missing cannot be one
an aborted transaction left visible, as some brokers do; see DESIGN.md).
Both are read strictly: offset metadata that is not a partial marker, or a
lane's latest record that does not decode, is a :class:`MarkerError`; an
older record never stands in for an unreadable latest one.

Where it runs: executors (a lane's commit step) and the driver (the settle's
and the lane plan's reads); one reader per process and sink. The driver asks
whether every lane of a batch is committed with :func:`lane_markers`.
"""

from __future__ import annotations

import logging
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Iterable

from ...config import SinkConfig
from ...errors import MarkerError
from ..admin import client_conf
from .markers import UNANSWERED, Marker, decode_offset, decode_record
from .names import lane_id

__all__ = ["MarkerReader", "lane_markers"]

log = logging.getLogger(__name__)
_READERS = 8  # lanes whose markers :func:`lane_markers` reads at once (a consumer and its connections each)

_SCAN_S = 60.0  # the longest one read of the marker topic to its end may take (a step of its own)
#: What the watermarks of a marker topic that does not exist fail with (checked against the metadata before it is
#: taken as "no topic": UNKNOWN_TOPIC_OR_PART, and librdkafka's unknown topic and unknown partition)
_ABSENT = (3, -188, -190)


@dataclass(frozen=True)
class _Unreadable:
    """A lane's latest marker record that does not decode: where it is and why (it stands for the lane's record)."""

    offset: int
    why: str



class MarkerReader:
    """Reads lanes' markers: the offset first, the compacted record when the offset expired.

    Records are read incrementally, from where the last read stopped, into
    the latest record per lane, once per process and again every half
    ``offsets_retention_s`` (one reader per process and sink is enough).
    """

    def __init__(self, config: SinkConfig) -> None:
        self.config = config
        self._records: dict[str, tuple[Marker, int] | _Unreadable] = {}  # lane -> its latest record
        self._raw: dict[str, bytes] = {}  # every key's latest value, whatever it holds (a lane plan's record too)
        self._next = 0  # the next offset of the marker topic's partition 0 to read
        self._consumer: Any = None
        self._read_at: float | None = None  # monotonic time of the last read to the end

    def from_offset(self, consumer: Any, timeout_s: float, lane: str = "") -> Marker | None:
        """The marker the lane's group offset holds (``consumer`` is a member of the lane's group).

        Raises:
            confluent_kafka.KafkaException: the broker did not answer.
            MarkerError: the offset's metadata is not a partial marker this version reads.
        """
        from confluent_kafka import KafkaException, TopicPartition

        (tp,) = consumer.committed([TopicPartition(self.config.marker_topic, 0)], timeout=timeout_s)
        if tp.error is not None:
            raise KafkaException(tp.error)
        try:
            return decode_offset(tp.offset, getattr(tp, "metadata", None))
        except ValueError as exc:  # (UnicodeDecodeError included)
            raise MarkerError(f"lane {lane or '?'}: its offset's metadata is {exc}, so nothing is published or "
                              "skipped on it (was its group committed by another client, or a newer version of this "
                              "sink?)", self.config.marker_topic, lane) from exc

    def read_before_init(self, lane: str, consumer: Any, timeout_s: float) -> Marker | None:
        """:meth:`read` for a lane whose producer may not have fenced its predecessors: :data:`UNANSWERED`
        when the broker gave no answer in ``timeout_s``.

        A group offset that an earlier producer of the lane sent in a transaction
        still open (a frozen or dead worker's, or one a restarted broker aborted
        without its markers) reads as unstable (``read_committed``) until that
        transaction ends, which only the lane's ``init_transactions`` and sweep
        force. So no answer here is not an error: the caller (re)initialises the
        lane (fencing that producer), sweeps it and reads the marker again, with
        :meth:`read`, before it publishes anything. (A missing offset still
        reads the marker topic, under that read's own bound.)

        Raises:
            confluent_kafka.KafkaException: any other error of the broker.
        """
        from confluent_kafka import KafkaError, KafkaException

        try:
            return self.read(lane, consumer, timeout_s)
        except KafkaException as exc:
            if exc.args[0].code() not in (KafkaError._TIMED_OUT, KafkaError.UNSTABLE_OFFSET_COMMIT):
                raise
            log.info("sink=%s lane=%s marker not read in %.1fs before the lane's init (%s): the lane is initialised, "
                     "swept and read again", self.config.name, lane, timeout_s, exc.args[0].str())
            return UNANSWERED

    def read(self, lane: str, consumer: Any, timeout_s: float) -> Marker | None:
        """The lane's marker, or ``None`` if it has none that can be trusted.

        Raises:
            confluent_kafka.KafkaException: the broker did not answer.
            MarkerError: the offset's metadata, or (the offset missing) the lane's latest record, does not decode.
        """
        marker = self.from_offset(consumer, timeout_s, lane)
        if marker is not None:
            return marker
        # Only a record older than offsets_retention_s counts, and a lane committed after the last read
        # has its offset for that long: one read per process, again every half retention, is enough.
        if self._read_at is None or time.monotonic() - self._read_at > self.config.offsets_retention_s / 2:
            self._read_records(max(timeout_s, _SCAN_S))
            self._read_at = time.monotonic()
        found = self._latest(lane)
        if found is None:
            return None
        record, written_ms = found
        age_s = time.time() - written_ms / 1000.0
        if age_s < self.config.offsets_retention_s:
            log.warning("sink=%s lane=%s marker record batch=%d is %.0fs old but its offset is missing: not trusted "
                        "(an offset lives offsets_retention_s=%.0f after the lane's last commit; a younger record "
                        "without one is an aborted transaction a broker left visible, or the lane's group was "
                        "deleted by hand); the unit is published again", self.config.name, lane, record.batch,
                        age_s, self.config.offsets_retention_s)
            return None
        log.warning("sink=%s lane=%s marker offset expired: the marker record (batch=%d, %.0fs old) stands in for it",
                    self.config.name, lane, record.batch, age_s)
        return record

    def record(self, lane: str, timeout_s: float, fresh: bool = False) -> tuple[Marker, int] | None:
        """The lane's latest marker record and its time (ms), ``None`` if it has none; the topic is read to its
        end first if it never was in this process, or if ``fresh`` (from where the last read stopped).

        Raises:
            confluent_kafka.KafkaException: the broker did not answer.
            MarkerError: the lane's latest record does not decode.
        """
        if fresh or self._read_at is None:
            self._read_records(max(timeout_s, _SCAN_S))
            self._read_at = time.monotonic()
        return self._latest(lane)

    def _latest(self, lane: str) -> tuple[Marker, int] | None:
        """The lane's latest record as read so far, ``None`` if it has none.

        Read as strictly as the offset's metadata: a latest record that does
        not decode is never passed over for an older one, which may name an
        earlier batch than the lane committed (a committed unit published
        again once the lane's offset has expired).

        Raises:
            MarkerError: naming the lane and the record's offset.
        """
        found = self._records.get(lane)
        if isinstance(found, _Unreadable):
            raise MarkerError(
                f"lane {lane}: its latest marker record (marker topic {self.config.marker_topic} partition 0 offset "
                f"{found.offset}) is {found.why}; nothing is published or skipped on it, and no older record stands "
                "in for it (was it written by another client, or by a newer version of this sink?)",
                self.config.marker_topic, lane)
        return found

    def latest_values(self, timeout_s: float, fresh: bool = True) -> dict[str, bytes]:
        """Every key's latest value in the marker topic (lanes' marker records, lane plans), read to its end first
        (``fresh``, or never read in this process) from where the last read stopped.

        Raises:
            confluent_kafka.KafkaException: the broker did not answer.
        """
        if fresh or self._read_at is None:
            self._read_records(max(timeout_s, _SCAN_S))
            self._read_at = time.monotonic()
        return dict(self._raw)

    def _read_records(self, timeout_s: float) -> None:
        """Read the marker topic from where the last read stopped (at first, its log start) to its end (read_committed).

        The first read starts at the log start as an offset number, asked
        with the watermarks (none to read in an empty topic, or none at all):
        librdkafka resolves a logical offset (``OFFSET_BEGINNING``) only
        after a timer of 500 ms on a new consumer, half a second on every
        run's first exactly-once batch. ``auto.offset.reset=earliest``: an
        offset no longer in the log (its records deleted since) reads on from
        the log start, never from the end. The end is seen as soon as the
        broker says so (short fetch waits and polls while reading); the
        partition is unassigned after, so nothing is fetched between reads.

        Raises:
            confluent_kafka.KafkaException: the broker did not answer within ``timeout_s``.
        """
        from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

        end = time.monotonic() + timeout_s
        if self._consumer is None:
            conf = client_conf(self.config)  # from the log start: records before it were deleted (a retention)
            conf.update({"group.id": f"rks-markers-reader.{self.config.name}", "enable.auto.commit": "false",
                         "isolation.level": "read_committed", "enable.partition.eof": "true",
                         "auto.offset.reset": "earliest", "fetch.wait.max.ms": "20"})
            self._consumer = Consumer(conf)
        start = self._next
        if not start:
            try:
                low, high = self._consumer.get_watermark_offsets(TopicPartition(self.config.marker_topic, 0),
                                                                 timeout=max(0.1, end - time.monotonic()))
            except KafkaException as exc:
                if exc.args[0].code() in _ABSENT and self._absent(max(0.1, end - time.monotonic())):
                    return  # no marker topic yet: no lane ever committed a record
                raise
            if high <= low:
                return  # nothing in the log
            start = low
        self._consumer.assign([TopicPartition(self.config.marker_topic, 0, start)])
        try:
            while time.monotonic() < end:
                for m in self._consumer.consume(1000, min(0.05, max(0.01, end - time.monotonic()))):
                    err = m.error()
                    if err is not None:
                        if err.code() == KafkaError._PARTITION_EOF:
                            return
                        if err.code() in (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC):
                            return  # no marker topic yet: no lane ever committed a record
                        continue
                    self._next = m.offset() + 1
                    key = m.key().decode(errors="replace") if m.key() else ""
                    if m.value() is None:  # a tombstone: the lane's records deleted (by hand; never by the sink)
                        self._records.pop(key, None)
                        self._raw.pop(key, None)
                        continue
                    self._raw[key] = m.value()
                    try:
                        self._records[key] = decode_record(m.value())
                    except ValueError as exc:  # kept as the lane's latest: raised when that lane is read
                        self._records[key] = _Unreadable(m.offset(), str(exc))
            raise KafkaException(KafkaError(KafkaError._TIMED_OUT, "marker topic not read to its end in time"))
        finally:
            self._consumer.unassign()

    def _absent(self, timeout_s: float) -> bool:
        """Whether the broker's metadata says the marker topic does not exist (an unknown partition can also be
        metadata not there yet).

        Raises:
            confluent_kafka.KafkaException: the broker did not answer within ``timeout_s``.
        """
        from confluent_kafka import KafkaError

        topic = self.config.marker_topic
        md = self._consumer.list_topics(topic, timeout=timeout_s).topics.get(topic)
        return md is None or md.error is not None and md.error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART

    def close(self) -> None:
        if self._consumer is not None:
            try:
                self._consumer.close()
            except Exception:  # closing is best effort
                pass
            self._consumer = None


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
