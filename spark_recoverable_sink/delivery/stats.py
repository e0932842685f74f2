"""librdkafka statistics, summarised for the task reports.

When the user's ``kafka_conf`` sets ``statistics.interval.ms`` > 0,
librdkafka emits a JSON document every interval from ``poll()``. The
producer factory (:class:`.client.ProducerSlot`) adds a ``stats_cb`` that
keeps, per sink name in this process, the latest :class:`KafkaStatsSummary`:

* ``queue_msgs``: ``msg_cnt``, messages in the client's queues (not yet acked
  or failed);
* ``rtt_ms``: average of the brokers' ``rtt.avg`` (microseconds in the JSON,
  milliseconds here), over the brokers that had round trips in the window.
  A window without any request (an idle producer) keeps the previous figure:
  a round-trip time does not vanish because nothing was sent;
* ``txn_state``: ``eos.txn_state`` (``Init`` for an idempotent producer that
  is not transactional; empty when the document has no ``eos`` object).

Nothing else of the document is kept: it names the client and the brokers,
never a secret, but the report only needs these figures. The callback never
raises into librdkafka: a document it cannot read is logged (without its
content) and ignored.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from dataclasses import dataclass
from typing import Any, Mapping

__all__ = ["KafkaStatsSummary", "KafkaStats", "summarize", "stats_enabled", "install_stats_cb", "stats_callback",
           "latest_summary", "UNKNOWN"]

log = logging.getLogger(__name__)

#: The value of a figure nobody measured (statistics disabled, or not emitted yet).
UNKNOWN = -1

_BOARD: dict[str, "KafkaStats"] = {}
_BOARD_PID = os.getpid()
_BOARD_LOCK = threading.Lock()


@dataclass(frozen=True)
class KafkaStatsSummary:
    """The figures of one librdkafka statistics document (see the module doc)."""

    queue_msgs: int = UNKNOWN
    rtt_ms: float = float(UNKNOWN)
    txn_state: str = ""
    at: float = 0.0  # time.monotonic() when it was summarised


def summarize(stats: str | bytes | Mapping[str, Any],
              previous: KafkaStatsSummary | None = None) -> KafkaStatsSummary:
    """Summarise one statistics document; ``previous`` supplies the RTT of a window without requests.

    Raises:
        ValueError: ``stats`` is not JSON, or not a librdkafka statistics object.
    """
    doc = json.loads(stats) if isinstance(stats, (str, bytes, bytearray)) else stats
    if not isinstance(doc, Mapping):
        raise ValueError(f"statistics must be a JSON object, got {type(doc).__name__}")
    try:
        queue = int(doc["msg_cnt"])
    except (KeyError, TypeError, ValueError):
        raise ValueError("statistics carry no integer 'msg_cnt'") from None
    rtts = []
    brokers = doc.get("brokers") or {}
    for broker in (brokers.values() if isinstance(brokers, Mapping) else ()):
        rtt = broker.get("rtt") if isinstance(broker, Mapping) else None
        if isinstance(rtt, Mapping) and _number(rtt.get("cnt")) > 0:
            rtts.append(_number(rtt.get("avg")) / 1000.0)
    if rtts:
        rtt_ms = sum(rtts) / len(rtts)
    else:
        rtt_ms = previous.rtt_ms if previous is not None else float(UNKNOWN)
    eos = doc.get("eos")
    txn = str(eos.get("txn_state") or "") if isinstance(eos, Mapping) else ""
    return KafkaStatsSummary(queue_msgs=queue, rtt_ms=rtt_ms, txn_state=txn, at=time.monotonic())


def _number(v: Any) -> float:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else 0.0


class KafkaStats:
    """The latest summary of one sink's producers in this process (thread-safe)."""

    def __init__(self, sink_name: str) -> None:
        self.sink_name = sink_name
        self._lock = threading.Lock()
        self._latest: KafkaStatsSummary | None = None
        self.errors = 0

    def on_stats(self, stats_json: Any) -> None:
        """The ``stats_cb`` handed to librdkafka: summarise and keep; never raises."""
        try:
            with self._lock:
                self._latest = summarize(stats_json, self._latest)
        except Exception as exc:  # never into librdkafka's poll()
            self.errors += 1
            if self.errors == 1 or self.errors % 1000 == 0:
                log.warning("sink=%s cannot read librdkafka statistics (%s: %s; %d so far); ignored",
                            self.sink_name, type(exc).__name__, str(exc)[:200], self.errors)

    def latest(self) -> KafkaStatsSummary | None:
        """The latest summary, or ``None`` before the first document."""
        with self._lock:
            return self._latest


def stats_enabled(conf: Mapping[str, Any]) -> bool:
    """Whether ``conf`` asks librdkafka for statistics (``statistics.interval.ms`` > 0)."""
    try:
        return int(conf.get("statistics.interval.ms", 0) or 0) > 0
    except (TypeError, ValueError):
        return False  # librdkafka itself refuses the value when the producer is built


def _board(sink_name: str) -> KafkaStats:
    global _BOARD_PID
    with _BOARD_LOCK:
        if _BOARD_PID != os.getpid():  # a forked child summarises its own producers
            _BOARD.clear()
            _BOARD_PID = os.getpid()
        holder = _BOARD.get(sink_name)
        if holder is None:
            holder = _BOARD[sink_name] = KafkaStats(sink_name)
        return holder


def stats_callback(conf: Mapping[str, Any], sink_name: str) -> Any:
    """The summarising ``stats_cb`` for a producer of ``conf``, or ``None`` when statistics are not enabled."""
    return _board(sink_name).on_stats if stats_enabled(conf) else None


def install_stats_cb(conf: dict[str, Any], sink_name: str) -> None:
    """Add the summarising ``stats_cb`` to a producer ``conf`` when statistics are enabled (in place)."""
    cb = stats_callback(conf, sink_name)
    if cb is not None:
        conf["stats_cb"] = cb


def latest_summary(sink_name: str) -> KafkaStatsSummary | None:
    """The latest summary of this process's producers of ``sink_name`` (``None``: none yet)."""
    with _BOARD_LOCK:
        holder = _BOARD.get(sink_name) if _BOARD_PID == os.getpid() else None
    return holder.latest() if holder is not None else None
