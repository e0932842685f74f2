"""The brokers of ``bench/run.py``: a fresh Apache Kafka broker per section (:class:`Brokers`)."""

from __future__ import annotations

import os
from typing import Any

from bench import common


class Brokers:
    """A fresh Apache Kafka broker for each section, and what the one before it used.

    Each section starts its own (devtools/kafka_broker.py: single-node KRaft,
    its log on the local disk, the JVM's default flags and a 1 GiB heap), so
    that no section meets the logs and page cache another left behind;
    ``used`` records, per section, the CPU seconds and the resident set of the
    broker it had, read from /proc when it stops.
    """

    def __init__(self, scratch: str) -> None:
        self.scratch = scratch
        self.current: Any = None
        self.section = ""
        self.used: dict[str, dict[str, Any]] = {}

    def fresh(self, section: str) -> Any:
        from devtools.kafka_broker import KafkaBroker

        self.stop()
        self.section = section
        self.current = KafkaBroker(os.path.join(self.scratch, f"kafka-{section}"), heap="1g", jvm_options=()).start()
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
