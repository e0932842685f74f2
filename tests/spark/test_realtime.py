"""Tier 3: Spark's real-time mode, a Kafka source into ``foreach(sink.foreach_writer(df))`` under
``trigger(realTime="5 seconds")`` (PySpark 4.1+; 5 s is the shortest trigger Spark takes by default,
``spark.sql.streaming.realTimeMode.minBatchDuration``).

Each epoch task keeps a source partition: the session's two cores run both of
the input topic's partitions at once. What PySpark 4.2.0 did here (the tests
assert what they rely on): an epoch's rows reach the Python writer in batches
that Spark's JVM side forms (``spark.buffer.size``, 64 KiB by default, and a
pickled batch that doubles in rows), at the latest when the epoch ends; a
Python worker SIGKILLed mid-epoch fails its task, which Spark runs again
within the same epoch (the session's ``local[2,3]`` allows retries), and the
next epoch reads the partition from the last offset the epoch committed, so
the rows the killed task had written come again, in another epoch: under the
same ids, because ids name the record's topic, partition and offset, never
the epoch.
"""

from __future__ import annotations

import inspect
import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from typing import Any, Iterator

import pyarrow as pa
import pytest
from pyspark.sql.streaming.readwriter import DataStreamWriter

from spark_recoverable_sink.ids import KEY, key_hashes, scheme_for

from ..kafka_helpers import Record, create_topic, produce_all, read_topic
from ..record_ids import id_batch, id_kind

REAL_TIME = "realTime" in inspect.signature(DataStreamWriter.trigger).parameters
pytestmark = [pytest.mark.spark, pytest.mark.skipif(not REAL_TIME, reason="real-time mode needs PySpark 4.1+")]

PARTS = 2  # one long-running task per source partition: no more than the session's cores
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _start(spark: Any, bs: str, src: str, out: str, name: str, chk: str, wal: str) -> Any:
    from spark_recoverable_sink import RecoverableKafkaSink

    sink = RecoverableKafkaSink(name, {"bootstrap.servers": bs, "linger.ms": 5}, topic=out, wal_dir=wal)
    df = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", bs).option("subscribe", src)
          .option("startingOffsets", "earliest").load())
    return (df.writeStream.foreach(sink.foreach_writer(df)).outputMode("update").trigger(realTime="5 seconds")
            .option("checkpointLocation", chk).start())


def _expected_ids(name: str, run: str, inputs: list[Record]) -> dict[bytes | None, str]:
    """Each input record's id as the writer names it: KEY of (topic, partition, offset), batch 0."""
    coords = pa.RecordBatch.from_arrays([pa.array([r.topic for r in inputs]),
                                         pa.array([r.partition for r in inputs], pa.int32()),
                                         pa.array([r.offset for r in inputs], pa.int64())],
                                        names=["topic", "partition", "offset"])
    k1, k2 = key_hashes(coords)
    prefix = scheme_for(KEY, name, run, 0).prefix
    return {r.value: (prefix + int(a).to_bytes(8, "big") + int(b).to_bytes(8, "big")).hex()
            for r, a, b in zip(inputs, k1, k2)}


@pytest.fixture
def feed(broker: Any) -> Iterator[Any]:
    """Records ``v<first>``... produced to a topic at ``per_s`` in a thread while a query runs (bounded: ``n``)."""
    from confluent_kafka import Producer

    threads: list[threading.Thread] = []

    def start(topic: str, first: int, n: int, per_s: float) -> None:
        def run() -> None:
            p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
            for i in range(first, first + n):
                p.produce(topic, value=b"v%d" % i, partition=i % PARTS)
                p.poll(0)
                time.sleep(1 / per_s)
            assert p.flush(30) == 0

        t = threading.Thread(target=run, daemon=True)
        t.start()
        threads.append(t)

    yield start
    for t in threads:
        t.join(60)


def _stop(q: Any) -> None:
    if q.isActive:
        q.stop()


def test_every_record_of_a_kafka_source_arrives_under_real_time_mode_named_by_its_coordinates(spark, broker, tmp_path,
                                                                                            feed):
    bs = broker.bootstrap
    src, out = f"rt-in-{uuid.uuid4().hex[:6]}", f"rt-out-{uuid.uuid4().hex[:6]}"
    create_topic(bs, src, partitions=PARTS)
    create_topic(bs, out, partitions=PARTS)
    before, during = 2000, 1000
    produce_all(bs, src, ({"value": b"v%d" % i, "partition": i % PARTS} for i in range(before)))
    name = f"rt-{uuid.uuid4().hex[:6]}"
    q = _start(spark, bs, src, out, name, str(tmp_path / "chk"), str(tmp_path / "wal"))
    try:
        feed(src, before, during, per_s=400)  # rows that reach the query while its epochs run
        records = read_topic(bs, out, expected=before + during, timeout_s=180).records
        assert q.exception() is None, q.exception()
        run = str(q.id).replace("-", "")[:16]
    finally:
        _stop(q)
    inputs = read_topic(bs, src, expected=before + during).records
    assert len(inputs) == before + during
    want = _expected_ids(name, run, inputs)
    got = {r.value: r.rid for r in records}
    assert len(records) == before + during, "every input record once (no worker failed)"
    assert got == want, "each record named by KEY of its input's topic, partition and offset, batch 0"
    assert {id_kind(r.rid) for r in records} == {KEY} and {id_batch(r.rid) for r in records} == {0}


def test_a_python_worker_killed_mid_epoch_loses_nothing_and_its_rewritten_records_keep_their_ids(spark, broker,
                                                                                               tmp_path, hooks, feed):
    bs = broker.bootstrap
    src, out = f"rt-in-{uuid.uuid4().hex[:6]}", f"rt-out-{uuid.uuid4().hex[:6]}"
    create_topic(bs, src, partitions=PARTS)
    create_topic(bs, out, partitions=PARTS)
    before, during = 2000, 3000
    n = before + during
    produce_all(bs, src, ({"value": b"v%d" % i, "partition": i % PARTS} for i in range(before)))
    name, chk, wal = f"rt-{uuid.uuid4().hex[:6]}", str(tmp_path / "chk"), str(tmp_path / "wal")

    # A task of partition 0 parks after a group commit of an epoch that read rows (the first epoch reads few):
    # its rows are in the WAL and produced; the test SIGKILLs that worker from outside, then releases the point.
    parked = hooks.park("rt.group_commit", spark_partition=0, epoch__ge=1, rows__ge=100, timeout_s=240)
    q = _start(spark, bs, src, out, name, chk, wal)
    feed(src, before, during, per_s=200)  # every epoch reads rows
    restarts = 0
    try:
        at = parked.wait(180)
        written = at["coords"]["rows"]
        end = time.monotonic() + 60  # premise: the killed task's rows reached Kafka (they come again after the kill)
        while sum(r.partition == 0 for r in read_topic(bs, out, idle_s=0.5, timeout_s=10).records) < written:
            assert time.monotonic() < end, f"the parked task's {written} rows never reached the topic"
            time.sleep(0.5)
        os.kill(at["pid"], signal.SIGKILL)
        parked.release()
        records = read_topic(bs, out, expected=n + written, timeout_s=180).records
        if q.exception() is not None:  # what Spark did: recorded, the query restarted from its checkpoint
            restarts += 1
            q = _start(spark, bs, src, out, name, chk, wal)
            records = read_topic(bs, out, expected=n + written, timeout_s=180).records
        assert q.exception() is None, q.exception()
    finally:
        _stop(q)
    by_value: dict[bytes | None, set[str]] = {}
    for r in records:
        assert r.rid is not None
        by_value.setdefault(r.value, set()).add(r.rid)
    assert set(by_value) == {b"v%d" % i for i in range(n)}, "every input record is in the topic: nothing lost"
    assert len(records) > n, f"premise: records the killed task wrote ({written}) were written again"
    assert not [v for v, ids in by_value.items() if len(ids) > 1], "a record written twice under two ids"
    assert len({r.rid for r in records}) == n, "de-duplicated on rks-id: every input record exactly once"
    print(f"killed pid {at['pid']} at {at['coords']}; records {len(records)} for {n} inputs; query restarts "
          f"{restarts}")


def test_a_spark_connect_session_runs_the_writer_under_real_time_mode(broker, tmp_path):
    """Through Spark Connect (a local server, ``SPARK_REMOTE=local[2]``): the client pickles the writer, the server's
    Python workers run it; every record arrives, named as in a classic session (the query id names the run)."""
    from devtools.jvm import spark_kafka_connector_jars

    bs = broker.bootstrap
    src, out = f"rt-in-{uuid.uuid4().hex[:6]}", f"rt-out-{uuid.uuid4().hex[:6]}"
    create_topic(bs, src, partitions=PARTS)
    create_topic(bs, out, partitions=PARTS)
    n = 1000
    produce_all(bs, src, ({"value": b"v%d" % i, "partition": i % PARTS} for i in range(n)))
    name = f"rtc-{uuid.uuid4().hex[:6]}"
    args = {"bootstrap": bs, "src": src, "out": out, "name": name, "chk": str(tmp_path / "chk"),
            "wal": str(tmp_path / "wal"), "expected": n}
    env = {k: v for k, v in os.environ.items() if not k.startswith("RKS_")}
    env.update(SPARK_REMOTE="local[2]", PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable,
               SPARK_LOCAL_IP="127.0.0.1",
               PYSPARK_SUBMIT_ARGS=f"--jars {','.join(spark_kafka_connector_jars())} pyspark-shell")
    proc = subprocess.run([sys.executable, "-m", "tests.programs.realtime_connect", json.dumps(args)], cwd=ROOT,
                          env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=420)
    (tmp_path / "connect.log").write_text(proc.stdout + proc.stderr)  # for a post-mortem
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    said = json.loads([ln for ln in proc.stdout.splitlines() if ln.startswith("{")][-1])
    assert said["session"].startswith("pyspark.sql.connect"), f"premise: a Connect session, not {said['session']}"
    assert said["active"] and said["exception"] is None, said
    records = read_topic(bs, out, expected=n, timeout_s=60).records
    inputs = read_topic(bs, src, expected=n).records
    assert len(records) == n, "every input record once"
    assert {r.value: r.rid for r in records} == _expected_ids(name, said["run"], inputs), \
        "each record named by KEY of its input's topic, partition and offset, batch 0, as in a classic session"
