"""Exactly-once markers: what a lane's committed transactions leave in Kafka, and how they are read back.

Every lane (``rks-eo.<sink>:<run>:<lane>``, its ``transactional.id``:
:func:`lane_id`) commits, in the same transaction as a unit's records, a
*marker* in two places:

* the **offset** of the consumer group named like the lane on partition 0 of
  the sink's ``marker_topic``: ``(batch + 1) << 32 | digest mod 2**32``. It is
  read fresh by any client (an offset fetch, ``read_committed``), but brokers
  delete it ``offsets.retention.minutes`` after the lane's last commit (7 days
  by default);
* a **record** in ``marker_topic`` (compacted, created by the sink), key = the
  lane, value = :func:`encode_record` (batch, rows, the whole 64-bit digest,
  run, time). Compaction keeps the latest per lane for as long as the topic
  lives: it is what survives the offset's expiry.

:class:`MarkerReader` reads the offset first; only when it is missing does it
look for the lane's record, and it trusts a record only once it is older than
``offsets_retention_s`` (so a record whose offset is missing cannot be one
an aborted transaction left visible, as some brokers do; see DESIGN.md).
"""

from __future__ import annotations

import logging
import struct
import time
import zlib
from dataclasses import dataclass, field
from typing import Any

from ...config import SinkConfig
from ...errors import MarkerError
from .subunits import PARTIAL_RECORD_VERSION, Partial, decode_partial, decode_partial_record

__all__ = ["lane_id", "legacy_lane_id", "parse_lane_id", "sink_lane_prefix", "LANE_ID_MAX", "Marker", "encode_offset",
           "decode_offset", "encode_record", "decode_record", "client_conf", "MarkerReader", "MAX_BATCH",
           "DIGEST_BITS", "PRE_INIT_READ_S", "PRE_INIT_SHARE", "UNANSWERED"]

log = logging.getLogger(__name__)

#: How long a lane's marker is read before its producer is initialised (:meth:`MarkerReader.read_before_init`),
#: at most: and no more than :data:`PRE_INIT_SHARE` of what the step is given (``steps.left``: at least 2 s). A read that long without an answer
#: is an open transaction of a dead or frozen producer (its offset is unstable until the lane's init ends it) far
#: more often than a slow broker: the lane is then initialised at once, with most of the window still left.
PRE_INIT_READ_S = 2.0
PRE_INIT_SHARE = 1 / 3

DIGEST_BITS = 32  # of the unit digest in the offset (the record holds all 64)
_DIGEST_MASK = (1 << DIGEST_BITS) - 1
MAX_BATCH = (1 << 31) - 2  # the largest batch id an offset marker holds
_RECORD = struct.Struct(">4sHqQQqH")
_RECORD_MAGIC = b"RKSM"
_RECORD_VERSION = 1
_SCAN_S = 60.0  # the longest one read of the marker topic to its end may take (a step of its own)

_LANE_PREFIX = "rks-eo."
#: The longest lane id: prefix 7, sink name 100, run id 64, partition 10 (an int32) and two colons. Kafka sets no
#: length limit on a transactional.id or group.id beyond its protocol's (32767 bytes); this stays below the
#: tightest name limit it has (a topic's, 249), for tools and brokers that cap them.
LANE_ID_MAX = 7 + 100 + 1 + 64 + 1 + 10


def lane_id(sink: str, run: str, partition: int) -> str:
    """The ``transactional.id`` (and marker group and record key) of one lane: what all attempts at its units share.

    ``rks-eo.<sink>:<run>:<lane>``. Sink names and run ids hold no
    ``:`` (``[A-Za-z0-9._-]``), so no two (sink, run, partition) share a lane
    (:func:`parse_lane_id` reads one back), and no lane id is one of the
    former naming (:func:`legacy_lane_id`, which holds no ``:``).

    Raises:
        ValueError: ``sink`` or ``run`` holds a ``:`` (never so for a validated sink name and run id).
    """
    if ":" in sink or ":" in run:
        raise ValueError(f"a lane's sink name and run id hold no ':' (sink {sink!r}, run {run!r})")
    return f"{_LANE_PREFIX}{sink}:{run}:{partition}"


def sink_lane_prefix(sink: str) -> str:
    """What every lane id of ``sink``, and no other sink's, starts with."""
    return f"{_LANE_PREFIX}{sink}:"


def parse_lane_id(lid: str) -> tuple[str, str, int] | None:
    """``(sink, run, partition)`` of a lane id of :func:`lane_id`; ``None`` for anything else (a former one)."""
    parts = lid[len(_LANE_PREFIX):].split(":") if lid.startswith(_LANE_PREFIX) else []
    if len(parts) != 3 or not parts[0] or not parts[2].isdigit():
        return None
    return parts[0], parts[1], int(parts[2])


def legacy_lane_id(sink: str, run: str, partition: int) -> str:
    """The lane's name before lane ids became unambiguous: ``rks-eo.<sink>.<run>.<lane>``.

    Dots are allowed in sink names and run ids, so sink ``orders`` with run
    ``eu.prod`` and sink ``orders.eu`` with run ``prod`` shared a lane.
    Read only to adopt what a lane committed under it (:mod:`.legacy`).
    """
    return f"{_LANE_PREFIX}{sink}.{run}.{partition}"


@dataclass(frozen=True)
class Marker:
    """A lane's latest committed unit: its batch and digest (``rows``/``full_digest`` only from a record).

    ``partial``: a later unit of the lane committed in part since (:mod:`.subunits`); ``batch`` -1 when the lane
    has no complete unit yet.
    """

    batch: int
    digest32: int
    rows: int | None = None
    full_digest: int | None = None
    source: str = "offset"  # or "record": the offset had expired
    run: str | None = field(default=None, compare=False)  # the run a record names (an offset names none)
    partial: Partial | None = None

    @property
    def latest(self) -> int:
        """The latest batch the lane committed any of: its complete marker's, or a partial one's."""
        return max(self.batch, self.partial.batch) if self.partial is not None else self.batch

    def proves(self, batch: int, digest: int) -> bool:
        """Whether this marker shows that unit (``batch``, ``digest``) is the one Kafka has."""
        if self.batch != batch:
            return False
        if self.full_digest is not None:
            return self.full_digest == digest
        return self.digest32 == digest & _DIGEST_MASK


#: What a bounded marker read returns when the broker gave no answer (compared with ``is``; proves nothing).
UNANSWERED = Marker(batch=-1, digest32=0, source="unanswered")


def encode_offset(batch: int, digest: int) -> int:
    """The marker offset of a committed unit.

    Raises:
        ValueError: ``batch`` is beyond :data:`MAX_BATCH` (the config refuses such sinks' batches earlier).
    """
    if not 0 <= batch <= MAX_BATCH:
        raise ValueError(f"batch {batch} cannot be held by an exactly-once marker (0..{MAX_BATCH})")
    return ((batch + 1) << DIGEST_BITS) | (digest & _DIGEST_MASK)


def decode_offset(offset: int | None, metadata: str | None = None) -> Marker | None:
    """The marker an offset (and its commit metadata: a partial marker) holds; ``None`` if the lane has none.

    Raises:
        ValueError: the metadata is not a partial marker (:func:`.subunits.decode_partial`).
    """
    partial = decode_partial(metadata)
    if offset is None or offset < (1 << DIGEST_BITS):
        return None if partial is None else Marker(-1, 0, partial=partial)
    return Marker((offset >> DIGEST_BITS) - 1, offset & _DIGEST_MASK, partial=partial)


def encode_record(batch: int, rows: int, digest: int, run: str, written_ms: int) -> bytes:
    """The value of a lane's marker record: ``RKSM | u16 1 | i64 batch | u64 rows | u64 digest | i64 ms | run | crc``."""
    r = run.encode()
    body = _RECORD.pack(_RECORD_MAGIC, _RECORD_VERSION, batch, rows, digest, written_ms, len(r)) + r
    return body + struct.pack(">I", zlib.crc32(body))


def decode_record(raw: bytes) -> tuple[Marker, int] | None:
    """``(marker, written_ms)`` of a marker record; ``None`` for bytes that are not one (never trusted blindly)."""
    if raw is None or len(raw) < _RECORD.size + 4 or zlib.crc32(raw[:-4]) != struct.unpack(">I", raw[-4:])[0]:
        return None
    if raw[4:6] == PARTIAL_RECORD_VERSION.to_bytes(2, "big"):  # a partial commit's (format 2)
        part = decode_partial_record(raw)
        if part is None:
            return None
        (b, d), p = part[0] or (-1, 0), part[1]
        return Marker(b, d, source="record", run=part[2], partial=p), part[3]
    magic, version, batch, rows, digest, written_ms, n = _RECORD.unpack_from(raw)
    if magic != _RECORD_MAGIC or version != _RECORD_VERSION or len(raw) != _RECORD.size + n + 4 or batch < 0:
        return None
    try:
        run = raw[_RECORD.size:_RECORD.size + n].decode()
    except UnicodeDecodeError:
        return None
    return Marker(batch, digest & _DIGEST_MASK, rows, digest, "record", run), written_ms


_CLIENT_PREFIXES = ("bootstrap.servers", "security.", "sasl.", "ssl.", "enable.ssl", "client.", "socket.", "broker.",
                    "reconnect.", "metadata.", "topic.metadata", "api.version", "log_level", "oauth_cb")


def client_conf(config: SinkConfig) -> dict[str, str]:
    """The connection and security options of the sink's Kafka configuration (for consumers and admin).

    Their metadata requests never create a topic (``allow.auto.create.topics``
    is on by default for an admin client): a lookup of a missing marker topic
    must not have the broker create it with its defaults (``cleanup.policy=delete``).
    """
    conf = {k: v for k, v in config.producer_conf().items() if k.startswith(_CLIENT_PREFIXES)}
    conf["allow.auto.create.topics"] = "false"
    return conf


class MarkerReader:
    """Reads lanes' markers: the offset first, the compacted record when the offset expired.

    Records are read incrementally, from where the last read stopped, into
    the latest record per lane, once per process and again every half
    ``offsets_retention_s`` (one reader per process and sink is enough).
    """

    def __init__(self, config: SinkConfig) -> None:
        self.config = config
        self._records: dict[str, tuple[Marker, int]] = {}
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
        """
        marker = self.from_offset(consumer, timeout_s, lane)
        if marker is not None:
            return marker
        # Only a record older than offsets_retention_s counts, and a lane committed after the last read
        # has its offset for that long: one read per process, again every half retention, is enough.
        if self._read_at is None or time.monotonic() - self._read_at > self.config.offsets_retention_s / 2:
            self._read_records(max(timeout_s, _SCAN_S))
            self._read_at = time.monotonic()
        found = self._records.get(lane)
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
        """
        if fresh or self._read_at is None:
            self._read_records(max(timeout_s, _SCAN_S))
            self._read_at = time.monotonic()
        return self._records.get(lane)

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

        ``auto.offset.reset=earliest``: an offset no longer in the log (its
        records deleted since) reads on from the log start, never from the end.
        The end is seen as soon as the broker says so (short fetch waits and
        polls while reading); the partition is unassigned after, so nothing
        is fetched between reads.
        """
        from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, TopicPartition

        if self._consumer is None:
            conf = client_conf(self.config)  # from the log start: records before it were deleted (a retention)
            conf.update({"group.id": f"rks-markers-reader.{self.config.name}", "enable.auto.commit": "false",
                         "isolation.level": "read_committed", "enable.partition.eof": "true",
                         "auto.offset.reset": "earliest", "fetch.wait.max.ms": "20"})
            self._consumer = Consumer(conf)
        self._consumer.assign([TopicPartition(self.config.marker_topic, 0, self._next or OFFSET_BEGINNING)])
        try:
            end = time.monotonic() + timeout_s
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
                    decoded = decode_record(m.value())
                    key = m.key().decode(errors="replace") if m.key() else ""
                    if m.value() is not None:
                        self._raw[key] = m.value()
                    if decoded is not None:
                        self._records[key] = decoded
            raise KafkaException(KafkaError(KafkaError._TIMED_OUT, "marker topic not read to its end in time"))
        finally:
            self._consumer.unassign()

    def close(self) -> None:
        if self._consumer is not None:
            try:
                self._consumer.close()
            except Exception:  # closing is best effort
                pass
            self._consumer = None
