"""Scenarios 20, 21: a three-node cluster's failovers, Spark's Kafka source -> ``foreachBatch(sink)``, both guarantees.

Every other scenario has one broker. Here the module's cluster
(tests/faults/cluster.py: three KRaft nodes, ``replication.factor=3``,
``min.insync.replicas=2``, the transaction log alike) has the faults of a
production one: a partition's leader dies and another replica is elected,
a transactional id's coordinator dies and its ``__transaction_state``
partition moves. Each fault is aimed at what the cluster says at that
moment (the leader of the partition, the coordinator of the lane's
transaction, asked of the brokers) while a task is parked at a named point
(tests/hooks.py), and the premise is asserted: that node held that role,
it died (or stopped), the role moved, and the records the fault was meant
to catch were caught. A fault that misses (the lane's transaction not open
yet; no record of the task crossing the election) is arranged again at a
later batch, a bounded number of times.

20, at-least-once: an output partition's leader SIGKILLed while a task has
records to send there, restarted on its log; another node SIGSTOPped 10 s
(a leader too) while a task sends; a Python worker SIGKILLed mid-task. A
consumer that drops duplicates by ``rks-id`` keeps every input record once.

21, exactly-once: the coordinator of a lane's transaction SIGKILLed while
that transaction is open (the lane parked after its first chunk), restarted
once a later batch has begun; then, in a later batch, the leader of a
partition holding an open transaction's records SIGKILLed just before its
commit. A ``read_committed`` reader gets every input record once.

The query is never restarted in either: it must survive.
"""

from __future__ import annotations

import os
import time
import uuid
from collections import defaultdict
from typing import Any, Callable, TypeVar

import pytest

from spark_recoverable_sink import RecoverableKafkaSink
from spark_recoverable_sink.delivery.exactly_once.names import lane_id

from ..kafka_helpers import TopicContents, produce_all, read_topic
from .cluster import KafkaCluster
from .conftest import sink_name
from .kafka_log import Fates, aborted_index, batches, omitting_entry
from .procs import alive, kill9, started, wait_dead
from .readback import LiveReader, keys_of, tally
from .slots import explain_missing
from .streams import BatchProbe, task_reports
from .wire import TransactionState

pytestmark = pytest.mark.spark

IN_PARTS, OUT_PARTS = 4, 3
#: Rows per Arrow batch of the session (tests/conftest.py: spark.sql.execution.arrow.maxRecordsPerBatch): a task
#: parked with ``rows__le=CHUNK`` has produced its first chunk and has more to produce.
CHUNK = 2000
PER_TRIGGER = 16_000  # 4 input partitions: tasks of about 4,000 rows, two chunks or more
#: How many batches a fault is tried in before the scenario gives up on arranging it (each try a batch later).
TRIES = 2
#: Records: batch 0, which no fault touches, and batches enough for every fault's tries (20: a leader kill and a
#: pause tried up to TRIES times, then a worker kill; 21: a coordinator kill and a leader kill, up to TRIES times).
N_20, N_21 = 7 * PER_TRIGGER, 6 * PER_TRIGGER
PAUSE_S = 10.0  # longer than broker.session.timeout.ms (3 s): the paused node is fenced and loses its leaderships
T = TypeVar("T")


def _until(what: str, timeout_s: float, probe: Callable[[], T | None], every_s: float = 0.2) -> T:
    """The first truthy value of ``probe()`` within ``timeout_s``.

    Raises:
        AssertionError: none came (``what`` names it).
    """
    end = time.monotonic() + timeout_s
    while True:
        got = probe()
        if got:
            return got
        if time.monotonic() > end:
            raise AssertionError(f"{what}: not within {timeout_s:.0f} s")
        time.sleep(every_s)


def _source(cluster: KafkaCluster, n: int) -> str:
    """A topic of ``n`` records, record ``i`` in partition ``i % IN_PARTS``, key ``i``, value ``v<i>``."""
    name = f"cl-in-{uuid.uuid4().hex[:8]}"
    cluster.create_topic(name, IN_PARTS)
    produce_all(cluster.bootstrap, name, ({"key": b"%d" % i, "value": b"v%d" % i, "partition": i % IN_PARTS}
                                          for i in range(n)))
    return name


def _start(spark: Any, cluster: KafkaCluster, source: str, probe: BatchProbe, checkpoint: str) -> Any:
    """Spark's Kafka source (``maxOffsetsPerTrigger``, ``availableNow``) -> key and ``<partition>:<offset>`` -> sink."""
    df = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", cluster.bootstrap)
          .option("subscribe", source).option("startingOffsets", "earliest")
          .option("maxOffsetsPerTrigger", PER_TRIGGER).load()
          .selectExpr("key", "cast(concat(cast(partition as string), ':', cast(offset as string)) as binary) "
                             "as value"))
    return (df.writeStream.foreachBatch(probe).option("checkpointLocation", checkpoint)
            .trigger(availableNow=True).start())


def _batch_records_from(bootstrap: str, topic: str, partition: int, offset: int, batch: int) -> int:
    """How many records of sink batch ``batch`` (by ``rks-id``) ``topic``'s ``partition`` holds at ``offset`` or later
    (read_uncommitted, up to its end now)."""
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"probe-{uuid.uuid4().hex[:6]}",
                  "enable.auto.commit": False, "enable.partition.eof": True})
    try:
        c.assign([TopicPartition(topic, partition, offset)])
        n = 0
        end = time.monotonic() + 30
        while time.monotonic() < end:
            for m in c.consume(10000, 0.5):
                if m.error() is not None:
                    if m.error().code() == KafkaError._PARTITION_EOF:
                        return n
                    raise AssertionError(f"{topic}[{partition}]: {m.error()}")
                rid = dict(m.headers() or []).get("rks-id")
                if rid is not None and int.from_bytes(rid[9:13], "big") == batch:  # the id's batch (ids.py)
                    n += 1
        raise AssertionError(f"{topic}[{partition}] not read to its end from offset {offset} within 30 s")
    finally:
        c.close()


def _wait_batch_ended(probe: BatchProbe, batch: int, timeout_s: float = 240.0) -> None:
    _until(f"batch {batch} ended (batches ended: {sorted(probe.ended)}, errors: {probe.errors})", timeout_s,
           lambda: batch in probe.ended)


def _finish(q: Any, probe: BatchProbe, timeout_s: float = 300.0) -> None:
    """The query ends by itself (``availableNow``) and did not fail: it survived every fault."""
    ended = q.awaitTermination(timeout_s)
    assert ended, f"the query did not end within {timeout_s:.0f} s (batches ended: {sorted(probe.ended)})"
    assert q.exception() is None, f"the query failed: {q.exception()}"


def test_21_cluster_at_least_once_leader_killed_node_paused_worker_killed(spark, cluster, tmp_path, hooks,
                                                                          scenario):
    """Three-node cluster, at-least-once: an output partition's leader SIGKILLed and restarted, another node
    SIGSTOPped 10 s, a Python worker SIGKILLed; records de-duplicated on rks-id."""
    scenario.scenario = "21_cluster_at_least_once"
    scenario.title = ("Three-node cluster, at-least-once: a partition leader killed, a node paused, a worker killed "
                      "(Kafka source)")
    scenario.fault = ("3 KRaft nodes, RF 3, min.insync.replicas 2; tasks parked at task.mid_task after their first "
                      "chunk: kill -9 of an output partition's leader (restarted on its log once another replica "
                      f"leads), SIGSTOP {PAUSE_S:.0f} s of another node leading an output partition, kill -9 of a "
                      "Python worker")
    source = _source(cluster, N_20)
    out = f"cl-out-{uuid.uuid4().hex[:8]}"
    cluster.create_topic(out, OUT_PARTS)
    wal, name = str(tmp_path / "wal"), sink_name("c20")
    sink = RecoverableKafkaSink(name, {"bootstrap.servers": cluster.bootstrap}, topic=out, wal_dir=wal)
    probe = BatchProbe(sink)
    reader = LiveReader(cluster.bootstrap, out).start()
    figures = scenario.figures  # filled as the faults land: a failed run's row says how far it came
    figures.update(leader_kill=[], pause=[], worker_kill={})
    q = None
    try:
        parked = hooks.park("task.mid_task", batch__ge=1, rows__le=CHUNK)
        q = _start(spark, cluster, source, probe, str(tmp_path / "chk"))

        # Fault 1: the leader of an output partition the parked task is sending to, killed; restarted on its log
        fault_at = None
        for attempt in range(1, TRIES + 1):
            at = parked.wait(240)
            batch = at["coords"]["batch"]
            parked_next = hooks.park("task.mid_task", batch__ge=batch + 1, rows__le=CHUNK)  # holds the query
            part = attempt - 1
            victim = cluster.leaders(out)[part]
            assert victim > 0, f"premise: output partition {part} has a leader before the kill"
            before = cluster.end_offsets(out)[part]
            killed_at = cluster.node(victim).kill()
            fault_at = fault_at or killed_at
            parked.release()
            assert cluster.node(victim).proc.returncode == -9, "premise: the leader died of the SIGKILL"
            elected = _until(f"a new leader of {out}[{part}] after node {victim} died", 60,
                             lambda: (lambda n: n if n not in (victim, -1) else None)(cluster.leaders(out)[part]))
            cluster.restart(victim)
            synced_s = cluster.wait_in_sync(timeout_s=120)
            _wait_batch_ended(probe, batch)
            landed = _batch_records_from(cluster.bootstrap, out, part, before, batch)
            figures["leader_kill"].append({"batch": batch, "partition": part, "killed": victim, "elected": elected,
                                           "task": at["coords"], "batch_records_after_kill": landed,
                                           "back_in_sync_s": round(synced_s, 1)})
            parked = parked_next
            if landed:
                break
        else:
            raise AssertionError(f"fault 1 missed {TRIES} times (no record of the batch crossed the election): "
                                 f"{figures['leader_kill']}")

        # Fault 2: another node, leading an output partition, SIGSTOPped while a parked task sends
        for attempt in range(1, TRIES + 1):
            at = parked.wait(240)
            batch = at["coords"]["batch"]
            parked_next = hooks.park("task.mid_task", batch__ge=batch + 1, rows__le=CHUNK)
            leaders = cluster.leaders(out)
            part, node_id = next(((p, n) for p, n in sorted(leaders.items()) if n not in (victim, -1)), (-1, -1))
            assert node_id > 0, f"premise: a node other than {victim} leads a partition of {out}: {leaders}"
            before = cluster.end_offsets(out)[part]
            node = cluster.node(node_id)
            node.pause()
            assert node.stopped, f"premise: node {node_id} is stopped"
            parked.release()
            time.sleep(PAUSE_S)  # the outage's length, not a synchronisation
            assert node.stopped, f"premise: node {node_id} stayed stopped {PAUSE_S:.0f} s"
            moved = cluster.leaders(out)[part]
            node.resume()
            _wait_batch_ended(probe, batch)
            landed = _batch_records_from(cluster.bootstrap, out, part, before, batch)
            figures["pause"].append({"batch": batch, "partition": part, "paused": node_id,
                                     "leader_at_resume": moved, "task": at["coords"],
                                     "batch_records_after_pause": landed})
            parked = parked_next
            if landed:
                break
        else:
            raise AssertionError(f"fault 2 missed {TRIES} times (no record of the batch sent during the pause): "
                                 f"{figures['pause']}")

        # Fault 3: a Python worker killed mid-task (Spark re-runs its task)
        at = parked.wait(240)
        pid = at["pid"]
        since = started(pid)
        kill9(pid)
        parked.release()  # nobody is left to read it: the process is gone
        assert wait_dead(pid, 30) and not alive(pid, since), f"premise: worker {pid} died"
        figures["worker_kill"] = {"pid": pid, "task": at["coords"]}
        _finish(q, probe)
        full_at = reader.wait_for(keys_of(range(N_20)), 120)
        got = read_topic(cluster.bootstrap, out, expected=max(reader.records, N_20), idle_s=3.0)
    finally:
        reader.stop()
        if q is not None and q.isActive:
            q.stop()
    t = tally(got, range(N_20))
    scenario.apply(t)
    scenario.recovery(fault_at, full_at)
    parts = task_reports(sink)
    rerun = [p for p in parts if p.spark_attempt > 0]
    scenario.figures.update(batches=len(sink.reports), tasks_rerun=len(rerun),
                            pending_at_task_end=sum(p.pending for p in parts), per_kafka_partition=t.per_partition,
                            reader_errors=t.errors[:5])
    assert rerun, "premise: the killed worker's task was re-run by Spark"
    if t.lost:  # records in a WAL (pending: within the guarantee, drained as a bounded job must) or nowhere (a loss)
        why = explain_missing(t, wal, name, parts)
        scenario.notes.append(why[:1500])
        assert why.startswith("PENDING"), why
        drained = sink.drain(spark, timeout_s=60)
        scenario.figures.update(drain_replayed=drained.replayed, drain_pending=drained.pending)
        got = read_topic(cluster.bootstrap, out, expected=N_20, idle_s=3.0)
        t = tally(got, range(N_20))
        scenario.apply(t)
    assert t.lost == 0, f"lost {t.lost} of {N_20} input records, e.g. {t.lost_sample}"
    # De-duplicated on rks-id (what the README tells a consumer to do): every input record exactly once
    keys_by_id: dict[str, set[bytes]] = defaultdict(set)
    for r in got.records:
        assert r.rid is not None, f"a record without an id: {r}"
        keys_by_id[r.rid].add(r.key or b"")
    shared = {rid: sorted(k) for rid, k in keys_by_id.items() if len(k) > 1}
    assert not shared, f"{len(shared)} id(s) carried by different input records, e.g. {list(shared.items())[:3]}"
    kept = [next(iter(k)) for k in keys_by_id.values()]
    scenario.distinct_ids = len(keys_by_id)
    assert len(kept) == len(set(kept)), f"{len(kept) - len(set(kept))} input records under two ids"
    missing = N_20 - len(set(kept) & set(keys_of(range(N_20))))
    assert not missing, f"{missing} input records missing after de-duplication on rks-id"


def _open_transaction(cluster: KafkaCluster, txn: str, topic: str,
                      timeout_s: float = 20.0) -> tuple[int, TransactionState]:
    """``(coordinator, state)`` of ``txn`` once its coordinator holds it open (``Ongoing``) with partitions of
    ``topic``; the last answer otherwise (its state then says why)."""
    end = time.monotonic() + timeout_s
    while True:
        coord, st = cluster.transaction(txn)
        if (st.state == "Ongoing" and st.partitions.get(topic)) or time.monotonic() > end:
            return coord, st
        time.sleep(0.2)


def test_22_cluster_exactly_once_coordinator_and_leader_killed_in_open_transactions(spark, cluster, tmp_path,
                                                                                     hooks, scenario):
    """Three-node cluster, exactly-once: a lane's transaction coordinator SIGKILLed while its transaction is open,
    then a partition leader SIGKILLed before a commit; read_committed."""
    scenario.scenario = "22_cluster_exactly_once"
    scenario.title = ("Three-node cluster, exactly-once: a lane's transaction coordinator, then a partition leader, "
                      "killed in open transactions (Kafka source)")
    scenario.fault = ("3 KRaft nodes, RF 3, min.insync.replicas 2, transaction log RF 3 / min ISR 2; kill -9 of the "
                      "coordinator of a lane's transaction seen Ongoing (lane parked at eo.produced_chunk after its "
                      "first chunk), restarted once a later batch began; kill -9 of the leader of a partition in an "
                      "open transaction (lane parked at eo.before_commit), restarted once that batch ended; read "
                      "back read_committed")
    source = _source(cluster, N_21)
    out = f"cl-out-{uuid.uuid4().hex[:8]}"
    cluster.create_topic(out, OUT_PARTS)
    sink = RecoverableKafkaSink(sink_name("c21"), {"bootstrap.servers": cluster.bootstrap}, topic=out,
                                wal_dir=str(tmp_path / "wal"), guarantee="exactly_once", exactly_once_lanes=2,
                                settle_timeout_s=300.0)
    probe = BatchProbe(sink)
    figures = scenario.figures
    figures.update(coordinator_kill={}, leader_kill={}, missed=[])
    q = None
    try:
        parked = hooks.park("eo.produced_chunk", batch__ge=1, rows__le=CHUNK)
        q = _start(spark, cluster, source, probe, str(tmp_path / "chk"))
        run = q.id.replace("-", "")[:16]  # the sink's run in foreachBatch: the query id's first 16 hex digits

        # Fault 1: the coordinator of a lane's open transaction killed; restarted once a later batch has begun
        for _attempt in range(TRIES):
            at = parked.wait(240)
            batch, lane = at["coords"]["batch"], at["coords"]["lane"]
            txn = lane_id(sink.name, run, lane)
            coord, st = _open_transaction(cluster, txn, out)
            if st.state == "Ongoing" and st.partitions.get(out):
                break
            figures["missed"].append({"fault": "coordinator", "batch": batch, "lane": lane, "state": st.state})
            retry = hooks.park("eo.produced_chunk", batch__ge=batch + 1, rows__le=CHUNK)
            parked.release()
            parked = retry
        else:
            raise AssertionError(f"no lane's transaction seen open in {TRIES} batches: {figures['missed']}")
        log_partition, log_leader = cluster.transaction_log_leader(txn)
        assert log_leader == coord, (f"premise: the coordinator FindCoordinator names ({coord}) leads "
                                     f"__transaction_state[{log_partition}] ({log_leader})")
        after_commit = hooks.park("eo.before_commit", batch__ge=batch + 1)  # holds the query for fault 2
        fault_at = cluster.node(coord).kill()
        parked.release()
        assert cluster.node(coord).proc.returncode == -9, "premise: the coordinator died of the SIGKILL"
        moved = _until(f"a new coordinator of {txn} after node {coord} died", 60,
                       lambda: (lambda n: n if n != coord else None)(cluster.coordinator(txn)))
        at2 = after_commit.wait(240)  # a later batch began: the killed-in transaction's batch has settled
        cluster.restart(coord)
        cluster.wait_in_sync(timeout_s=120)
        figures["coordinator_kill"] = {"batch": batch, "lane": lane, "transactional_id": txn, "killed": coord,
                                       "transaction_log_partition": log_partition, "state": st.state,
                                       "partitions": {k: list(v) for k, v in st.partitions.items()},
                                       "producer": [st.producer_id, st.producer_epoch], "moved_to": moved}

        # Fault 2: the leader of a partition in a lane's open transaction killed just before the commit
        for _attempt in range(TRIES):
            batch2, lane2 = at2["coords"]["batch"], at2["coords"]["lane"]
            txn2 = lane_id(sink.name, run, lane2)
            coord2, st2 = _open_transaction(cluster, txn2, out)
            if st2.state == "Ongoing" and st2.partitions.get(out):
                break
            figures["missed"].append({"fault": "leader", "batch": batch2, "lane": lane2, "state": st2.state})
            retry = hooks.park("eo.before_commit", batch__ge=batch2 + 1)
            after_commit.release()
            after_commit = retry
            at2 = after_commit.wait(240)
        else:
            raise AssertionError(f"no lane's transaction seen open before its commit in {TRIES} batches: "
                                 f"{figures['missed']}")
        leaders = cluster.leaders(out)
        in_txn = sorted(st2.partitions[out])
        part = next((p for p in in_txn if leaders[p] != coord2), in_txn[0])  # not the coordinator, when it can be
        victim = leaders[part]
        cluster.node(victim).kill()
        after_commit.release()
        assert cluster.node(victim).proc.returncode == -9, "premise: the leader died of the SIGKILL"
        elected = _until(f"a new leader of {out}[{part}] after node {victim} died", 60,
                         lambda: (lambda n: n if n not in (victim, -1) else None)(cluster.leaders(out)[part]))
        _wait_batch_ended(probe, batch2)
        cluster.restart(victim)
        figures["leader_kill"] = {"batch": batch2, "lane": lane2, "transactional_id": txn2, "coordinator": coord2,
                                  "partition": part, "killed": victim, "elected": elected,
                                  "partitions_in_transaction": in_txn}
        _finish(q, probe)
    finally:
        if q is not None and q.isActive:
            q.stop()
    got = read_topic(cluster.bootstrap, out, expected=N_21, idle_s=3.0, isolation="read_committed")
    raw = read_topic(cluster.bootstrap, out, idle_s=2.0)
    seen = tally(got, range(N_21))  # what read_committed readers were shown
    committed, leaked = _by_fate(cluster, out, got)
    t = tally(committed, range(N_21))  # of those, the records the log holds committed: the sink's doing
    scenario.apply(seen)
    scenario.recovery(fault_at, max(probe.ended.values()))
    scenario.figures.update(batches=len(sink.reports), records_in_log=len(raw.records),
                            per_kafka_partition=seen.per_partition, reader_errors=seen.errors[:5],
                            batch_seconds={r.batch_id: round(r.seconds, 1) for r in sink.reports},
                            shown_aborted=leaked[:20])
    if leaked:
        scenario.notes.append(
            f"{len(leaked)} record(s) of aborted transactions shown to read_committed readers (the broker's fetch "
            f"path; see docs/RELIABILITY.md, scenario 22), e.g. {leaked[0]}")
    assert (t.lost, t.duplicates) == (0, 0), f"lost {t.lost}, duplicates {t.duplicates}: {t.lost_sample}"
    foreign = [(r.partition, r.offset, r.key, r.headers) for r in committed.records
               if r.key is None or not r.key.isdigit() or int(r.key) >= N_21]
    assert not foreign, f"{len(foreign)} committed record(s) that no input record made: {foreign[:5]}"


def _by_fate(cluster: KafkaCluster, topic: str, got: Any) -> tuple[Any, list[dict[str, Any]]]:
    """``got``'s records split by what the partition's log says of each: ``(the others, as TopicContents; the records
    of aborted transactions, described)``.

    A record of an aborted transaction that a read_committed reader was shown is the broker's doing: the ABORT
    marker is in the log, and the leader left the transaction out of the fetch response's aborted transactions.
    Each is named with the replicas whose transaction index would leave it out (tests/faults/kafka_log.py).
    """
    leaders = cluster.leaders(topic)
    dirs = {(n.node_id, p): os.path.join(n.data_dir, f"{topic}-{p}") for n in cluster.nodes for p in leaders}
    fates = {p: Fates(batches(dirs[(leaders[p], p)])) for p in leaders}
    indexes = {key: aborted_index(d) for key, d in dirs.items()}
    kept, leaked = TopicContents(errors=list(got.errors)), []
    for r in got.records:
        fate, marker, batch = fates[r.partition].fate(r.offset)
        if fate != "ABORT" or batch is None:
            kept.records.append(r)
            continue
        first = fates[r.partition].transaction_first(batch)
        omitted_by = {}
        for (node, p), entries in indexes.items():
            e = omitting_entry(entries, batch.producer_id, first) if p == r.partition else None
            if e is not None:
                omitted_by[node] = f"entry (producer {e.producer_id}, {e.first}-{e.last}) last stable {e.last_stable}"
        leaked.append({"partition": r.partition, "offset": r.offset, "key": (r.key or b"").decode(errors="replace"),
                       "rks_id": r.rid, "producer": [batch.producer_id, batch.producer_epoch],
                       "transaction": [first, marker], "index_leaves_it_out_on": omitted_by,
                       "leader": leaders[r.partition]})
    return kept, leaked
