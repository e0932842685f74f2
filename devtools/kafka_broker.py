"""A real Apache Kafka broker for the demo, the tests and the benchmark.

One single-node KRaft broker (``process.roles=broker,controller``) of the
release pinned in ``devtools/kafka/pom.xml``, run from its jars: fetched once
from Maven Central with ``mvn`` into a cache (devtools/jvm.py) and reused
offline afterwards.

Steps of :meth:`KafkaBroker.start`:

1. find Java 17+ and the jars (fetching them the first time);
2. write ``server.properties`` (free loopback ports, the log on disk under
   ``workdir``) unless this broker ran before;
3. format the storage the first time (``kafka.tools.StorageTool``, SCRAM
   users added there);
4. start ``kafka.Kafka`` and wait until a client gets its metadata.

A broker can be paused (SIGSTOP), SIGKILLed and restarted on the same log and
ports. ``KAFKA_BOOTSTRAP=host:port`` makes :func:`external_bootstrap` name an
existing cluster instead (the tests' shared broker, the demo, the benchmark).
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from typing import IO, Mapping

from .cds import kafka_archive, use_options
from .jvm import MavenError, java, maven_jars, pom_property
from .processes import free_port, stop_process  # re-exported: the tests and devtools import them from here

__all__ = ["KafkaBroker", "Listener", "BrokerSetupError", "kafka_jars", "kafka_version", "external_bootstrap",
           "free_port", "stop_process"]

_HERE = os.path.dirname(os.path.abspath(__file__))
POM = os.path.join(_HERE, "kafka", "pom.xml")


class BrokerSetupError(RuntimeError):
    """Something the broker needs is missing (Java, Maven, the jars) or it did not start."""


def external_bootstrap() -> str | None:
    """``KAFKA_BOOTSTRAP`` when it names an existing cluster, else None."""
    return os.environ.get("KAFKA_BOOTSTRAP") or None


def kafka_version() -> str:
    """The Kafka release the pom pins."""
    return pom_property(POM, "kafka.version")


def kafka_jars() -> str:
    """The folder holding the pinned Kafka release's jars, fetched with Maven the first time.

    Raises:
        BrokerSetupError: they are not cached and Maven is missing or fails.
    """
    try:
        return maven_jars(POM, f"kafka-{kafka_version()}")
    except MavenError as exc:
        raise BrokerSetupError(str(exc)) from exc


@dataclass(frozen=True)
class Listener:
    """A client listener: ``name`` (also its security protocol unless ``protocol``), SASL mechanisms, properties."""

    name: str
    protocol: str = ""
    mechanisms: tuple[str, ...] = ()
    properties: Mapping[str, str] = field(default_factory=dict, repr=False)  # may hold JAAS passwords

    @property
    def security_protocol(self) -> str:
        return self.protocol or self.name


_LOG4J = """status = warn
appender.out.type = Console
appender.out.name = OUT
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = {level}
rootLogger.appenderRef.out.ref = OUT
logger.kafka.name = kafka
logger.kafka.level = {level}
logger.state.name = state.change.logger
logger.state.level = WARN
"""


class KafkaBroker:
    """A single-node KRaft Apache Kafka broker on loopback ports, its log under ``workdir``; a context manager.

    ``port`` is the PLAINTEXT client listener; ``advertised_port`` differs from
    it when clients must reach the broker through something else (a test
    proxy). The broker talks to itself on a listener of its own, never through
    that proxy. ``listeners`` adds client listeners (SASL, SSL), each on a free
    port; ``scram_users`` (name to password) are created at format time;
    ``properties`` override server properties; ``jvm_options`` replaces the
    default JVM flags.
    """

    def __init__(self, workdir: str | None = None, *, port: int | None = None, advertised_port: int | None = None,
                 log_path: str | None = None, listeners: tuple[Listener, ...] = (),
                 scram_users: Mapping[str, str] | None = None, properties: Mapping[str, str] | None = None,
                 system_properties: Mapping[str, str] | None = None, heap: str = "768m",
                 jvm_options: tuple[str, ...] | None = None) -> None:
        self.workdir = workdir or tempfile.mkdtemp(prefix="rks-kafka-")
        self._own_workdir = workdir is None
        self.port = port or free_port()
        self.advertised_port = advertised_port or self.port
        self.controller_port = free_port()
        self.internal_port = free_port()
        self.listeners = tuple(listeners)
        self.listener_ports = {ln.name: free_port() for ln in self.listeners}
        self.scram_users = dict(scram_users or {})
        self.properties = dict(properties or {})
        self.system_properties = dict(system_properties or {})
        self.heap = heap
        self.jvm_options = jvm_options
        self.log_path = log_path or os.path.join(self.workdir, "broker.log")
        self.cluster_id = uuid.uuid4().hex[:22]
        self.proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    # -- addresses ------------------------------------------------------------------------

    @property
    def bootstrap(self) -> str:
        """What clients of the PLAINTEXT listener connect to (the advertised address)."""
        return f"127.0.0.1:{self.advertised_port}"

    def bootstrap_for(self, listener: str) -> str:
        """The address of the client listener named ``listener``."""
        return f"127.0.0.1:{self.listener_ports[listener]}"

    @property
    def data_dir(self) -> str:
        return os.path.join(self.workdir, "data")

    # -- configuration ----------------------------------------------------------------------

    def server_properties(self) -> dict[str, str]:
        """The broker's configuration (before ``properties`` overrides)."""
        names = ["PLAINTEXT", "INTERNAL", *self.listener_ports]
        ports = {"PLAINTEXT": self.port, "INTERNAL": self.internal_port, **self.listener_ports}
        adv = {**ports, "PLAINTEXT": self.advertised_port}
        protocol = {"PLAINTEXT": "PLAINTEXT", "INTERNAL": "PLAINTEXT", "CONTROLLER": "PLAINTEXT",
                    **{ln.name: ln.security_protocol for ln in self.listeners}}
        p = {
            "process.roles": "broker,controller",
            "node.id": "1",
            "controller.quorum.voters": f"1@127.0.0.1:{self.controller_port}",
            "listeners": ",".join([f"{n}://127.0.0.1:{ports[n]}" for n in names]
                                  + [f"CONTROLLER://127.0.0.1:{self.controller_port}"]),
            "advertised.listeners": ",".join(f"{n}://127.0.0.1:{adv[n]}" for n in names),
            "listener.security.protocol.map": ",".join(f"{k}:{v}" for k, v in protocol.items()),
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "INTERNAL",
            "log.dirs": self.data_dir,
            "num.partitions": "1",
            "auto.create.topics.enable": "true",
            "offsets.topic.replication.factor": "1",
            "offsets.topic.num.partitions": "4",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "transaction.state.log.num.partitions": "4",
            "share.coordinator.state.topic.replication.factor": "1",
            "share.coordinator.state.topic.min.isr": "1",
            "group.initial.rebalance.delay.ms": "0",
            # A restarted (SIGKILLed) broker re-registers once its old session expired: 3 s, not 9.
            "broker.heartbeat.interval.ms": "500",
            "broker.session.timeout.ms": "3000",
            # Timed-out transactions are aborted within a second of their timeout (default: every 10 s).
            "transaction.abort.timed.out.transaction.cleanup.interval.ms": "1000",
            "num.network.threads": "2",
            "num.io.threads": "4",
            "log.segment.bytes": str(256 * 1024 * 1024),
        }
        mechanisms = sorted({m for ln in self.listeners for m in ln.mechanisms})
        for ln in self.listeners:
            key = ln.name.lower()
            if ln.mechanisms:
                p[f"listener.name.{key}.sasl.enabled.mechanisms"] = ",".join(ln.mechanisms)
            for k, v in ln.properties.items():
                p[k if k.startswith("listener.name.") else f"listener.name.{key}.{k}"] = v
        if mechanisms:
            p["sasl.enabled.mechanisms"] = ",".join(mechanisms)
        return {**p, **self.properties}

    def _write_config(self) -> str:
        os.makedirs(self.workdir, exist_ok=True)
        path = os.path.join(self.workdir, "server.properties")
        with open(path, "w") as f:
            for k, v in self.server_properties().items():
                f.write(f"{k}={v}\n")
        with open(os.path.join(self.workdir, "log4j2.properties"), "w") as f:
            f.write(_LOG4J.format(level=os.environ.get("RKS_KAFKA_LOG_LEVEL", "INFO")))
        return path

    def _java_cmd(self, main: str, *args: str, heap: str = "") -> list[str]:
        try:
            jvm = java()
        except MavenError as exc:
            raise BrokerSetupError(str(exc)) from exc
        # The default flags map the classes an earlier broker loaded, when `make jars` archived them (devtools/cds.py)
        opts = list(self.jvm_options) if self.jvm_options is not None else [
            "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Xss1m", *self._archive_options(jvm)]
        sysprops = {"log4j2.configurationFile": os.path.join(self.workdir, "log4j2.properties"),
                    "kafka.logs.dir": self.workdir, **self.system_properties}
        return [jvm, f"-Xmx{heap or '256m'}", *opts, *(f"-D{k}={v}" for k, v in sysprops.items()),
                "-cp", os.path.join(kafka_jars(), "*"), main, *args]

    @staticmethod
    def _archive_options(jvm: str) -> tuple[str, ...]:
        try:
            return use_options(kafka_archive(jvm, kafka_jars()))
        except OSError:  # an unreadable cache: the broker starts without the archive
            return ()

    def _format(self, config: str) -> None:
        if os.path.exists(os.path.join(self.data_dir, "meta.properties")):
            return
        args = ["format", "-t", self.cluster_id, "-c", config, "--ignore-formatted"]
        for name, password in self.scram_users.items():
            args += ["--add-scram", f"SCRAM-SHA-512=[name={name},password={password}]"]
        try:
            proc = subprocess.run(self._java_cmd("kafka.tools.StorageTool", *args), capture_output=True, text=True,
                                  timeout=120)
        except subprocess.TimeoutExpired:  # its text would hold the command line, SCRAM passwords included
            raise BrokerSetupError("formatting the broker's storage did not end within 120 s") from None
        if proc.returncode != 0:
            out = proc.stdout + proc.stderr
            for secret in self.scram_users.values():
                out = out.replace(secret, "***")
            raise BrokerSetupError(f"formatting the broker's storage failed (rc={proc.returncode}): {out[-2000:]}")

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self, timeout_s: float = 60.0) -> "KafkaBroker":
        """Start the broker (formatting its storage the first time) and wait until it serves.

        Raises:
            BrokerSetupError: Java, Maven or the jars are missing, or it exited or did not serve within ``timeout_s``.
        """
        # Step 1: Java and the jars (``_java_cmd``); Step 2: the configuration, written on every start
        config = self._write_config()
        # Step 3: the storage, formatted once
        self._format(config)
        # Step 4: the broker, then wait for it
        if self._log is None:
            self._log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(self._java_cmd("kafka.Kafka", config, heap=self.heap), stdout=self._log,
                                     stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
        self.wait_ready(timeout_s)
        return self

    def wait_ready(self, timeout_s: float = 60.0) -> None:
        """Wait until a client of the internal listener gets metadata naming this broker.

        Raises:
            BrokerSetupError: the broker exited, or did not serve within ``timeout_s``.
        """
        from confluent_kafka.admin import AdminClient

        end = time.monotonic() + timeout_s
        admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{self.internal_port}", "log_level": 0})
        while time.monotonic() < end:
            if self.proc is not None and self.proc.poll() is not None:
                raise BrokerSetupError(f"the Kafka broker exited with code {self.proc.returncode}; its log: "
                                       f"{self.log_path}\n{self.log_tail()}")
            try:
                if admin.list_topics(timeout=1.0).brokers:
                    return
            except Exception:  # noqa: BLE001 - not serving yet
                time.sleep(0.1)
        tail = self.log_tail()  # before stop(), which removes a workdir the broker made itself
        self.stop()
        raise BrokerSetupError(f"the Kafka broker did not serve within {timeout_s}s; its log: {self.log_path}\n"
                               f"{tail}")

    def log_tail(self, n: int = 4000) -> str:
        try:
            with open(self.log_path, "rb") as f:
                f.seek(0, os.SEEK_END)
                f.seek(max(0, f.tell() - n))
                return f.read().decode(errors="replace")
        except OSError:
            return ""

    def pause(self) -> None:
        """SIGSTOP the broker: it stops answering but keeps its connections."""
        assert self.proc is not None and self.proc.poll() is None, "broker not running"
        self.proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        if self.proc is not None and self.proc.poll() is None:  # never a reaped (perhaps reused) pid
            self.proc.send_signal(signal.SIGCONT)

    def kill(self) -> float:
        """SIGKILL the broker (no shutdown of any kind) and reap it; returns when the signal was sent."""
        t = time.time()
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(30)
        return t

    def restart(self, timeout_s: float = 60.0) -> "KafkaBroker":
        """SIGKILL the broker if it runs, then start it again on the same log and ports."""
        self.kill()
        return self.start(timeout_s)

    def stop(self) -> None:
        """Stop the broker (SIGTERM, then SIGKILL after 10 s) and remove a workdir it made itself."""
        stop_process(self.proc, timeout_s=10.0)
        if self._log is not None:
            self._log.close()
            self._log = None
        if self._own_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> "KafkaBroker":
        return self.start()

    def __exit__(self, *exc: object) -> None:  # noqa: D105
        self.stop()
