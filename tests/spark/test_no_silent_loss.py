"""Real Spark, real broker: paths where records used to vanish without a word, or a batch waited forever.

* a re-run that sees its partition's rows in another order (as a retry after
  a shuffle does) keeps every record under deduplication by id, and an
  exactly-once re-run of it is skipped as proven, not duplicated;
* a record refused for good under exactly-once fails its batch with
  ``DeadLetterError`` naming it, and nothing of its unit is committed;
* an exactly-once batch that cannot settle fails after ``settle_timeout_s``
  naming every lane still waiting, instead of waiting forever.
"""

from __future__ import annotations

import uuid
from collections import defaultdict

import pytest

from spark_recoverable_sink import DeadLetterError, RecoverableKafkaSink
from spark_recoverable_sink.delivery.exactly_once.marker_reads import lane_markers
from spark_recoverable_sink.errors import SettleTimeoutError

from ..kafka_helpers import create_topic, read_topic
from ..record_ids import ids_of

pytestmark = pytest.mark.spark

RC = "read_committed"
N = 10_000


def _rows(spark):
    """N rows of one partition; 1,000 values appear twice (equal records are numbered, not merged)."""
    return spark.range(N).selectExpr("cast(id % 977 as string) as key",
                                     "concat('v-', cast(id % 9000 as string)) as value")


def _both_orders(spark):
    from pyspark.sql import functions as F

    rows = _rows(spark)
    return rows.coalesce(1).sortWithinPartitions("value"), rows.coalesce(1).sortWithinPartitions(F.desc("value"))


def test_a_rerun_that_sees_its_rows_in_another_order_keeps_every_record(spark, broker, topic, tmp_path):
    sink = RecoverableKafkaSink(f"order-{uuid.uuid4().hex[:6]}", {"bootstrap.servers": broker.bootstrap}, topic=topic,
                                wal_dir=str(tmp_path / "wal"), ack_timeout_s=30)
    first, second = _both_orders(spark)
    assert sink.write(first, batch_id=0, run_id="rerun").acked == N
    assert sink.write(second, batch_id=0, run_id="rerun").acked == N  # the documented re-run, rows reordered
    got = read_topic(broker.bootstrap, topic, expected=2 * N)
    by_id: dict[str, set[bytes]] = defaultdict(set)
    for r in got.records:
        by_id[r.rid].add((r.key, r.value))
    # a consumer dropping duplicates by rks-id keeps exactly the rows written, each once
    assert len(by_id) == N and all(len(v) == 1 for v in by_id.values()), "one id was given to different rows"
    kept = sorted(v for vs in by_id.values() for v in vs)
    assert kept == sorted((str(i % 977).encode(), f"v-{i % 9000}".encode()) for i in range(N))


def test_an_exactly_once_rerun_in_another_order_is_skipped_not_duplicated(spark, broker, topic, tmp_path):
    sink = RecoverableKafkaSink(f"eo-order-{uuid.uuid4().hex[:6]}", {"bootstrap.servers": broker.bootstrap},
                                topic=topic, wal_dir=str(tmp_path / "wal"), guarantee="exactly_once")
    first, second = _both_orders(spark)
    assert sink.write(first, batch_id=3, run_id="rerun").acked == N
    again = sink.write(second, batch_id=3, run_id="rerun")
    assert (again.acked, again.skipped, again.pending) == (0, N, 0)
    got = read_topic(broker.bootstrap, topic, expected=N, isolation=RC)
    assert len(got.records) == N and got.duplicates() == 0


def test_a_record_refused_for_good_fails_an_exactly_once_batch_naming_it(spark, own_broker, tmp_path):
    bs, topic = own_broker.bootstrap, "eo-refused"
    create_topic(bs, topic, partitions=2)
    sink = RecoverableKafkaSink(f"eo-big-{uuid.uuid4().hex[:6]}", {"bootstrap.servers": bs,
                                                                    "message.max.bytes": 50_000},
                                topic=topic, wal_dir=str(tmp_path / "wal"), guarantee="exactly_once",
                                settle_timeout_s=120, exactly_once_lanes=1)  # one unit: lane 0
    df = spark.range(400).selectExpr("cast(id as string) as key",
                                     "case when id = 123 then repeat('x', 80000) else 'small' end as value")
    with pytest.raises(DeadLetterError) as ei:
        sink.write(df.coalesce(1), batch_id=0, run_id="big")
    errors = ei.value.errors
    refused = [rid for rid, err in errors.items() if not err.startswith("not published")]
    import pyarrow as pa

    rows = pa.RecordBatch.from_pydict({"key": pa.array([str(i) for i in range(400)], pa.string()),
                                       "value": pa.array(["x" * 80000 if i == 123 else "small" for i in range(400)],
                                                         pa.string())})
    assert refused == [ids_of(sink.name, "big", 0, 0, [rows], topic)[123]], errors
    assert "too large" in errors[refused[0]].lower() and refused[0] in str(ei.value)  # named first, with its reason
    assert len(errors) == 400  # every record of the refused unit is in the dead-letter store
    assert read_topic(bs, topic, idle_s=1.0, timeout_s=5, isolation=RC).records == []  # no transaction committed


@pytest.mark.timeout(300)  # before the bound existed, this batch waited forever
def test_an_exactly_once_batch_that_cannot_settle_fails_naming_its_lanes(spark, own_broker, tmp_path):
    bs, topic = own_broker.bootstrap, "eo-stuck"
    create_topic(bs, topic, partitions=2)
    sink = RecoverableKafkaSink(f"eo-stuck-{uuid.uuid4().hex[:6]}", {"bootstrap.servers": bs}, topic=topic,
                                wal_dir=str(tmp_path / "wal"), guarantee="exactly_once", ack_timeout_s=2.0,
                                settle_timeout_s=20, exactly_once_lanes=2)  # 2 partitions, 2 lanes: one each
    df = spark.range(300).selectExpr("cast(id as string) as key", "'v' as value").repartition(2, "key")
    assert sink.write(df, batch_id=0, run_id="stuck").rows == 300  # it returns once both lanes committed it
    markers = lane_markers(sink.config, "stuck", [0, 1])  # (in the task, or later by the settle's drain jobs)
    assert {p: m.batch for p, m in markers.items()} == {0: 0, 1: 0}, markers  # the lanes exist, committed once
    own_broker.pause()
    try:
        with pytest.raises(SettleTimeoutError) as ei:
            sink.write(df, batch_id=1, run_id="stuck")
    finally:
        own_broker.resume()
    lanes = {u["lane"] for u in ei.value.lanes}
    assert lanes == {f"rks-eo.{sink.name}:stuck:0", f"rks-eo.{sink.name}:stuck:1"}, ei.value.lanes
    assert all(u["batch"] == 1 for u in ei.value.lanes)
    assert "Nothing was dropped" in str(ei.value) and "settle_timeout_s=20" in str(ei.value)
    report = sink.last_report
    assert report.pending == 300 and any("not committed after" in p for p in report.problems), report.problems
