"""Tier 3: the sink's dead letters raised where the user sees them (issue 7.4), on real Spark and the real broker."""

from __future__ import annotations

import os
import signal
import time
import uuid

import pytest
from pyspark.sql import functions as F

from spark_recoverable_sink import RecoverableKafkaSink

from ..kafka_helpers import read_topic
from ..record_ids import POSITION, id_batch, id_kind, id_run, ids_of, run_of

pytestmark = pytest.mark.spark


POISON, MAX_BYTES = 200_000, 100_000


def _poison_sink(broker, tmp_path, topic, **kw):
    return RecoverableKafkaSink(name=f"dl-{uuid.uuid4().hex[:8]}",
                                kafka_conf={"bootstrap.servers": broker.bootstrap, "message.max.bytes": MAX_BYTES},
                                topic=topic, wal_dir=str(tmp_path / "wal"), **kw)


def test_the_last_batch_of_an_available_now_query_raises_its_dead_letter(spark, broker, topic, tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    src = tmp_path / "src"
    src.mkdir()
    for f, rows in enumerate((range(0, 100), range(100, 200))):  # batch 0, then the last batch 1
        vals = [b"x" * POISON if i == 150 else b"v%d" % i for i in rows]
        pq.write_table(pa.table({"key": [str(i) for i in rows], "value": pa.array(vals, pa.binary())}),
                       str(src / f"part-{f}.parquet"))
        # Spark's file source takes files oldest first (by modification time, in ms): two files written in one
        # millisecond came in either order, and the poisoned one became batch 0. Their times now say the order.
        os.utime(src / f"part-{f}.parquet", (1_700_000_000 + f * 60, 1_700_000_000 + f * 60))
    sink = _poison_sink(broker, tmp_path, topic)
    stream = spark.readStream.schema("key string, value binary").option("maxFilesPerTrigger", 1).parquet(str(src))
    q = (stream.writeStream.foreachBatch(sink).option("checkpointLocation", str(tmp_path / "chk"))
         .trigger(availableNow=True).start())
    with pytest.raises(Exception):  # noqa: B017 -- the query's error, checked below
        q.awaitTermination(300)
    exc = q.exception()
    assert exc is not None, "the query ended without raising its last batch's dead letter"
    last = sink.last_report
    assert last is not None and last.batch_id == 1 and len(last.dead_letters) == 1, last
    rid, _err = last.dead_letters[0]
    # the id of row 150: row 50 of the last batch's file split (a named input: ids by position)
    run = q.id.replace("-", "")[:16]
    assert (id_kind(rid), id_run(rid), id_batch(rid), int(rid[-16:], 16)) == (POSITION, run_of(sink.name, run), 1, 50)
    assert "DeadLetterError" in str(exc) and rid in str(exc), str(exc)[:1000]
    got = read_topic(broker.bootstrap, topic, expected=199)
    assert {r.key for r in got.records} == {str(i).encode() for i in range(200) if i != 150}


def test_a_dead_letter_whose_report_a_failed_job_dropped_is_raised_later(spark, broker, topic, tmp_path):
    import fcntl
    import threading

    from spark_recoverable_sink import DeadLetterError

    from ..faults.procs import wait_dead
    from ..faults.slots import slot_holders

    gate = str(tmp_path / "gate.lock")
    open(gate, "w").close()

    @F.udf("binary")
    def value_of(i):
        if i >= 1000:  # partition 1: park until the test lets it fail (after partition 0 finished)
            with open(gate) as fh:
                fcntl.flock(fh, fcntl.LOCK_SH)
            raise ValueError("injected failure of partition 1")
        return b"x" * POISON if i == 500 else b"v%d" % i

    # record_ids="partition": each input partition's rows written by its own task (no shuffle before the sink)
    sink = _poison_sink(broker, tmp_path, topic, drain_on_failure_s=0, record_ids="partition")
    df = spark.range(0, 2000, 1, 2).select(F.col("id").cast("string").alias("key"), value_of("id").alias("value"))
    tracker = spark.sparkContext.statusTracker()
    errors: list[BaseException] = []

    def run() -> None:
        spark.sparkContext.setJobGroup("dl-lost-report", "dead letter in a failed job")  # a thread-local property
        try:
            sink.write(df, batch_id=1, run_id="lost")
        except BaseException as exc:  # noqa: BLE001 -- inspected by the test
            errors.append(exc)
        finally:
            spark.sparkContext.setJobGroup(None, None)  # type: ignore[arg-type]

    with open(gate, "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        writer = threading.Thread(target=run)
        writer.start()
        try:
            # wait (not a race: the outcome does not depend on how long) until partition 0's task is done
            end = time.monotonic() + 120
            while time.monotonic() < end:
                stages = [tracker.getStageInfo(s) for j in tracker.getJobIdsForGroup("dl-lost-report")
                          for s in (tracker.getJobInfo(j).stageIds if tracker.getJobInfo(j) else [])]
                if any(st is not None and st.numCompletedTasks >= 1 for st in stages):
                    break
                time.sleep(0.1)
            else:
                raise AssertionError("partition 0's task never finished")
        finally:
            fcntl.flock(held, fcntl.LOCK_UN)
    writer.join(300)
    assert errors and not isinstance(errors[0], DeadLetterError), errors
    assert "injected failure of partition 1" in str(errors[0])
    # The worker that holds the dead letter dies: the next task of the sink adopts its slot. Its lock is free only
    # once the process has exited: waited for. (Spark may have ended that idle worker already: its slot is then free
    # and adopted all the same.)
    holders = {p for p in slot_holders(str(tmp_path / "wal"), sink.name).values() if p}
    for pid in holders:
        os.kill(pid, signal.SIGKILL)
    assert all(wait_dead(pid, 30.0) for pid in holders), f"a SIGKILLed worker of {holders} did not exit in 30 s"
    clean = spark.range(0, 10, 1, 1).selectExpr("cast(id as string) as key", "cast(id as string) as value")
    with pytest.raises(DeadLetterError) as ei:
        sink.write(clean, batch_id=2)
    # row 500 of partition 0 (ids 0..999) of batch 1, under the run of that write, computed from its content
    import pyarrow as pa

    (rid,) = ei.value.record_ids
    part0 = pa.RecordBatch.from_pydict({"key": pa.array([str(i) for i in range(1000)], pa.string()),
                                        "value": pa.array([b"x" * POISON if i == 500 else b"v%d" % i
                                                           for i in range(1000)], pa.binary())})
    assert rid == ids_of(sink.name, "lost", 1, 0, [part0], topic)[500], ei.value.record_ids
    sink.write(clean, batch_id=3)  # held by the driver now: not raised twice
