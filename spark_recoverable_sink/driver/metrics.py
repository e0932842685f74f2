"""Prometheus metrics of the sink, on the driver (optional: ``pip install "spark-recoverable-sink[metrics]"``).

The driver calls :func:`record_batch` with every :class:`.BatchReport`; with a
port (``metrics_port=`` of the sink) it also serves the metrics over HTTP.
Every metric has the label ``sink`` (the sink's name), so several sinks of one
driver share the metric families:

=====================================  =========  ==========================================================
name                                   type       meaning
=====================================  =========  ==========================================================
``rks_batches_total``                  counter    batches reported
``rks_rows_total``                     counter    rows the tasks accepted (WAL-committed)
``rks_bytes_total``                    counter    payload bytes of those rows
``rks_acked_total``                    counter    records acked by Kafka before their task ended
``rks_retried_total``                  counter    records produced again from the WAL
``rks_dead_lettered_total``            counter    records the batches' tasks dead-lettered
``rks_dead_letters_reported_total``    counter    dead letters new to the driver (also late ones, async mode)
``rks_replayed_total``                 counter    records replayed from slots of dead workers
``rks_pending_records``                gauge      records not yet acked when the last batch's tasks ended
``rks_wal_bytes``                      gauge      live WAL bytes of the slots the last batch ran on
``rks_wal_slot_bytes_max``             gauge      the fullest of those slots
``rks_wal_max_bytes``                  gauge      the sink's ``max_wal_bytes`` (per worker: its slot and adopted ones)
``rks_problems``                       gauge      problems (unreadable/quarantined slots) the last batch named
``rks_last_batch_timestamp_seconds``   gauge      Unix time of the last report
``rks_batch_seconds``                  histogram  driver-side duration of a batch (``_bucket``/``_sum``/``_count``)
``rks_kafka_queue_messages``           gauge      largest librdkafka queue (``msg_cnt``) the tasks reported
``rks_kafka_rtt_avg_seconds``          gauge      mean broker round trip over the tasks
``rks_kafka_rtt_max_seconds``          gauge      largest of the tasks' broker round trips
``rks_skipped_total``                  counter    exactly-once: records a re-run found already in Kafka
``rks_eo_lanes_waiting``               gauge      exactly-once: lanes of the open batch the driver waits for
``rks_eo_wait_seconds``                gauge      exactly-once: how long it has waited for them (0: none)
``rks_eo_settle_seconds``              histogram  exactly-once: how long batches waited for their lanes
``rks_eo_settle_timeouts_total``       counter    exactly-once: batches failed waiting for lanes (SettleTimeoutError)
``rks_eo_parts_total``                 counter    exactly-once: parts of large units committed while a batch waited
``rks_eo_lanes_opened_total``          counter    exactly-once: lane producers opened (a lane new to a worker: a hop)
``rks_eo_transactions_aborted_total``  counter    exactly-once: transactions the tasks' workers aborted
=====================================  =========  ==========================================================

The ``rks_kafka_*`` series exist only with ``statistics.interval.ms`` in the
Kafka configuration (NaN for a batch whose tasks had no statistics yet).
Counters also expose prometheus_client's ``*_created`` samples.

Registry: one dedicated ``CollectorRegistry`` per process, served by every
endpoint. Not the default registry: that one belongs to the application
(registering ``rks_*`` there could clash with its own collectors, and would
add the process collectors to our endpoint unasked); and one registry per
endpoint would show a sink on one port but not the other. To expose these
metrics through an endpoint of your own, register :func:`registry` in yours
(``prometheus_client.REGISTRY.register(registry())``).

Endpoint: :func:`serve` starts prometheus_client's HTTP server once per
process and (address, port): later calls return the same
:class:`MetricsEndpoint`; port 0 binds a free port once, named by
``MetricsEndpoint.port``. It serves from a daemon thread: it never keeps the
driver alive and lives until the process ends or :meth:`MetricsEndpoint.close`.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from ..config import SinkConfig
from ..errors import ConfigError
from ..report import BatchReport

__all__ = ["SinkMetrics", "MetricsEndpoint", "FAMILIES", "METRIC_NAMES", "INSTALL_HINT", "registry", "sink_metrics",
           "serve", "start", "record_batch", "settle_metrics"]

log = logging.getLogger(__name__)

INSTALL_HINT = 'pip install "spark-recoverable-sink[metrics]"'
_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0)
#: (family name as given to prometheus_client, kind, help). Counters are exposed with ``_total``.
FAMILIES: tuple[tuple[str, str, str], ...] = (
    ("rks_batches", "counter", "Batches reported by the sink"),
    ("rks_rows", "counter", "Rows the tasks accepted (committed to the WAL)"),
    ("rks_bytes", "counter", "Payload bytes of the rows the tasks accepted"),
    ("rks_acked", "counter", "Records acked by Kafka before their task ended"),
    ("rks_retried", "counter", "Records produced again from the WAL"),
    ("rks_dead_lettered", "counter", "Records the batches' tasks dead-lettered"),
    ("rks_dead_letters_reported", "counter", "Dead letters new to the driver"),
    ("rks_replayed", "counter", "Records replayed from WAL slots of dead workers"),
    ("rks_pending_records", "gauge", "Records not yet acked when the last batch's tasks ended"),
    ("rks_wal_bytes", "gauge", "Live WAL bytes of the slots the last batch ran on"),
    ("rks_wal_slot_bytes_max", "gauge", "Live WAL bytes of the fullest slot the last batch ran on"),
    ("rks_wal_max_bytes", "gauge",
     "The sink's max_wal_bytes (limit per Python worker: its slot and the slots it adopted)"),
    ("rks_problems", "gauge", "Problems (unreadable or quarantined WAL slots) named by the last batch"),
    ("rks_last_batch_timestamp_seconds", "gauge", "Unix time of the last batch report"),
    ("rks_batch_seconds", "histogram", "Driver-side duration of a batch"),
    ("rks_kafka_queue_messages", "gauge", "Largest librdkafka queue (msg_cnt) the last batch's tasks reported"),
    ("rks_kafka_rtt_avg_seconds", "gauge", "Mean broker round-trip time over the last batch's tasks"),
    ("rks_kafka_rtt_max_seconds", "gauge", "Largest broker round-trip time of the last batch's tasks"),
    ("rks_skipped", "counter", "Exactly-once: records a re-run found already in Kafka"),
    ("rks_eo_lanes_waiting", "gauge", "Exactly-once: lanes of the open batch the driver waits for"),
    ("rks_eo_wait_seconds", "gauge", "Exactly-once: how long the driver has waited for the open batch's lanes"),
    ("rks_eo_settle_seconds", "histogram", "Exactly-once: how long batches waited for their lanes"),
    ("rks_eo_settle_timeouts", "counter", "Exactly-once: batches failed for lanes still waiting"),
    ("rks_eo_parts", "counter", "Exactly-once: parts of large units committed while a batch waited"),
    ("rks_eo_lanes_opened", "counter", "Exactly-once: lane producers opened (a lane new to a worker)"),
    ("rks_eo_transactions_aborted", "counter", "Exactly-once: transactions the tasks' workers aborted"),
)
#: The exposed names of the metric families (counters with their ``_total``).
METRIC_NAMES: tuple[str, ...] = tuple(n + "_total" if k == "counter" else n for n, k, _ in FAMILIES)

_LOCK = threading.RLock()
_STATE: dict[str, Any] = {}  # "registry", "families": set up on first use
_SINKS: dict[str, "SinkMetrics"] = {}
_ENDPOINTS: dict[tuple[str, int], "MetricsEndpoint"] = {}


def _prometheus() -> Any:
    try:
        import prometheus_client
    except ImportError:
        raise ConfigError("metrics_port", f"needs the prometheus_client package: {INSTALL_HINT}") from None
    return prometheus_client


def _families() -> dict[str, Any]:
    with _LOCK:
        if "families" not in _STATE:
            pc = _prometheus()
            reg = pc.CollectorRegistry()
            kinds = {"counter": pc.Counter, "gauge": pc.Gauge, "histogram": pc.Histogram}
            fams = {}
            for name, kind, doc in FAMILIES:
                extra = {"buckets": _BUCKETS} if kind == "histogram" else {}
                fams[name] = kinds[kind](name, doc, ["sink"], registry=reg, **extra)
            _STATE["registry"], _STATE["families"] = reg, fams
        return _STATE["families"]


def registry() -> Any:
    """The process's ``CollectorRegistry`` holding every sink's metrics.

    Raises:
        ConfigError: prometheus_client is not installed (names the pip command).
    """
    _families()
    return _STATE["registry"]


class SinkMetrics:
    """The metrics of one sink (label ``sink=name``); use :func:`sink_metrics` to share one per name.

    Raises (from the constructor):
        ConfigError: prometheus_client is not installed (names the pip command).
    """

    def __init__(self, name: str, max_wal_bytes: int | None = None) -> None:
        fams = _families()
        self.name = name
        self._kafka_seen = False  # the rks_kafka_* series exist once a batch had librdkafka statistics
        self._fams = fams
        for n, kind, _ in FAMILIES:
            if kind == "counter":  # every counter exists from the start: rate() needs its zero
                self._m(n).inc(0)
            elif kind == "histogram":  # and every histogram's count
                self._m(n)
        self.settling(0, 0.0)  # no batch waits for lanes yet
        if max_wal_bytes is not None:
            self.set_max_wal_bytes(max_wal_bytes)

    def _m(self, family: str) -> Any:
        """This sink's child of a family (a gauge's series appears when first set)."""
        return self._fams[family].labels(sink=self.name)

    def set_max_wal_bytes(self, max_wal_bytes: int) -> None:
        """Publish the sink's per-slot WAL limit (``rks_wal_max_bytes``), the yardstick of ``rks_wal_*``."""
        self._m("rks_wal_max_bytes").set(max_wal_bytes)

    def observe(self, report: BatchReport) -> None:
        """Count one batch report: counters grow by its totals, gauges take its figures."""
        m = self._m
        m("rks_batches").inc()
        for n, v in (("rks_rows", report.rows), ("rks_bytes", report.bytes), ("rks_acked", report.acked),
                     ("rks_retried", report.retried), ("rks_dead_lettered", report.dead_lettered),
                     ("rks_dead_letters_reported", len(report.dead_letters)), ("rks_replayed", report.replayed),
                     ("rks_skipped", report.skipped), ("rks_eo_lanes_opened", report.lanes_opened),
                     ("rks_eo_transactions_aborted", report.txns_aborted)):
            if v > 0:
                m(n).inc(v)
        m("rks_pending_records").set(report.pending)
        m("rks_wal_bytes").set(report.wal_bytes)
        m("rks_wal_slot_bytes_max").set(report.wal_slot_bytes_max)
        m("rks_problems").set(len(report.problems))
        m("rks_last_batch_timestamp_seconds").set(time.time())
        m("rks_batch_seconds").observe(max(0.0, report.seconds))
        if report.kafka_queue_msgs_max >= 0 or self._kafka_seen:
            self._kafka_seen = True
            known = report.kafka_queue_msgs_max >= 0
            m("rks_kafka_queue_messages").set(report.kafka_queue_msgs_max if known else math.nan)
            for series, ms in (("rks_kafka_rtt_avg_seconds", report.kafka_rtt_ms_avg),
                               ("rks_kafka_rtt_max_seconds", report.kafka_rtt_ms_max)):
                m(series).set(ms / 1000.0 if ms >= 0 else math.nan)


    def settling(self, lanes: int, seconds: float, parts: int = 0) -> None:
        """The driver waits for ``lanes`` lanes of its open batch, ``seconds`` so far (0 lanes: none)."""
        self._m("rks_eo_lanes_waiting").set(lanes)
        self._m("rks_eo_wait_seconds").set(seconds if lanes else 0.0)
        if parts > 0:
            self._m("rks_eo_parts").inc(parts)

    def settled(self, seconds: float, timed_out: bool = False) -> None:
        """A batch's wait for its lanes ended (``timed_out``: with :class:`.SettleTimeoutError`)."""
        self.settling(0, 0.0)
        self._m("rks_eo_settle_seconds").observe(max(0.0, seconds))
        if timed_out:
            self._m("rks_eo_settle_timeouts").inc()


def sink_metrics(name: str, max_wal_bytes: int | None = None) -> SinkMetrics:
    """This process's :class:`SinkMetrics` of sink ``name``, created on first use.

    Raises:
        ConfigError: prometheus_client is not installed (names the pip command).
    """
    with _LOCK:
        m = _SINKS.get(name)
        if m is None:
            m = _SINKS[name] = SinkMetrics(name, max_wal_bytes)
        elif max_wal_bytes is not None:
            m.set_max_wal_bytes(max_wal_bytes)
        return m


@dataclass
class MetricsEndpoint:
    """A running HTTP endpoint: ``port`` is the bound one (the chosen one for port 0)."""

    addr: str
    port: int
    requested_port: int
    _server: Any = field(repr=False)
    _thread: Any = field(repr=False)

    @property
    def url(self) -> str:
        host = "127.0.0.1" if self.addr in ("", "0.0.0.0") else self.addr
        return f"http://{host}:{self.port}/metrics"

    def close(self) -> None:
        """Stop serving and free the port (tests and tools; a driver never needs it)."""
        with _LOCK:
            _ENDPOINTS.pop((self.addr, self.requested_port), None)
        self._server.shutdown()
        self._server.server_close()


def serve(port: int, addr: str = "0.0.0.0") -> MetricsEndpoint:
    """Serve the metrics on ``addr:port`` (once per process and address/port; 0 = a free port).

    Raises:
        ConfigError: ``port`` is not 0-65535, prometheus_client is missing, or the port cannot be bound.
    """
    if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
        raise ConfigError("metrics_port", f"must be a port number 0-65535, got {port!r}")
    with _LOCK:
        ep = _ENDPOINTS.get((addr, port))
        if ep is not None:
            return ep
        pc, reg = _prometheus(), registry()
        try:
            server, thread = pc.start_http_server(port, addr=addr, registry=reg)
        except OSError as exc:
            raise ConfigError("metrics_port", f"cannot serve metrics on {addr}:{port}: {exc.strerror or exc}") \
                from exc
        ep = _ENDPOINTS[(addr, port)] = MetricsEndpoint(addr, server.server_port, port, server, thread)
        log.info("spark_recoverable_sink metrics served at %s:%d (daemon thread %s)", addr, ep.port, thread.name)
        return ep


def _name_of(config_or_name: SinkConfig | str) -> tuple[str, SinkConfig | None]:
    if isinstance(config_or_name, SinkConfig):
        return config_or_name.name, config_or_name
    return str(config_or_name), None


def start(config_or_name: SinkConfig | str, metrics_port: int | None = None) -> MetricsEndpoint | None:
    """Set up a sink's metrics before its first batch (at construction: fail early, before any write).

    ``metrics_port`` defaults to the config's; with neither, nothing happens (``None``).

    Raises:
        ConfigError: prometheus_client is missing, or the port cannot be bound.
    """
    name, config = _name_of(config_or_name)
    port = metrics_port if metrics_port is not None else getattr(config, "metrics_port", None)
    if port is None:
        return None
    sink_metrics(name, config.max_wal_bytes if config is not None else None)
    return serve(port)


def record_batch(config_or_name: SinkConfig | str, report: BatchReport,
                 metrics_port: int | None = None) -> SinkMetrics | None:
    """Count a batch report in the sink's metrics; serve them on ``metrics_port`` (first call starts it).

    ``metrics_port`` defaults to the config's. With no port, only a sink whose
    metrics already exist in this process (:func:`start`, :func:`sink_metrics`)
    is updated; otherwise nothing is done and prometheus_client is not
    imported (``None``). The metrics are updated before the endpoint is
    started, so a port that cannot be bound loses no count.

    Raises:
        ConfigError: prometheus_client is missing, or the port cannot be bound
            (the caller logs it: a batch whose records are safe must not fail for it).
    """
    name, config = _name_of(config_or_name)
    port = metrics_port if metrics_port is not None else getattr(config, "metrics_port", None)
    with _LOCK:
        if port is None and name not in _SINKS:
            return None
        m = sink_metrics(name, config.max_wal_bytes if config is not None else None)
    m.observe(report)
    if port is not None:
        serve(port)
    return m


def settle_metrics(config: SinkConfig) -> SinkMetrics | None:
    """The sink's metrics for the settle to update while a batch waits for its lanes; ``None`` when the sink has no
    metrics in this process (prometheus_client is then not imported)."""
    with _LOCK:
        if config.metrics_port is None and config.name not in _SINKS:
            return None
    return sink_metrics(config.name, config.max_wal_bytes)
