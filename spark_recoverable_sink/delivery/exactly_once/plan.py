"""Exactly-once, driver: a run's lane count pinned in Kafka, so that no re-run of a batch splits it otherwise.

Runs in the driver, before a batch's tasks (``check_lane_plan`` in
:mod:`...driver.settle`). A batch's units are its lanes: a re-run of a batch
that some lanes committed must put every record in the lane it had, or a
lane still behind publishes records another lane already committed. Lanes
depend only on the record and ``exactly_once_lanes`` (:mod:`...driver.split`),
so the lane count is what must not change under a batch.

The plan is kept in two places, as lane markers are:

* the committed offset of group ``rks-eo-plan.<sink>:<run>`` on the marker
  topic's partition 0 (one request to read):
  ``((from_batch + 1) << 24) | lanes``, "from batch ``from_batch`` on,
  ``lanes`` lanes". Brokers delete it ``offsets.retention.minutes`` after its
  last commit;
* a record in the marker topic, key ``rks-eo-plan.<sink>:<run>``, value
  :func:`encode_plan_record`, written (and acknowledged) before each commit
  of the offset. The topic is compacted: the latest plan record of a run
  stays as long as the topic does, so a run stopped longer than the offsets'
  retention still finds the lane count its batches were split by.

Steps of :func:`pin_lanes`:

1. known in this process and not due for a refresh: nothing to ask;
2. read the plan: its offset, else (expired) its record (the broker must
   answer: a batch whose plan cannot be read does not run);
3. none yet (the run's first exactly-once batch): write and commit
   ``(batch, lanes)``, ``lanes`` being ``exactly_once_lanes`` or, for
   ``"auto"`` and a run no lane of which committed, the cluster's cores then
   (:func:`first_lanes`). A run with neither offset nor record but with
   lanes that committed (their offsets, or their marker records, which do
   not expire) is refused under ``"auto"``: its lane count cannot be proven;
4. the same lane count, or ``"auto"`` (which keeps whatever the run pinned):
   commit it again every half ``offsets_retention_s`` (a committed offset
   expires that long after its last commit);
5. another explicit lane count: allowed only from a batch no lane of the
   former plan committed (every lane's marker before ``batch``), then
   committed as the new plan; otherwise ``ConfigError`` naming the former
   count, before anything of the batch is produced. ``exactly_once_lanes=0``
   (Spark's own split: lanes are Spark partitions, not a count) never changes
   within a run.

Why ``"auto"`` is the cores: a lane is one Python task and one transaction
per batch, whatever it holds, so lanes beyond what runs at once only add
waves of tasks and transactions to every batch (8 lanes on 2 cores: 4 waves).
"""

from __future__ import annotations

import logging
import struct
import threading
import time
import zlib
from dataclasses import dataclass
from typing import Any, Callable

from ...config import AUTO_LANES, SinkConfig
from ...errors import ConfigError, MarkerError
from ..admin import client_conf
from .marker_reads import MarkerReader, lane_markers
from .markers import MAX_BATCH, decode_record
from .names import lane_id

__all__ = ["Plan", "encode_plan", "decode_plan", "encode_plan_record", "decode_plan_record", "plan_group",
           "pin_lanes", "forget_plans", "first_lanes"]

log = logging.getLogger("spark_recoverable_sink.sink")

LANE_BITS = 24
_LANE_MASK = (1 << LANE_BITS) - 1
_PINNED: dict[tuple[str, str, str], tuple["Plan", float]] = {}  # (sink, marker topic, run) -> (plan, committed at)
_LOCK = threading.Lock()
# NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE, COORDINATOR_LOAD_IN_PROGRESS, the client's timeouts: a group's
# coordinator that is not there yet (retried whether or not the client marks the error retriable)
_COORDINATOR_CODES = (16, 15, 14, 7, -185)
_RECORD = struct.Struct(">4sHqI")
_RECORD_MAGIC = b"RKSP"
_RECORD_VERSION = 1


@dataclass(frozen=True)
class Plan:
    """From batch ``from_batch`` on, the run's batches are split into ``lanes`` lanes (0: Spark's split)."""

    from_batch: int
    lanes: int


def encode_plan(plan: Plan) -> int:
    """The offset that holds ``plan``.

    Raises:
        ValueError: a batch beyond the markers' range, or more lanes than 24 bits hold.
    """
    if not 0 <= plan.from_batch <= MAX_BATCH or not 0 <= plan.lanes <= _LANE_MASK:
        raise ValueError(f"a lane plan holds batches 0..{MAX_BATCH} and 0..{_LANE_MASK} lanes, not {plan}")
    return ((plan.from_batch + 1) << LANE_BITS) | plan.lanes


def decode_plan(offset: int | None) -> Plan | None:
    """The plan an offset holds; ``None`` for no offset (no plan yet, or it expired)."""
    if offset is None or offset < (1 << LANE_BITS):
        return None
    return Plan((offset >> LANE_BITS) - 1, offset & _LANE_MASK)


def encode_plan_record(plan: Plan) -> bytes:
    """The value of a run's plan record: ``RKSP | u16 1 | i64 from_batch | u32 lanes | crc32``.

    Raises:
        ValueError: as :func:`encode_plan`.
    """
    encode_plan(plan)  # the same bounds
    body = _RECORD.pack(_RECORD_MAGIC, _RECORD_VERSION, plan.from_batch, plan.lanes)
    return body + struct.pack(">I", zlib.crc32(body))


def decode_plan_record(raw: bytes) -> Plan:
    """The plan a plan record holds, read strictly.

    Raises:
        ValueError: the bytes are not a plan record of this version (checksum, magic, version, length, bounds).
    """
    if len(raw) != _RECORD.size + 4 or zlib.crc32(raw[:-4]) != struct.unpack(">I", raw[-4:])[0]:
        raise ValueError(f"not a lane plan record ({len(raw)} bytes, or its checksum differs)")
    magic, version, from_batch, lanes = _RECORD.unpack_from(raw)
    if magic != _RECORD_MAGIC or version != _RECORD_VERSION:
        raise ValueError(f"not a lane plan record of version {_RECORD_VERSION} (magic {magic!r}, version {version})")
    plan = Plan(from_batch, lanes)
    encode_plan(plan)  # bounds
    return plan


def plan_group(config: SinkConfig, run: str) -> str:
    """``rks-eo-plan.<sink>:<run>``: a group no lane, marker reader or user group has.

    Raises:
        ValueError: ``run`` holds a ``:`` (as :func:`.lane_id`).
    """
    lane_id(config.name, run, 0)  # the same rule for the name and the run
    return f"rks-eo-plan.{config.name}:{run}"


def forget_plans() -> None:
    """Forget what this process pinned (tests: as a new driver process)."""
    with _LOCK:
        _PINNED.clear()


def first_lanes(config: SinkConfig, run: str, cores: Callable[[], int | None], timeout_s: float,
                records: dict[str, bytes] | None = None) -> int:
    """Step 3's count: ``exactly_once_lanes`` when set, else (``"auto"``) ``cores()`` (0: each Spark partition is a
    lane, named by its input: see :mod:`...driver.split`), else :data:`.AUTO_LANES` where ``cores()`` cannot tell.

    ``"auto"`` first makes sure the run is new: no lane of it committed,
    by its offset (lanes up to the larger of that count and 8) or by a marker
    record (any lane: records do not expire; ``records``, the marker topic's
    latest values, read if not given), so that a run whose plan is lost is
    never re-split otherwise under a batch its lanes committed.

    Raises:
        ConfigError: ``"auto"``, and lanes of the run committed without a plan.
        confluent_kafka.KafkaException: the lanes' markers not read within ``timeout_s``.
    """
    if config.exactly_once_lanes is not None:
        return config.exactly_once_lanes
    told = cores()
    lanes = AUTO_LANES if told is None else told
    markers = lane_markers(config, run, range(max(lanes, AUTO_LANES)), timeout_s)
    done = {n for n, m in markers.items() if m is not None} | set(_recorded_lanes(config, run, timeout_s, records))
    if done:
        raise ConfigError("exactly_once_lanes",
                          f"run {run} of sink {config.name} has no lane plan, yet lanes {sorted(done)[:8]} committed "
                          "batches: \"auto\" cannot tell how many lanes it ran with (nothing of the batch was "
                          "produced); set exactly_once_lanes to that count (the cores of its first batch, or 8)")
    return lanes


def _recorded_lanes(config: SinkConfig, run: str, timeout_s: float, records: dict[str, bytes] | None,
                    since: int = -1) -> dict[int, int]:
    """``{lane: latest batch}`` of the run's lanes whose marker record holds a batch ``>= since`` (a part counts).

    Raises:
        MarkerError: a lane's latest record is not a marker record this version reads.
        confluent_kafka.KafkaException: the marker topic not read within ``timeout_s``.
    """
    if records is None:
        records = _latest_values(config, timeout_s)
    prefix = lane_id(config.name, run, 0)[:-1]
    out: dict[int, int] = {}
    for key, raw in records.items():
        if not key.startswith(prefix) or not key[len(prefix):].isdigit():
            continue
        try:
            decoded = decode_record(raw)
        except ValueError as exc:
            raise MarkerError(f"lane {key}: its latest marker record is {exc}, so the lane count of its run cannot "
                              "be checked (nothing of the batch was produced)", config.marker_topic, key) from exc
        if decoded[0].latest >= since:
            out[int(key[len(prefix):])] = decoded[0].latest
    return out


def _latest_values(config: SinkConfig, timeout_s: float) -> dict[str, bytes]:
    reader = MarkerReader(config)
    try:
        return reader.latest_values(timeout_s)
    finally:
        reader.close()


def pin_lanes(config: SinkConfig, run: str, batch: int, timeout_s: float = 30.0,
              cores: Callable[[], int | None] = lambda: None) -> Plan:
    """Check (and pin) the run's lane count before batch ``batch`` runs; returns the plan it runs under.

    ``cores()`` is asked only for ``exactly_once_lanes="auto"`` when the run has no plan yet: the lane count to
    pin (0: Spark's split, each partition a lane named by its input), ``None`` where it cannot tell.

    Raises:
        ConfigError: ``exactly_once_lanes`` differs from the plan of a batch a lane already committed (or
            it changes to or from 0 within the run); nothing of the batch ran.
        confluent_kafka.KafkaException: the broker did not answer within ``timeout_s`` (nothing ran).
    """
    auto = config.exactly_once_lanes is None
    key = (config.name, config.marker_topic, run)
    with _LOCK:
        # Step 1
        known = _PINNED.get(key)
        if known is not None and (auto or known[0].lanes == config.exactly_once_lanes) and \
                time.monotonic() - known[1] < config.offsets_retention_s / 2:
            return known[0]
        consumer = _group_consumer(config, run)
        records: dict[str, bytes] | None = None  # the marker topic's latest values, once read
        try:
            plan = _read(consumer, config, timeout_s)  # Step 2
            if plan is None:  # its offset expired, or the run's first batch: the record, which does not
                records = _latest_values(config, timeout_s)
                plan = _from_record(config, run, records)
                if plan is not None:
                    log.warning("sink=%s run=%s lane plan offset expired: its record stands in (%d lanes since "
                                "batch %d)", config.name, run, plan.lanes, plan.from_batch)
            if plan is None:  # Step 3
                plan = Plan(batch, first_lanes(config, run, cores, timeout_s, records))
            elif not auto and plan.lanes != config.exactly_once_lanes:  # Step 5
                _check_change(config, run, batch, plan, timeout_s, records)
                log.warning("sink=%s run=%s batch_id=%d exactly_once_lanes changes from %d (since batch %d) to %d",
                            config.name, run, batch, plan.lanes, plan.from_batch, config.exactly_once_lanes)
                plan = Plan(batch, int(config.exactly_once_lanes or 0))  # (not auto: a number)
            _write_record(config, run, plan, timeout_s)  # Steps 3 to 5: the record first, then the offset
            _commit(consumer, config, plan, timeout_s)
        finally:
            consumer.close()
        _PINNED[key] = (plan, time.monotonic())
        return plan


def _from_record(config: SinkConfig, run: str, records: dict[str, bytes]) -> Plan | None:
    """The run's plan record, ``None`` if it has none.

    Raises:
        MarkerError: the run's plan key holds a value that is not a plan record this version reads.
    """
    key = plan_group(config, run)
    raw = records.get(key)
    if raw is None:
        return None
    try:
        return decode_plan_record(raw)
    except ValueError as exc:
        raise MarkerError(f"lane plan {key}: its latest record is {exc}, so the lane count of run {run} cannot be "
                          "proven (nothing of the batch was produced)", config.marker_topic, key) from exc


def _write_record(config: SinkConfig, run: str, plan: Plan, timeout_s: float) -> None:
    """The plan's record in the marker topic, acknowledged by the broker (``acks=all``).

    Not idempotent: one record per producer, so nothing can be reordered,
    and a retry that writes it twice writes the same value under the same
    key of a compacted topic, which reads as once. An idempotent producer
    would wait for its producer id first, which librdkafka asks for only
    after a timer of 500 ms when the bootstrap connection is replaced by the
    broker's own (half a second on every run's first batch, for nothing).

    Raises:
        confluent_kafka.KafkaException: it was not acknowledged within ``timeout_s``.
    """
    from confluent_kafka import KafkaError, KafkaException, Producer

    conf = client_conf(config)
    conf.update({"enable.idempotence": "false", "acks": "all", "linger.ms": "0",
                 "max.in.flight.requests.per.connection": "1"})
    conf.pop("allow.auto.create.topics", None)  # a consumer's and admin's setting, not a producer's
    producer = Producer(conf)
    errors: list[Any] = []
    producer.produce(config.marker_topic, encode_plan_record(plan), plan_group(config, run), partition=0,
                     on_delivery=lambda err, _msg: errors.append(err))
    left = producer.flush(timeout_s)
    if left or not errors:
        raise KafkaException(KafkaError(KafkaError._TIMED_OUT, f"lane plan record not acknowledged in {timeout_s}s"))
    if errors[0] is not None:
        raise KafkaException(errors[0])


def _check_change(config: SinkConfig, run: str, batch: int, plan: Plan, timeout_s: float,
                  records: dict[str, bytes] | None = None) -> None:
    """Refuse a new lane count if a lane of the former plan committed batch ``batch`` or later (its offset, or
    its marker record, which outlives an expired offset)."""
    if plan.lanes == 0 or config.exactly_once_lanes == 0:
        raise ConfigError("exactly_once_lanes",
                          f"run {run} of sink {config.name} splits its batches into {plan.lanes or 'Spark'}'s "
                          f"{'lanes' if plan.lanes else 'partitions'} since batch {plan.from_batch}; a run never "
                          f"changes to or from exactly_once_lanes=0 (set exactly_once_lanes={plan.lanes}, or "
                          "start a new checkpoint)")
    markers = lane_markers(config, run, range(plan.lanes), timeout_s)
    ahead = sorted({n for n, m in markers.items() if m is not None and m.latest >= batch}  # a part counts
                   | set(_recorded_lanes(config, run, timeout_s, records, since=batch)))
    if ahead:
        raise ConfigError("exactly_once_lanes",
                          f"batch {batch} of run {run} of sink {config.name} was committed in part with "
                          f"exactly_once_lanes={plan.lanes} (lanes {ahead[:8]} hold batch {batch} or later): its "
                          f"re-run must split it the same way; set exactly_once_lanes={plan.lanes} (nothing of "
                          "the batch was produced)")


def _group_consumer(config: SinkConfig, run: str) -> Any:
    from confluent_kafka import Consumer

    conf = client_conf(config)
    conf.update({"group.id": plan_group(config, run), "enable.auto.commit": "false"})
    return Consumer(conf)


def _read(consumer: Any, config: SinkConfig, timeout_s: float) -> Plan | None:
    from confluent_kafka import KafkaException, TopicPartition

    def ask(left: float) -> Plan | None:
        (tp,) = consumer.committed([TopicPartition(config.marker_topic, 0)], timeout=left)
        if tp.error is not None:
            raise KafkaException(tp.error)
        return decode_plan(tp.offset)

    return _retried(ask, timeout_s)


def _commit(consumer: Any, config: SinkConfig, plan: Plan, timeout_s: float) -> None:
    from confluent_kafka import KafkaException, TopicPartition

    def ask(_left: float) -> None:
        (tp,) = consumer.commit(offsets=[TopicPartition(config.marker_topic, 0, encode_plan(plan))],
                                asynchronous=False)
        if tp.error is not None:
            raise KafkaException(tp.error)

    _retried(ask, timeout_s)


def _retried(ask: Any, timeout_s: float) -> Any:
    """``ask(time left)`` again after a retriable error (a group coordinator not known or moving, as on a broker
    that just started or came back) until ``timeout_s`` has passed.

    Raises:
        confluent_kafka.KafkaException: an error that is not retriable, or the last one when time is up.
    """
    from confluent_kafka import KafkaException

    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return ask(max(1.0, deadline - time.monotonic()))
        except KafkaException as exc:
            err = exc.args[0] if exc.args else None
            if time.monotonic() >= deadline or not getattr(err, "retriable", lambda: False)() and \
                    getattr(err, "code", lambda: None)() not in _COORDINATOR_CODES:
                raise
            time.sleep(0.2)
