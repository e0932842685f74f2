"""``templates/kafka_to_kafka.py`` run by spark-submit as users run it, in a process group the test can SIGKILL.

Shared by the Kafka -> Spark -> Kafka scenarios (17: exactly-once; 18:
at-least-once record ids across a restart): :func:`k2k_conf` writes the job's
settings from ``conf/kafka_to_kafka.json`` with the test's broker, topics and
directories; :class:`Job` starts, kills and waits for the job.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from typing import Any

from ..hooks import env_for
from ..kafka_helpers import produce_all

__all__ = ["ROOT", "Job", "k2k_conf", "produce_source"]

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SPARK_SUBMIT = os.path.join(os.path.dirname(sys.executable), "spark-submit")


def k2k_conf(tmp_path: Any, bootstrap: str, source: str, out: str, per_trigger: int, *, sink: dict[str, Any],
             producer_conf: dict[str, Any] | None = None) -> str:
    """The job's settings file: ``conf/kafka_to_kafka.json`` with this test's broker, topics, sink and paths."""
    with open(os.path.join(ROOT, "conf", "kafka_to_kafka.json"), encoding="utf-8") as fh:
        raw = json.load(fh)
    raw["spark"]["conf"]["spark.driver.memory"] = "1g"
    raw["kafka"].update(bootstrap_servers=bootstrap, topic=out, create_topic_partitions=0)
    raw["kafka"]["producer_conf"].update(producer_conf or {})
    raw["sink"].update(wal_dir=str(tmp_path / "wal"), **sink)
    raw["source"].update(bootstrap_servers=bootstrap, subscribe=source, max_offsets_per_trigger=per_trigger)
    raw["query"].update(checkpoint_location=str(tmp_path / "chk"), summary_path=str(tmp_path / "summary.json"),
                        available_now=True, run_seconds=0, stop_grace_s=30.0)
    path = tmp_path / "job.json"
    path.write_text(json.dumps(raw))
    return str(path)


def produce_source(bootstrap: str, topic: str, n: int, partitions: int, keys: int) -> None:
    """``n`` records into ``topic``: record ``i`` in partition ``i % partitions``, key ``k<i % keys>``, value ``v<i>``."""
    produce_all(bootstrap, topic, ({"key": b"k%d" % (i % keys), "value": b"v%d" % i, "partition": i % partitions}
                                   for i in range(n)))


class Job:
    """templates/kafka_to_kafka.py under spark-submit, in a process group of its own (so all of it can be killed)."""

    def __init__(self, tmp_path: Any, conf: str, hook_dir: str, jars: list[str], bootstrap: str) -> None:
        self.tmp_path, self.conf, self.jars = tmp_path, conf, jars
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("RKS_")}
        self.env.update(env_for(hook_dir), PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable,
                        KAFKA_BOOTSTRAP=bootstrap, SPARK_LOCAL_IP="127.0.0.1",
                        PYTHONPATH=os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")])))
        self.proc: subprocess.Popen | None = None
        self.runs = 0

    def start(self, master: str = "local[2,3]") -> None:
        self.runs += 1
        log = open(self.tmp_path / f"job-{self.runs}.log", "w")
        self.proc = subprocess.Popen(
            [SPARK_SUBMIT, "--master", master, "--jars", ",".join(self.jars),
             os.path.join(ROOT, "templates", "kafka_to_kafka.py"), "--conf", self.conf],
            env=self.env, cwd=str(self.tmp_path), stdout=log, stderr=subprocess.STDOUT, start_new_session=True)

    def kill(self) -> None:
        assert self.proc is not None
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(30)

    def log(self) -> str:
        """The last run's log."""
        with open(self.tmp_path / f"job-{self.runs}.log", errors="replace") as f:
            return f.read()

    def assert_not_in_log(self, *errors: str) -> None:
        """The last run's log names none of ``errors``."""
        with open(self.tmp_path / f"job-{self.runs}.log", errors="replace") as f:
            text = f.read()
        found = [e for e in errors if e in text]
        assert not found, f"run {self.runs} of the job died of {found} (log: job-{self.runs}.log)"

    def wait(self, timeout_s: float) -> int:
        assert self.proc is not None
        try:
            return self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"the job did not end within {timeout_s:.0f} s (log: job-{self.runs}.log)") from None
