"""The driver's handling of a finished batch, shared by every entry point.

Given the tasks' :class:`.TaskReport` rows of one batch:

1. build the :class:`.BatchReport` (totals, new dead letters, run);
2. log it as one ``key=value`` line, with a WARNING when records are still
   pending in executors' WALs and an ERROR per problem a task reported;
3. feed the sink's metrics (the Prometheus endpoint, when ``metrics_port`` is set);
4. say what must fail the batch: :func:`dead_letter_error` (records refused
   for good and no dead-letter topic) and :func:`first_contact_error` (a sink
   that never reached a broker).

Nothing here keeps state between calls: the data source's driver side is a
fresh object for every call.
"""

from __future__ import annotations

import logging
import sys
from typing import Iterable, Sequence

from ..config import SinkConfig
from ..delivery.contact import first_contact_failure, reached_before, remember_reached
from ..errors import BrokerUnreachableError, DeadLetterError
from ..report import BatchReport, TaskReport

__all__ = ["conclude_batch", "dead_letter_error", "first_contact_error", "warn_pending", "ensure_log_handler"]

log = logging.getLogger("spark_recoverable_sink.sink")


def conclude_batch(config: SinkConfig, batch_id: int, run: str, parts: Sequence[TaskReport], seconds: float,
                   dead_letters: Iterable[tuple[str, str]] | None = None, entry: str = "foreachBatch",
                   ) -> BatchReport:
    """Build, log and record the report of one finished batch (steps 1-3 above).

    ``dead_letters`` are the (record id, error) pairs new to the driver
    (default: every one the tasks offered).
    """
    report = BatchReport.from_tasks(batch_id, parts, seconds, dead_letters=dead_letters, run=run)
    log.info("sink=%s entry=%s %s", config.name, entry, report.log_line())
    if report.pending:
        warn_pending(config, f"batch_id={batch_id}", report.pending)
    for problem in report.problems:
        log.error("sink=%s batch_id=%d problem=%s", config.name, batch_id, problem)
    _record_metrics(config, report)
    return report


def _record_metrics(config: SinkConfig, report: BatchReport) -> None:
    if config.metrics_port is None:
        return
    from .metrics import record_batch  # prometheus-client is imported only with a port

    try:
        record_batch(config, report)
    except Exception:  # metrics must never fail a batch whose records are safe
        log.exception("sink=%s batch_id=%d metrics update failed", config.name, report.batch_id)


def warn_pending(config: SinkConfig, where: str, pending: int) -> None:
    """Say where records not yet acked are, and how to get them out."""
    # Nothing on the driver can know when an executor's worker goes away (Spark closes Python
    # workers idle for a minute): say where the records are and how to get them out.
    log.warning("sink=%s %s pending=%d records are in executors' WALs, not yet acked by Kafka; the workers' "
                "background threads deliver them while the workers live (Spark closes a Python worker idle "
                "for about a minute). If the application ends first, they stay in the WAL until "
                "sink.drain(spark), `rks replay` or the next run of sink name=%s with wal_dir=%s on that executor",
                config.name, where, pending, config.name, config.wal_dir)


def dead_letter_error(config: SinkConfig, report: BatchReport) -> DeadLetterError | None:
    """The error that fails a batch with dead letters when no dead-letter topic is set (else ``None``)."""
    if not report.dead_letters or config.dead_letter_topic is not None:
        return None
    dead = report.dead_letters
    shown = "; ".join(f"{rid}: {err}" for rid, err in list(dead)[:10])
    more = f" (and {len(dead) - 10} more)" if len(dead) > 10 else ""
    message = (f"sink={config.name}: {len(dead)} record(s) failed with a non-retriable Kafka error and no "
               f"dead_letter_topic is set; they are kept in the WAL's dead-letter store: {shown}{more}")
    return DeadLetterError(message, [i for i, _ in dead], dict(dead))


def first_contact_error(config: SinkConfig, report: BatchReport,
                        earlier_batch_ended: bool = False) -> BrokerUnreachableError | None:
    """The error for a sink none of whose tasks ever reached a broker (``None`` if one did, or no task tried).

    A sink has reached a broker before when a task of this batch says so (its
    executor's ``broker-reached`` file), when this driver host remembers it
    (the same file in its own ``<wal_dir>/<sink>``, written here), or when an
    earlier batch of the same streaming query ended (``earlier_batch_ended``:
    the query's batch id, restored from its checkpoint, is past 0, and the
    first batch would have failed here had no broker been reached). An outage
    after that is an outage, whatever driver or executors see it now.

    With ``wait_for_broker=True`` the message is logged as an ERROR and
    ``None`` returned: the records wait in the WALs.
    """
    if any(p.broker_reached or p.acked for p in report.task_reports):
        remember_reached(config)
        return None
    if earlier_batch_ended or reached_before(config):
        return None
    failure = first_contact_failure(report.task_reports)
    if failure is None:
        return None
    pending, last_error = failure
    servers = config.scrub(dict(config.kafka_conf_items)["bootstrap.servers"])
    message = (f"sink={config.name} has never reached a Kafka broker at bootstrap.servers={servers}: "
               f"last connection error: {last_error}. Check bootstrap.servers (host, port, listener) and the "
               f"security settings. Nothing was dropped: the {pending} record(s) of batch_id="
               f"{report.batch_id} not yet acked stay in the executors' WALs and are delivered once a broker "
               "answers (or by the next run); set wait_for_broker=True to wait instead of failing.")
    if config.wait_for_broker:
        log.error("%s (wait_for_broker=True: not failing)", message)
        return None
    return BrokerUnreachableError(message, servers, last_error, pending)


def ensure_log_handler() -> None:
    """Give the package's logger a stderr handler in a Python worker where logging is not configured.

    The data source's ``commit`` and ``abort`` run in a Python worker Spark
    starts on the driver, the real-time foreach writer's ``close`` in an
    executor's worker; without this their INFO report line would go nowhere.
    """
    pkg = logging.getLogger("spark_recoverable_sink")
    if logging.getLogger().handlers or pkg.handlers:
        return
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s level=%(levelname)s logger=%(name)s %(message)s"))
    pkg.addHandler(handler)
    pkg.setLevel(logging.INFO)
