"""The driver's part of exactly-once: a batch ends only when every lane of it is committed, refused or timed out.

Batches run one after the other; if batch ``b+1`` could commit a lane while
a unit of batch ``b`` still waits in some WAL, the lane's marker (which only
keeps the latest batch) would make that unit look committed. So when tasks
return with units still pending (the broker is down, or slower than
``ack_timeout_s``), :func:`settle` keeps the batch open: it runs drain jobs
(whose tasks retry every waiting unit, adopt the slots of dead workers and
keep workers alive) and reads the lanes' markers until all are at ``b``.

It ends, at the latest, after ``settle_timeout_s``:

1. every waiting lane's marker is at the batch: settled;
2. a unit was refused (a record refused for good): its lane is done waiting,
   and the dead letters the drains offered are returned for the caller to
   raise :class:`.DeadLetterError`;
3. past ``settle_timeout_s``: :class:`.SettleTimeoutError` names every lane
   still waiting, its unit and its last error. Nothing is dropped: the units
   stay in the WALs, and the batch runs again after a restart. A lane whose
   unit is committed in parts (:func:`..delivery.exactly_once.parts.commit_parts`) restarts
   the bound with every part it commits: the bound is on a wait without
   progress, and a unit of any size ends.

A drain job runs in a thread of its own and is waited for until the bound
plus ``_DRAIN_GRACE_S``: its tasks' waits are bounded, but a job whose tasks
never start (no executor left) would otherwise hold the batch for ever. Past
that, the job's cancellation is requested (``cancel``), the markers are read
once more, and the lanes still waiting fail with the same error, which also
names the drain job that did not return. The thread only bounds the wait: no
state of the sink lives in it, and an abandoned job changes nothing a later
batch relies on (a drain writes nothing new; its units commit or stay).

This also fixes the order consumers see: every record of batch ``b`` is
visible before any record of batch ``b+1``, in every Kafka partition.

:func:`tagged_drains` gives :func:`settle` its drain jobs on a live session:
each job carries one tag so that a stuck one can be cancelled: a SparkContext
job tag on classic Spark (``addJobTag`` / ``cancelJobsWithTag``), a session
tag on Spark Connect (``addTag`` / ``interruptTag``; its tags are
thread-local, added in the drain thread). Both exist from PySpark 3.5.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, Callable

from .. import _points
from ..config import SinkConfig
from ..deadline import Deadline
from ..delivery.exactly_once.marker_reads import lane_markers
from ..delivery.exactly_once.names import lane_id
from ..delivery.exactly_once.plan import Plan, pin_lanes
from ..delivery.exactly_once.topic import known_marker_topic_id, marker_topic_id, recheck_marker_topic
from ..errors import SettleTimeoutError
from ..report import BatchReport
from .versions import inheritable_thread, is_connect

__all__ = ["settle", "tagged_drains", "check_marker_topic"]

log = logging.getLogger("spark_recoverable_sink.sink")  # the driver's batch lines, whatever module writes them

_DRAIN_S = 10.0  # one drain job's wait; the loop goes on until every lane is committed or the bound
#: One read of the lanes' markers. A lane whose offset is unstable (a transaction a dead worker left open, which
#: only the lane's next init ends) gives no answer however long it is waited for: a drain job's round ends it.
_READ_S = 3.0
_DRAIN_GRACE_S = 60.0  # past the bound, how long a drain job that has not returned is still waited for


def settle(config: SinkConfig, report: BatchReport, drain: Callable[[float], Any],
           cancel: Callable[[], Any] | None = None,
           thread: Callable[..., threading.Thread] = threading.Thread,
           progress: Any = None) -> list[tuple[str, str, str]]:
    """Wait until every lane of ``report``'s batch with pending rows is committed (or refused).

    Runs on the driver. ``drain(timeout_s)`` runs one drain job
    (:meth:`.RecoverableKafkaSink.drain`) and returns its :class:`.DrainReport`;
    it runs in a ``thread(target=..., name=..., daemon=True)`` (PySpark's
    ``InheritableThread`` keeps the batch's job properties), and ``cancel()``
    cancels a drain job that did not return in time. ``progress`` (the sink's
    metrics, :meth:`.metrics.SinkMetrics.settling` and ``settled``) hears the
    lanes still waiting before each drain job and the wait's end. Returns the
    dead letters (record id, error, token) the drain jobs offered.

    Raises:
        SettleTimeoutError: lanes still waiting after ``config.settle_timeout_s``,
            or a drain job still running ``_DRAIN_GRACE_S`` past it.
        MarkerError: lanes still wait and the marker topic is gone (every lane's marker with it).
        pyspark errors: a drain job failed (the batch fails; Spark re-runs it
            and every committed lane is skipped).
    """
    lanes = sorted({p.origin for p in report.task_reports if p.pending > 0})
    offered: dict[str, tuple[str, str, str]] = {}
    if not lanes:
        return []
    t0 = time.monotonic()
    try:
        offered_letters = _wait(config, report, drain, cancel, thread, progress, lanes, offered, t0)
    except SettleTimeoutError:
        if progress is not None:
            progress.settled(time.monotonic() - t0, timed_out=True)
        raise
    except BaseException:
        if progress is not None:
            progress.settling(0, 0.0)
        raise
    if progress is not None:
        progress.settled(time.monotonic() - t0)
    return offered_letters


def _wait(config: SinkConfig, report: BatchReport, drain: Callable[[float], Any], cancel: Callable[[], Any] | None,
          thread: Callable[..., threading.Thread], progress: Any, lanes: list[int],
          offered: dict[str, tuple[str, str, str]], t0: float) -> list[tuple[str, str, str]]:
    """:func:`settle`'s loop (steps 1-3)."""
    bound = Deadline(config.settle_timeout_s)
    rounds = 0
    units: list[dict[str, Any]] = []
    parts: dict[int, int] = {}
    seen_parts = 0
    while True:
        left = _uncommitted(config, report, lanes, parts)  # Step 1
        if left is not None and not left:
            break
        waiting = lanes if left is None else left
        if parts.pop(-1, 0):  # a lane committed another part of its unit since the last round
            bound = Deadline(config.settle_timeout_s)
        if progress is not None:
            done_parts = sum(parts.values())
            progress.settling(len(waiting), time.monotonic() - t0, max(0, done_parts - seen_parts))
            seen_parts = max(seen_parts, done_parts)
        if bound.expired():  # Step 3
            raise _timeout(config, report, waiting, units, time.monotonic() - t0)
        rounds += 1
        log.warning("sink=%s batch_id=%d exactly_once waiting lanes=%s round=%d seconds=%.1f: units wait in the "
                    "executors' WALs for their transactions; the batch ends once they are committed (at most "
                    "settle_timeout_s=%.0f)", config.name, report.batch_id, ",".join(map(str, waiting)), rounds,
                    time.monotonic() - t0, config.settle_timeout_s)
        _points.point("eo.settle_drain", batch=report.batch_id, round=rounds)
        done = _drain_bounded(config, report, drain, max(1.0, bound.cap(_DRAIN_S)),
                              (bound.remaining() or 0.0) + _DRAIN_GRACE_S, cancel, thread)
        if isinstance(done, _StuckDrain):  # live workers may have committed the lanes meanwhile: look once more
            left = _uncommitted(config, report, waiting)
            if left is not None and not left:
                break
            raise _timeout(config, report, waiting if left is None else left, units, time.monotonic() - t0,
                           stuck=done)
        units = list(getattr(done, "units", ()))
        for rid, err, token in getattr(done, "dead_letters", ()):
            offered[token] = (rid, err, token)
        refused = _refused_lanes(config, report, offered.values())  # Step 2
        if refused:
            log.error("sink=%s batch_id=%d exactly_once lanes=%s refused (a record refused for good): the batch "
                      "fails with DeadLetterError", config.name, report.batch_id, ",".join(map(str, sorted(refused))))
        lanes = [lane for lane in waiting if lane not in refused]
        if not lanes:
            break
    waited = time.monotonic() - t0
    log.info("sink=%s batch_id=%d exactly_once settled seconds=%.3f", config.name, report.batch_id, waited)
    return list(offered.values())


def tagged_drains(spark: Any, drain: Callable[[Any, float], Any], tag: str) -> dict[str, Callable[..., Any]]:
    """:func:`settle`'s ``drain``, ``cancel`` and ``thread`` for ``spark`` (classic or Connect), jobs tagged ``tag``.

    ``drain(spark, timeout_s)`` runs one drain job
    (:meth:`.RecoverableKafkaSink.drain`). The thread is PySpark's
    ``InheritableThread`` (the batch's job properties; :func:`.versions.inheritable_thread`).
    The session is only asked for its SparkContext once a drain is needed (a
    marker read may settle the batch first).
    """
    connect = is_connect(spark)

    def run(timeout_s: float) -> Any:  # in settle's thread
        if connect:
            spark.addTag(tag)  # a Connect client's tags are this thread's
            try:
                return drain(spark, timeout_s)
            finally:
                spark.removeTag(tag)
        sc = spark.sparkContext
        sc.addJobTag(tag)
        try:
            return drain(spark, timeout_s)
        finally:
            sc.removeJobTag(tag)

    def cancel() -> None:
        if connect:
            spark.interruptTag(tag)
        else:
            spark.sparkContext.cancelJobsWithTag(tag)

    return {"drain": run, "cancel": cancel, "thread": lambda **kw: inheritable_thread(spark, **kw)}


class _StuckDrain:
    """A drain job that had not returned when settle stopped waiting for it."""

    def __init__(self, cancelled: bool) -> None:
        self.cancelled = cancelled


def _drain_bounded(config: SinkConfig, report: BatchReport, drain: Callable[[float], Any], timeout_s: float,
                   wait_s: float, cancel: Callable[[], Any] | None, thread: Callable[..., threading.Thread]) -> Any:
    """``drain(timeout_s)``'s report, or a :class:`_StuckDrain` (its job cancelled) after ``wait_s``.

    Raises:
        the drain job's own error, as it is (the batch fails; Spark re-runs it).
        BaseException: interrupted while waiting (the drain job is cancelled first).
    """
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["done"] = drain(timeout_s)
        except BaseException as exc:  # handed to the waiting thread, which raises it
            box["error"] = exc

    worker = thread(target=run, name="rks-settle-drain", daemon=True)
    worker.start()
    try:
        worker.join(wait_s)
    except BaseException:  # interrupted: leave no drain job behind
        _cancel(config, report, cancel)
        raise
    if worker.is_alive():
        return _StuckDrain(_cancel(config, report, cancel))
    if "error" in box:
        raise box["error"]
    return box.get("done")


def _cancel(config: SinkConfig, report: BatchReport, cancel: Callable[[], Any] | None) -> bool:
    """Ask Spark to cancel the drain job; whether the request was made."""
    if cancel is None:
        return False
    try:
        cancel()
        return True
    except Exception as exc:  # the timeout (or interrupt) is what the caller must see
        log.warning("sink=%s batch_id=%d exactly_once drain job not cancelled: %s", config.name, report.batch_id,
                    config.scrub(str(exc)))
        return False


def check_marker_topic(config: SinkConfig, run: str, batch: int,
                       cores: Callable[[], int | None] = lambda: None) -> tuple[str | None, Plan]:
    """Driver, every exactly-once batch: the marker topic checked (once per process: compacted, created if missing),
    then the run's lane count pinned (:func:`..delivery.exactly_once.plan.pin_lanes`; ``cores()`` sizes
    ``exactly_once_lanes="auto"`` at the run's first batch).

    Returns the marker topic's id for the batch's tasks and drain jobs
    (``""``: the broker gives none; ``None`` when the broker did not answer:
    the workers check it), and the plan the batch runs under.

    Raises:
        ConfigError: the marker topic is not compacted, or ``exactly_once_lanes`` differs from the lane count
            of a batch a lane already committed (nothing of the batch runs).
        MarkerError: it was deleted or replaced since this driver checked it.
        confluent_kafka.KafkaException: the lane plan not read within ``settle_timeout_s`` (nothing ran).
    """
    from confluent_kafka import KafkaException

    try:
        topic_id: str | None = marker_topic_id(config, 30.0)
    except KafkaException as exc:
        log.warning("sink=%s marker topic %s not checked (%s): the workers check it", config.name,
                    config.marker_topic, config.scrub(str(exc)))
        topic_id = None
    # waits out an outage up to the settle's own bound
    return topic_id, pin_lanes(config, run, batch, config.settle_timeout_s, cores)


def _uncommitted(config: SinkConfig, report: BatchReport, lanes: list[int],
                 parts: dict[int, int] | None = None) -> list[int] | None:
    """The lanes whose marker is still before the batch; ``None`` when the broker did not answer.

    ``parts``: each lane's parts of the batch committed so far (a partial marker's), updated; key ``-1`` set to 1
    when a lane committed more of them than this dict held.

    Raises:
        MarkerError: lanes still wait and the marker topic this driver checked is gone (their markers with it).
    """
    try:
        markers = lane_markers(config, report.run, lanes, timeout_s=_READ_S)
    except Exception as exc:  # the broker is down: the drain jobs keep trying
        log.info("sink=%s lane markers not readable yet: %s", config.name, config.scrub(str(exc)))
        return None
    left = []
    for lane in lanes:
        found = markers.get(lane)
        if found is None or found.batch < report.batch_id:
            left.append(lane)
    if parts is not None:
        for lane in left:
            found = markers.get(lane)
            p = found.partial if found is not None else None
            if p is not None and p.batch == report.batch_id and p.k + 1 > parts.get(lane, 0):
                parts[lane], parts[-1] = p.k + 1, 1
    if left and known_marker_topic_id(config) is not None:
        from confluent_kafka import KafkaException

        try:  # a metadata request only: this may run during an outage
            recheck_marker_topic(config, 5.0, f"batch {report.batch_id} waits for lanes {left}", ids=False)
        except KafkaException:
            pass
    return left


def _refused_lanes(config: SinkConfig, report: BatchReport, offered: Any) -> set[int]:
    """Lanes of this batch with a dead letter offered (a refused unit puts all its records there)."""
    prefix = f"{config.name}:{report.run}:{report.batch_id}:"
    out = set()
    for rid, _err, _token in offered:
        if rid.startswith(prefix):
            part = rid[len(prefix):].split(":", 1)[0]
            if part.isdigit():
                out.add(int(part))
    return out


def _timeout(config: SinkConfig, report: BatchReport, lanes: list[int], units: list[dict[str, Any]],
             waited: float, stuck: "_StuckDrain | None" = None) -> SettleTimeoutError:
    ids = {lane_id(config.name, report.run, p): p for p in lanes}
    known = {u["lane"]: u for u in units if u.get("lane") in ids and u.get("batch") == report.batch_id}
    named = []
    for lid in ids:
        u = known.get(lid)
        named.append(dict(u) if u is not None else {"lane": lid, "batch": report.batch_id, "rows": None, "tries": None,
                                                     "last_error": "no live worker reported this unit waiting"})
    lines = "; ".join(f"{u['lane']} batch={u['batch']} rows={u['rows']} tries={u['tries']} "
                      f"last_error={config.scrub(str(u['last_error']))}" for u in named)
    late = "" if stuck is None else (
        f" The last drain job did not return within {_DRAIN_GRACE_S:.0f}s past the bound (were its tasks ever "
        "scheduled? no executor, or none free)" + ("; its cancellation was requested." if stuck.cancelled else "."))
    return SettleTimeoutError(
        f"sink={config.name} batch_id={report.batch_id}: {len(named)} exactly-once lane(s) not committed after "
        f"{waited:.0f}s (settle_timeout_s={config.settle_timeout_s:.0f}): {lines}.{late} Nothing was dropped: the "
        "units stay in the executors' WALs; the batch fails and runs again after a restart (a lane committed since is "
        "skipped then). Check the broker and the errors above, or raise settle_timeout_s.", named)
