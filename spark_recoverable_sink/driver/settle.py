"""The driver's part of exactly-once: a batch ends only when every lane of it is committed.

Batches run one after the other; if batch ``b+1`` could commit a lane while
a unit of batch ``b`` still waits in some WAL, the lane's marker (which only
keeps the latest batch) would make that unit look committed. So when tasks
return with units still pending (the broker is down, or slower than
``ack_timeout_s``), :func:`settle` keeps the batch open: it runs drain jobs
(whose tasks retry every waiting unit, adopt the slots of dead workers and
keep workers alive) and reads the lanes' markers until all are at ``b``.
The query keeps running meanwhile; it does not fail on an outage.

This also fixes the order consumers see: every record of batch ``b`` is
visible before any record of batch ``b+1``, in every Kafka partition.
"""

from __future__ import annotations

import logging
import time
from typing import Any, Callable

from ..config import SinkConfig
from ..delivery.exactly_once.lanes import lane_markers
from ..report import BatchReport

__all__ = ["settle"]

log = logging.getLogger("spark_recoverable_sink.sink")  # the driver's batch lines, whatever module writes them

_DRAIN_S = 10.0  # one drain job's wait; the loop goes on until every lane is committed


def settle(config: SinkConfig, report: BatchReport, drain: Callable[[float], Any]) -> float:
    """Wait until every lane of ``report``'s batch with pending rows is committed; returns the seconds waited.

    ``drain(timeout_s)`` runs one drain job (:meth:`.RecoverableKafkaSink.drain`).

    Raises:
        pyspark errors: a drain job failed (the batch fails; Spark re-runs it
            and every committed lane is skipped).
    """
    lanes = sorted({p.partition for p in report.partition_reports if p.pending > 0})
    if not lanes:
        return 0.0
    t0 = time.monotonic()
    rounds = 0
    while True:
        left = _uncommitted(config, report, lanes)
        if left is not None and not left:
            break
        rounds += 1
        log.warning("sink=%s batch_id=%d exactly_once waiting lanes=%s round=%d seconds=%.1f: units wait in the "
                    "executors' WALs for their transactions; the batch ends once they are committed",
                    config.name, report.batch_id, "?" if left is None else ",".join(map(str, left)), rounds,
                    time.monotonic() - t0)
        drain(_DRAIN_S)
        lanes = lanes if left is None else left
    waited = time.monotonic() - t0
    log.info("sink=%s batch_id=%d exactly_once settled lanes=%d seconds=%.3f", config.name,
             report.batch_id, len(lanes), waited)
    return waited


def _uncommitted(config: SinkConfig, report: BatchReport, lanes: list[int]) -> list[int] | None:
    """The lanes whose marker is still before the batch; ``None`` when the broker did not answer."""
    try:
        markers = lane_markers(config, report.run, lanes)
    except Exception as exc:  # the broker is down: the drain jobs keep trying
        log.info("sink=%s lane markers not readable yet: %s", config.name, config.scrub(str(exc)))
        return None
    return [lane for lane in lanes if markers.get(lane) is None or markers[lane][0] < report.batch_id]
