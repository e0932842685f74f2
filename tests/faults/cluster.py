"""A three-node Apache Kafka cluster for the fault suite: leaders and transaction coordinators to find and hurt.

Every other test runs one broker; production clusters run three or more
(``replication.factor=3``, ``min.insync.replicas=2``), and their faults are
leader elections and a transaction coordinator that moves, which one broker
cannot have. :class:`KafkaCluster` starts three KRaft nodes of the pinned
release from the same jars as :class:`devtools.kafka_broker.KafkaBroker`
(each node one of those: its ``server.properties``, its storage formatted
once, its JVM with the class-data archive and a small heap), all of them
``process.roles=broker,controller`` and voters of one quorum, on loopback
ports of the worker's range, started at once.

What a scenario asks of it:

* :meth:`KafkaCluster.leaders` -- each partition's leader (Metadata asked of
  every live node, the freshest leader epoch kept), :meth:`KafkaCluster.end_offsets`;
* :meth:`KafkaCluster.coordinator` -- the node coordinating a transactional id
  (FindCoordinator, :mod:`.wire`), and :meth:`KafkaCluster.transaction` -- the
  transaction as that coordinator holds it (DescribeTransactions: open or
  not, its partitions); :func:`transaction_partition` -- the
  ``__transaction_state`` partition the id hashes to, whose leader the
  coordinator must be;
* ``node.kill()`` (SIGKILL, reaped), ``node.pause()`` / ``node.resume()``
  (SIGSTOP / SIGCONT), :meth:`KafkaCluster.restart` (on its log and ports);
* :meth:`KafkaCluster.wait_in_sync` -- every partition's replicas all in
  sync and its leader answering a ListOffsets request (KAFKA-15591), before a
  timed or faulted part; :meth:`KafkaCluster.heal` -- every node running and
  in sync again, what each scenario starts from.

Every node runs ``CLUSTER_PROPERTIES`` over devtools.kafka_broker's single-node
settings (a 3 s broker session: a dead or stopped node is fenced and loses
its leaderships 3 s after its last heartbeat) and a heap of ``NODE_HEAP``; the
three start in about 9-15 s on this project's 2-core machine.

Test code only: nothing of the sink imports it.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import uuid
from typing import Any, Iterable, Mapping

from devtools.kafka_broker import BrokerSetupError, KafkaBroker
from devtools.topics import wait_for_leaders

from .procs import kill9
from .wire import (ERRORS, KafkaWireError, PartitionState, TransactionState, describe_transaction, find_coordinator,
                   latest_offsets, metadata)

__all__ = ["ClusterNode", "KafkaCluster", "transaction_partition", "java_string_hash", "CLUSTER_PROPERTIES"]

log = logging.getLogger(__name__)

#: What every node runs with, beyond devtools.kafka_broker's single-node defaults: a production cluster's
#: replication (3 replicas, 2 in sync for an acks=all write, the internal topics alike) at test sizes.
CLUSTER_PROPERTIES: dict[str, str] = {
    "default.replication.factor": "3",
    "min.insync.replicas": "2",
    "offsets.topic.replication.factor": "3",
    "offsets.topic.num.partitions": "3",
    "transaction.state.log.replication.factor": "3",
    "transaction.state.log.min.isr": "2",
    "transaction.state.log.num.partitions": "6",  # two per node: every node coordinates some transactional ids
    "share.coordinator.state.topic.replication.factor": "3",
    "share.coordinator.state.topic.min.isr": "2",
    "unclean.leader.election.enable": "false",
    # Leaders move only when a scenario hurts a node: no preferred-leader election 300 s after a start moves one
    # between a scenario's look-up and its fault.
    "auto.leader.rebalance.enable": "false",
    "num.io.threads": "2",
    "background.threads": "4",
}
#: Each node's heap: three of them beside Spark on a 2-core test machine.
NODE_HEAP = "320m"


def java_string_hash(s: str) -> int:
    """Java's ``String.hashCode`` of ``s`` (over its UTF-16 code units, 32-bit wrapping)."""
    h = 0
    raw = s.encode("utf-16-be")
    for i in range(0, len(raw), 2):
        h = (31 * h + ((raw[i] << 8) | raw[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def transaction_partition(transactional_id: str, partitions: int) -> int:
    """The ``__transaction_state`` partition of ``transactional_id``, as ``TransactionStateManager.partitionFor``.

    ``Utils.abs(transactionalId.hashCode) % partitions`` (``Utils.abs`` maps
    ``Integer.MIN_VALUE`` to 0); its leader is the id's coordinator.
    """
    h = java_string_hash(transactional_id)
    return (0 if h == -(1 << 31) else abs(h)) % partitions


class ClusterNode(KafkaBroker):
    """One node of a :class:`KafkaCluster`: a KRaft broker and controller, ``node.id`` ``node_id``."""

    def __init__(self, workdir: str, node_id: int, heap: str) -> None:
        super().__init__(workdir, heap=heap)
        self.node_id = node_id
        self.kills = 0
        self.pauses = 0

    def kill(self) -> float:
        """SIGKILL the node from outside and reap it; returns when the signal was sent (0.0: it was not running)."""
        if self.proc is None or self.proc.poll() is not None:
            return 0.0
        t = kill9(self.proc.pid)
        self.proc.wait(30)
        self.kills += 1
        log.info("cluster.kill node=%d pid=%d rc=%s", self.node_id, self.proc.pid, self.proc.returncode)
        return t

    def pause(self, timeout_s: float = 10.0) -> None:
        """SIGSTOP the node and wait until the kernel has stopped it (a signal is delivered asynchronously).

        Raises:
            AssertionError: it is not running, or not stopped within ``timeout_s``.
        """
        super().pause()
        end = time.monotonic() + timeout_s
        while not self.stopped:
            if time.monotonic() > end:
                raise AssertionError(f"node {self.node_id} not stopped {timeout_s:.0f} s after SIGSTOP")
            time.sleep(0.01)
        self.pauses += 1
        log.info("cluster.pause node=%d pid=%d", self.node_id, self.proc.pid if self.proc else -1)

    def resume(self) -> None:
        super().resume()
        log.info("cluster.resume node=%d", self.node_id)

    @property
    def running(self) -> bool:
        """Its JVM runs (paused or not)."""
        return self.proc is not None and self.proc.poll() is None

    @property
    def stopped(self) -> bool:
        """Its JVM is stopped by a signal (``T`` in ``/proc/<pid>/stat``)."""
        if not self.running:
            return False
        assert self.proc is not None
        try:
            with open(f"/proc/{self.proc.pid}/stat") as f:
                return f.read().rsplit(")", 1)[1].split()[0] == "T"
        except OSError:
            return False

    @property
    def host_port(self) -> tuple[str, int]:
        return "127.0.0.1", self.port


class KafkaCluster:
    """Three KRaft nodes (broker and controller each) on loopback ports, their logs under ``workdir``.

    ``properties`` override :data:`CLUSTER_PROPERTIES` (and the single-node
    defaults under them) on every node.
    """

    def __init__(self, workdir: str, size: int = 3, heap: str = NODE_HEAP,
                 properties: Mapping[str, str] | None = None) -> None:
        self.workdir = workdir
        self.nodes = [ClusterNode(os.path.join(workdir, f"node-{i}"), i, heap) for i in range(1, size + 1)]
        voters = ",".join(f"{n.node_id}@127.0.0.1:{n.controller_port}" for n in self.nodes)
        cluster_id = uuid.uuid4().hex[:22]
        for n in self.nodes:
            n.cluster_id = cluster_id
            n.properties.update({**CLUSTER_PROPERTIES, **(properties or {}), "node.id": str(n.node_id),
                                 "controller.quorum.voters": voters})
        self._admin: Any = None

    # -- addresses and lifecycle ---------------------------------------------------------------------

    @property
    def bootstrap(self) -> str:
        """Every node's client listener: what the sink, Spark's Kafka source and the readers are given."""
        return ",".join(n.bootstrap for n in self.nodes)

    def node(self, node_id: int) -> ClusterNode:
        """The node whose ``node.id`` is ``node_id``.

        Raises:
            KeyError: no such node.
        """
        for n in self.nodes:
            if n.node_id == node_id:
                return n
        raise KeyError(f"no node {node_id} in the cluster (nodes {[n.node_id for n in self.nodes]})")

    def start(self, timeout_s: float = 120.0) -> "KafkaCluster":
        """Format and start every node at once (one waits for the others: a quorum needs two voters), then wait
        until the cluster's metadata names every node.

        Raises:
            BrokerSetupError: a node did not start (its log's tail in the message) or the cluster did not form
                within ``timeout_s``.
        """
        t0 = time.monotonic()
        self._parallel([n.start for n in self.nodes], timeout_s)
        self._wait_registered(timeout_s - (time.monotonic() - t0))
        log.info("cluster.start nodes=%d seconds=%.1f bootstrap=%s", len(self.nodes), time.monotonic() - t0,
                 self.bootstrap)
        return self

    def _parallel(self, starts: list[Any], timeout_s: float) -> None:
        errors: list[BaseException] = []

        def run(start: Any) -> None:
            try:
                start(timeout_s)
            except BaseException as exc:  # noqa: BLE001 - re-raised below, in the caller's thread
                errors.append(exc)

        threads = [threading.Thread(target=run, args=(s,), name="cluster-start", daemon=True) for s in starts]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout_s + 30)
        if errors or any(t.is_alive() for t in threads):
            self.stop()
            raise BrokerSetupError(f"the cluster did not start: {errors[0] if errors else 'a start hung'}")

    def _wait_registered(self, timeout_s: float) -> None:
        end = time.monotonic() + max(1.0, timeout_s)
        want = {n.node_id for n in self.nodes}
        seen: set[int] = set()
        while time.monotonic() < end:
            seen = set(self.admin().list_topics(timeout=5).brokers)
            if seen >= want:
                return
            time.sleep(0.2)
        raise BrokerSetupError(f"the cluster's metadata names nodes {sorted(seen)}, not {sorted(want)}, "
                               f"after {timeout_s:.0f} s")

    def restart(self, node_id: int, timeout_s: float = 90.0) -> float:
        """Start a killed node again on its log and ports, wait until it serves; returns when it served.

        Raises:
            BrokerSetupError: it did not serve within ``timeout_s`` (its log's tail in the message).
        """
        n = self.node(node_id)
        n.start(timeout_s)
        log.info("cluster.restart node=%d pid=%d", node_id, n.proc.pid if n.proc else -1)
        return time.time()

    def heal(self, timeout_s: float = 90.0) -> None:
        """Resume a paused node, start a killed one, and wait until every partition is in sync: what a scenario
        starts from.

        Raises:
            BrokerSetupError: a node did not start again.
            AssertionError: not in sync within ``timeout_s``.
        """
        for n in self.nodes:
            if n.stopped:
                n.resume()
            if not n.running:
                self.restart(n.node_id, timeout_s)
        self.wait_in_sync(timeout_s=timeout_s)

    def stop(self) -> None:
        """SIGKILL every node at once, then close its log: nothing of the cluster is read after a test, and a
        node's controlled shutdown, once the others are gone, waits for a quorum until its 10 s SIGTERM bound."""
        for n in self.nodes:
            n.resume()
            n.kill()
        for n in self.nodes:
            n.stop()

    def __enter__(self) -> "KafkaCluster":
        return self.start()

    def __exit__(self, *exc: object) -> None:  # noqa: D105
        self.stop()

    # -- what the cluster says ------------------------------------------------------------------------

    def admin(self) -> Any:
        """One AdminClient on every node's client listener (it finds a live one)."""
        if self._admin is None:
            from confluent_kafka.admin import AdminClient

            self._admin = AdminClient({"bootstrap.servers": self.bootstrap, "log_level": 0})
        return self._admin

    def describe(self, topic: str, timeout_s: float = 15.0) -> list[PartitionState]:
        """The partitions of ``topic`` (``id``, ``leader``, ``leader_epoch``, ``replicas``, ``isrs``), by id: of each,
        the freshest view (highest leader epoch) among the nodes that run and are not stopped.

        Asked of each live node over a connection of its own (:func:`.wire.metadata`): a librdkafka client sends its
        metadata request to a node of its choosing, and one SIGSTOPped holds it until it times out.

        Raises:
            AssertionError: no live node answered with the topic's partitions within ``timeout_s``.
        """
        end = time.monotonic() + timeout_s
        last = ""
        while True:
            best: dict[int, PartitionState] = {}
            for n in self._live():
                try:
                    parts = metadata(*n.host_port, [topic], timeout_s=2.0).get(topic, [])
                except KafkaWireError as exc:  # a node just killed or restarting: the others answer
                    last = str(exc)
                    continue
                for p in parts:
                    if p.id not in best or p.leader_epoch > best[p.id].leader_epoch:
                        best[p.id] = p
            if best:
                return [best[i] for i in sorted(best)]
            if time.monotonic() > end:
                raise AssertionError(f"no metadata of topic={topic} from a live node within {timeout_s:.0f} s: {last}")
            time.sleep(0.2)

    def leaders(self, topic: str) -> dict[int, int]:
        """Partition -> the node id the cluster's metadata names its leader (-1: none)."""
        return {p.id: p.leader for p in self.describe(topic)}

    def end_offsets(self, topic: str, timeout_s: float = 30.0) -> dict[int, int]:
        """Partition -> its high watermark (the offset its next record gets, once replicated), asked of its leader.

        Asked again (the leaders looked up again) while a node is not the partition's leader any more or does not
        answer.

        Raises:
            AssertionError: some partition's leader gave no answer within ``timeout_s`` (its last error named).
        """
        end = time.monotonic() + timeout_s
        got: dict[int, int] = {}
        last = ""
        while True:
            by_leader: dict[int, list[int]] = {}
            for p in self.describe(topic, timeout_s):
                if p.id not in got:
                    by_leader.setdefault(p.leader, []).append(p.id)
            for leader, parts in by_leader.items():
                if leader < 0:
                    last = f"{topic} partitions {parts}: no leader"
                    continue
                try:
                    answers = latest_offsets(*self.node(leader).host_port, topic, parts)
                except KafkaWireError as exc:
                    last = str(exc)
                    continue
                for p, (code, offset) in answers.items():
                    if code == 0:
                        got[p] = offset
                    else:
                        last = f"{topic}[{p}] node={leader} error={ERRORS.get(code, code)}"
            if not any(p.id not in got for p in self.describe(topic, timeout_s)):
                return got
            if time.monotonic() > end:
                raise AssertionError(f"no end offset of every partition of {topic} within {timeout_s:.0f} s: {last}")
            time.sleep(0.2)

    def coordinator(self, transactional_id: str, timeout_s: float = 30.0) -> int:
        """The node coordinating ``transactional_id``, as a live node answers FindCoordinator.

        Raises:
            AssertionError: no live node named one within ``timeout_s`` (the last answer or error in the message).
        """
        end = time.monotonic() + timeout_s
        last = ""
        while True:
            for n in self._live():
                try:
                    c = find_coordinator(*n.host_port, transactional_id)
                except KafkaWireError as exc:
                    last = str(exc)
                    continue
                if c.error_code == 0 and c.node_id >= 0:
                    return c.node_id
                last = f"node={n.node_id} error={c.error} message={c.error_message}"
            if time.monotonic() > end:
                raise AssertionError(f"no coordinator for transactional_id={transactional_id} within "
                                     f"{timeout_s:.0f} s: {last}")
            time.sleep(0.2)

    def transaction(self, transactional_id: str, timeout_s: float = 30.0) -> tuple[int, TransactionState]:
        """``(coordinator, state)``: the transaction of ``transactional_id`` as its coordinator holds it.

        Raises:
            AssertionError: no coordinator answered DescribeTransactions within ``timeout_s``.
        """
        end = time.monotonic() + timeout_s
        last = ""
        while True:
            node = self.coordinator(transactional_id, max(1.0, end - time.monotonic()))
            try:
                st = describe_transaction(*self.node(node).host_port, transactional_id)
                if st.error_code == 0:
                    return node, st
                last = f"node={node} error={st.error}"
            except KafkaWireError as exc:
                last = str(exc)
            if time.monotonic() > end:
                raise AssertionError(f"DescribeTransactions transactional_id={transactional_id}: no answer within "
                                     f"{timeout_s:.0f} s: {last}")
            time.sleep(0.2)

    def transaction_log_leader(self, transactional_id: str) -> tuple[int, int]:
        """``(partition, leader)`` of the ``__transaction_state`` partition ``transactional_id`` hashes to."""
        parts = int(CLUSTER_PROPERTIES["transaction.state.log.num.partitions"])
        p = transaction_partition(transactional_id, parts)
        return p, self.leaders("__transaction_state")[p]

    def _topics(self) -> set[str] | None:
        """Every topic a live node knows, the internal ones included (None: no live node answered)."""
        for n in self._live():
            try:
                return set(metadata(*n.host_port, None, timeout_s=2.0))
            except KafkaWireError:
                continue
        return None

    def _live(self) -> list[ClusterNode]:
        return [n for n in self.nodes if n.running and not n.stopped]

    # -- topics -----------------------------------------------------------------------------------------

    def create_topic(self, name: str, partitions: int, config: Mapping[str, str] | None = None) -> None:
        """Create ``name`` with three replicas, and wait until every replica is in sync and every leader answers.

        Raises:
            Exception: confluent-kafka's, when the creation failed.
            AssertionError: not in sync within 60 s.
        """
        from confluent_kafka.admin import NewTopic

        for fut in self.admin().create_topics([NewTopic(name, partitions, len(self.nodes),
                                                        config=dict(config or {}))]).values():
            fut.result(30)
        self.wait_in_sync([name], 60.0)

    def wait_in_sync(self, topics: Iterable[str] | None = None, timeout_s: float = 60.0) -> float:
        """Wait until every live node's metadata shows every partition of ``topics`` (default: every topic, the
        internal ones included) with a leader and every node in its ISR, and every leader answers ListOffsets
        (KAFKA-15591); returns the seconds it took.

        Raises:
            AssertionError: some partition was not so within ``timeout_s`` (which, and its replicas, named).
        """
        t0 = time.monotonic()
        end = t0 + timeout_s
        want = {n.node_id for n in self.nodes}
        names = list(topics) if topics is not None else None
        behind: list[str] = []
        while True:
            known = self._topics() if names is None else set(names)
            current = sorted(known or ())
            behind = [] if known is not None else ["no live node answered a Metadata request"]
            for n in self._live() if current else ():  # every live node's view: none of them behind
                try:
                    views = metadata(*n.host_port, current, timeout_s=2.0)
                except KafkaWireError as exc:
                    behind.append(f"node={n.node_id}: {exc}")
                    continue
                for topic in current:
                    if topic not in views:
                        behind.append(f"node={n.node_id}: no metadata of {topic}")
                    for p in views.get(topic, []):
                        if p.leader < 0 or set(p.isrs) != want:
                            behind.append(f"node={n.node_id}: {topic}[{p.id}] leader={p.leader} isr={sorted(p.isrs)}")
            if not behind:
                break
            if time.monotonic() > end:
                raise AssertionError(f"not in sync after {timeout_s:.0f} s: {behind[:10]}")
            time.sleep(0.3)
        for topic in current:
            wait_for_leaders(self.bootstrap, topic, len(self.describe(topic)), max(5.0, end - time.monotonic()))
        took = time.monotonic() - t0
        log.info("cluster.in_sync topics=%d seconds=%.1f", len(current), took)
        return took
