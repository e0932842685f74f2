"""The brokers of ``bench/run.py``: a fresh Apache Kafka broker per section (:class:`Brokers`)."""

from __future__ import annotations

import os
from typing import Any

from bench import common
from bench.broker_watch import DATA_ENV, JMX_ENV, broker_options


class Brokers:
    """A fresh Apache Kafka broker for each section, and what the one before it used.

    Each section starts its own (devtools/kafka_broker.py: single-node KRaft,
    its log on the local disk, the JVM's default flags and a 1 GiB heap), so
    that no section meets the logs and page cache another left behind;
    ``used`` records, per section, the CPU seconds and the resident set of the
    broker it had, read from /proc when it stops. Each is started with
    :func:`bench.broker_watch.broker_options` (JMX on loopback, a deleted
    topic's files removed within 200 ms) and named to this process and its
    children in the environment (``DATA_ENV``, ``JMX_ENV``): every
    :func:`bench.common.delete_topic` of the section waits for the files.
    """

    def __init__(self, scratch: str) -> None:
        self.scratch = scratch
        self.current: Any = None
        self.section = ""
        self.used: dict[str, dict[str, Any]] = {}
        self.jmx_url: str | None = None

    def fresh(self, section: str) -> Any:
        from devtools.kafka_broker import KafkaBroker

        self.stop()
        self.section = section
        props, sysprops, self.jmx_url = broker_options()
        self.current = KafkaBroker(os.path.join(self.scratch, f"kafka-{section}"), heap="1g", jvm_options=(),
                                   properties=props, system_properties=sysprops).start()
        os.environ[DATA_ENV], os.environ[JMX_ENV] = self.current.data_dir, self.jmx_url
        self.used[section] = {"loadavg_start": list(os.getloadavg())}
        return self.current

    def stop(self) -> None:
        if self.current is None:
            return
        pid = self.current.proc.pid
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            cpu_s = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime
            status = common.proc_status(pid)
            self.used[self.section].update(cpu_s=round(cpu_s, 2), rss_kib=status.get("VmRSS"),
                                           hwm_kib=status.get("VmHWM"))
        except OSError:
            pass
        self.current.stop()
        self.current = None
        os.environ.pop(DATA_ENV, None)
        os.environ.pop(JMX_ENV, None)
