"""The bench broker seen from outside: its settings, its request counters (JMX) and its deleted topics' files.

:func:`broker_options` is how ``bench/run.py`` starts each section's broker
(devtools/kafka_broker.py): JMX on a free loopback port (no authentication:
127.0.0.1 only, a scratch broker) and ``log.segment.delete.delay.ms`` of
200 ms, the broker default of every topic's ``file.delete.delay.ms`` (60 s
otherwise): a deleted topic's files go within a fraction of a second, and
:func:`wait_files_gone` (called by :func:`bench.common.delete_topic`) waits
until they did. So no run's files are removed while a later run is timed
(removing them competes for the disk with the one writer that fsyncs).
:data:`DATA_ENV` and :data:`JMX_ENV` name the section's broker to this
process and its children (bench/cluster.py).

:class:`RequestCounters` reads the broker's own counters through JMX from a
JVM already running (the Spark driver's, over py4j; nothing new is started):

* ``kafka.network:type=RequestMetrics,name=RequestsPerSec,request=Produce``
  (``Count``, summed over versions): ProduceRequests the broker received;
* ``kafka.server:type=BrokerTopicMetrics,name=TotalProduceRequestsPerSec,topic=T``
  (``Count``): the topic's partition entries of those requests (the broker
  counts one per partition a request carries);
* ``...,name=MessagesInPerSec,topic=T`` and ``BytesInPerSec``: records and bytes.

Read before and after a timed write (never inside it), their differences say
how each writer talks to the broker: records per request, partitions per
request, requests per second. Where JMX cannot be read the figures are
``None`` and the report says so.
"""

from __future__ import annotations

import os
import time
from typing import Any

from devtools.processes import free_port

__all__ = ["DATA_ENV", "JMX_ENV", "DELETE_DELAY_MS", "broker_options", "wait_files_gone", "RequestCounters",
           "request_figures"]

DATA_ENV = "RKS_BENCH_BROKER_DATA"  # the section broker's log directory (its ``data_dir``)
JMX_ENV = "RKS_BENCH_BROKER_JMX"  # the section broker's JMX service URL
DELETE_DELAY_MS = 200


def broker_options() -> tuple[dict[str, str], dict[str, str], str]:
    """(server properties, JVM system properties, JMX service URL) of a bench broker."""
    port = free_port()
    sysprops = {"com.sun.management.jmxremote.port": str(port), "com.sun.management.jmxremote.rmi.port": str(port),
                "com.sun.management.jmxremote.authenticate": "false", "com.sun.management.jmxremote.ssl": "false",
                "com.sun.management.jmxremote.host": "127.0.0.1", "java.rmi.server.hostname": "127.0.0.1"}
    props = {"log.segment.delete.delay.ms": str(DELETE_DELAY_MS)}
    return props, sysprops, f"service:jmx:rmi:///jndi/rmi://127.0.0.1:{port}/jmxrmi"


def wait_files_gone(data_dir: str, topic: str, timeout_s: float = 60.0) -> float | None:
    """Wait until no directory of ``topic`` (live, or renamed ``...-delete``) is left; seconds waited, None: timeout."""
    t0 = time.monotonic()
    prefix = topic + "-"
    while True:
        try:
            left = [d for d in os.listdir(data_dir) if d.startswith(prefix) and d[len(prefix):][:1].isdigit()]
        except OSError:
            return time.monotonic() - t0
        if not left:
            return time.monotonic() - t0
        if time.monotonic() - t0 > timeout_s:
            return None
        time.sleep(0.05)


class RequestCounters:
    """The broker's produce counters through JMX, read from a running JVM (py4j ``jvm``); never raises.

    Where it runs: the bench process (the Spark driver's JVM makes the JMX
    call). ``url`` None (no JMX) or a failed connection: :meth:`read` gives None.
    """

    def __init__(self, jvm: Any, url: str | None) -> None:
        self._jvm, self._url = jvm, url
        self._mbs: Any = None
        self.error: str | None = None if url else "no JMX URL"

    def _conn(self) -> Any:
        if self._mbs is None and self.error is None:
            try:
                j = self._jvm
                url = j.javax.management.remote.JMXServiceURL(self._url)
                self._mbs = j.javax.management.remote.JMXConnectorFactory.connect(url, None).getMBeanServerConnection()
            except Exception as exc:  # noqa: BLE001 - the figures are then "not measured"
                self.error = f"{type(exc).__name__}: {str(exc)[:200]}"
        return self._mbs

    def _count(self, pattern: str) -> int:
        mbs = self._conn()
        names = mbs.queryNames(self._jvm.javax.management.ObjectName(pattern), None)
        return int(sum(int(mbs.getAttribute(n, "Count")) for n in names))

    def read(self, topic: str) -> dict[str, int] | None:
        """Cumulative counters: ``requests`` (broker-wide Produce), the topic's ``entries``, ``records``, ``bytes``."""
        if self._conn() is None:
            return None
        try:
            topic_m = "kafka.server:type=BrokerTopicMetrics,name={},topic=" + topic
            return {"requests": self._count("kafka.network:type=RequestMetrics,name=RequestsPerSec,request=Produce,*"),
                    "entries": self._count(topic_m.format("TotalProduceRequestsPerSec")),
                    "records": self._count(topic_m.format("MessagesInPerSec")),
                    "bytes": self._count(topic_m.format("BytesInPerSec"))}
        except Exception as exc:  # noqa: BLE001
            self.error = f"{type(exc).__name__}: {str(exc)[:200]}"
            return None


def request_figures(before: dict[str, int] | None, after: dict[str, int] | None,
                    seconds: float) -> dict[str, float] | None:
    """What a timed write sent, from two :meth:`RequestCounters.read` of its window (None: not measured)."""
    if not before or not after:
        return None
    d = {k: after[k] - before.get(k, 0) for k in after}
    if d["requests"] <= 0:
        return None
    return {**{k: float(v) for k, v in d.items()}, "requests_per_s": d["requests"] / seconds,
            "records_per_request": d["records"] / d["requests"],
            "partitions_per_request": d["entries"] / d["requests"],
            "records_per_entry": d["records"] / d["entries"] if d["entries"] else 0.0}
