"""Scenarios 7 and 13: records Kafka refuses, and input that cannot become a record.

Spark local[2,3] from the session fixture and the session broker. What is
asserted each time: nothing is dropped silently -- every row either arrives,
is dead-lettered with its id and the error, or makes the write fail with an
error that names it.
"""

from __future__ import annotations

import re
import time

import pytest

from spark_recoverable_sink import RecoverableKafkaSink, SchemaError
from tests.kafka_helpers import header_dict, read_topic
from tests.record_ids import POSITION, id_batch, id_kind, id_run, ids_of, run_of

from .conftest import ENGINES, engine_suffix, new_topic, sink_name
from .readback import LiveReader, read_back
from .streams import (
    BatchProbe,
    task_reports,
    start_stream,
    write_source,
)

pytestmark = pytest.mark.spark

POISON_SIZE = 200_000
MAX_BYTES = 100_000


def _is_poison_id(rid: str, name: str, run: str, batch: int, lo: int, poison: int) -> bool:
    """Whether ``rid`` (hex) is the id of row ``poison`` of the source file holding rows from ``lo`` (as
    :func:`_poison_stream` wrote it, one file per batch): a file split is a named input, so the id names it by
    position, the row's rank in its file (its scope, the split's name hashed, is not checked here)."""
    return (id_kind(rid), id_run(rid), id_batch(rid), int(rid[-16:], 16)) == (POSITION, run_of(name, run), batch,
                                                                              poison - lo)


def _poison_stream(spark, broker, tmp_path, name, topic, dlq, poison, n, files, engine):
    src, wal = str(tmp_path / "src"), str(tmp_path / "wal")
    write_source(src, n, files, value_size=200, sizes={poison: POISON_SIZE})
    sink = RecoverableKafkaSink(name, {"bootstrap.servers": broker.bootstrap, "message.max.bytes": MAX_BYTES},
                                topic=topic, wal_dir=wal, ack_timeout_s=30.0, dead_letter_topic=dlq,
                                delivery_engine=engine)
    probe = BatchProbe(sink)
    q = start_stream(spark, src, probe, str(tmp_path / "chk"), files_per_trigger=1)
    try:
        q.awaitTermination(300)
    except Exception:  # noqa: BLE001 -- read back through q.exception()
        pass
    return sink, probe, q


@pytest.mark.parametrize("engine", ENGINES)
def test_07a_poison_record_goes_to_dead_letter_topic(spark, broker, tmp_path, scenario, engine):
    scenario.scenario = "07a_poison_to_dlq" + engine_suffix(engine)
    scenario.title = f"Poison record (> message.max.bytes) with a DLQ topic ({engine} engine)"
    scenario.fault = f"one {POISON_SIZE}-byte value among 20000 rows, producer message.max.bytes={MAX_BYTES}"
    n, files, poison = 20000, 4, 7777  # file 1 = batch 1 holds rows 5000..9999
    topic, dlq = new_topic(broker.bootstrap), new_topic(broker.bootstrap, partitions=1, prefix="dlq")
    name = sink_name("f07a")
    reader = LiveReader(broker.bootstrap, topic).start()
    try:
        sink, probe, q = _poison_stream(spark, broker, tmp_path, name, topic, dlq, poison, n, files, engine)
        assert q.exception() is None, q.exception()
        good = [i for i in range(n) if i != poison]
        t = read_back(broker.bootstrap, topic, good, reader)
    finally:
        reader.stop()
    dead = read_topic(broker.bootstrap, dlq, expected=1, idle_s=3.0)
    time.sleep(3)  # nothing more may come: the poison is not retried or re-forwarded
    dead_later = read_topic(broker.bootstrap, dlq, expected=1, idle_s=2.0)
    main_keys = {r.key for r in read_topic(broker.bootstrap, topic, expected=t.records_read, idle_s=2.0).records}
    scenario.apply(t)
    parts = task_reports(sink)
    scenario.figures.update(dead_lettered=sum(p.dead_lettered for p in parts), dlq_records=len(dead.records),
                            dlq_records_3s_later=len(dead_later.records), retried=sum(p.retried for p in parts))
    assert t.lost == 0, f"lost {t.lost} good rows, e.g. {t.lost_sample}"
    assert str(poison).encode() not in main_keys
    assert len(dead.records) >= 1, "the poison record never reached the dead-letter topic"
    rec = dead.records[0]
    h = header_dict(rec)
    scenario.figures["dlq_headers"] = sorted(h)
    assert rec.key == str(poison).encode()
    rid = h.get("rks-id", b"").hex()
    # batch 1 of the query's run, the row's position in its file
    assert _is_poison_id(rid, name, q.id.replace("-", "")[:16], 1, 5000, poison), h
    assert h.get("rks-error"), "the dead letter carries no error text"
    scenario.figures["dlq_error"] = h["rks-error"].decode()[:200]
    assert len(dead_later.records) == len(dead.records), "the dead letter was forwarded again and again"
    assert sum(p.dead_lettered for p in parts) == 1


@pytest.mark.parametrize("engine", ENGINES)
def test_07b_poison_without_dlq_fails_its_own_batch_naming_the_id(spark, broker, tmp_path, scenario, engine):
    scenario.scenario = "07b_poison_no_dlq" + engine_suffix(engine)
    scenario.title = f"Poison record, no DLQ topic: its own batch raises ({engine} engine)"
    scenario.fault = f"one {POISON_SIZE}-byte value in batch 0, message.max.bytes={MAX_BYTES}, no dead_letter_topic"
    n, files, poison = 20000, 4, 1234  # file 0 = batch 0 holds rows 0..4999
    topic = new_topic(broker.bootstrap)
    name = sink_name("f07b")
    sink, probe, q = _poison_stream(spark, broker, tmp_path, name, topic, None, poison, n, files, engine)
    exc = q.exception()
    first = sink.reports[0] if sink.reports else None
    good = [i for i in range(5000) if i != poison]
    t = read_back(broker.bootstrap, topic, good)
    scenario.apply(t)
    scenario.figures.update(batches_called=probe.calls, batch0_dead=list(first.dead_letters) if first else None,
                            errors=probe.errors[:2])
    scenario.notes.append("the batch that found the dead letter raises after its report is logged; a restart "
                          "re-runs it and the record is refused again: dead_letter_topic is how to keep going")
    assert t.lost == 0, f"lost {t.lost} good rows of batch 0, e.g. {t.lost_sample}"
    assert first is not None and len(first.dead_letters) == 1, "batch 0's report does not list the dead letter"
    rid, err = first.dead_letters[0]
    assert _is_poison_id(rid, name, q.id.replace("-", "")[:16], 0, 0, poison), rid
    assert err, rid
    assert exc is not None, "the query went on although a record was dead-lettered and no DLQ topic is set"
    assert probe.calls == [0] and probe.errors and probe.errors[0][0] == 0, (probe.calls, probe.errors)
    assert "DeadLetterError" in str(exc) and rid in str(exc), str(exc)[:1000]
    assert t.records_read == len(good), "rows of batch 1 were written although batch 0 raised"


# -- 13: bad input -----------------------------------------------------------------------------------


def _sink(broker, tmp_path, tag, topic, **opts):
    """A sink of its own (the engine, when given as ``delivery_engine``, among ``opts``)."""
    return RecoverableKafkaSink(sink_name(tag), {"bootstrap.servers": broker.bootstrap}, topic=topic,
                                wal_dir=str(tmp_path / "wal"), ack_timeout_s=30.0, **opts)


def test_13a_wrong_column_type_and_missing_value_fail_before_any_task(spark, broker, tmp_path, scenario):
    """Runs once: the schema is refused on the driver, before any task or delivery engine exists."""
    scenario.scenario, scenario.title = "13a_bad_schema", "Wrong column type / missing value column"
    scenario.fault = "value as bigint; a DataFrame without value"
    topic = new_topic(broker.bootstrap)
    sink = _sink(broker, tmp_path, "f13a", topic)
    with pytest.raises(SchemaError) as e1:
        sink.write(spark.range(5000).selectExpr("id as value", "cast(id as string) as key"), batch_id=1)
    with pytest.raises(SchemaError) as e2:
        sink.write(spark.range(5000).selectExpr("cast(id as string) as key"), batch_id=2)
    scenario.figures.update(wrong_type=str(e1.value)[:200], missing_value=str(e2.value)[:200])
    assert e1.value.column == "value" and "bigint" in str(e1.value)
    assert "value" in str(e2.value)
    got = read_topic(broker.bootstrap, topic, idle_s=2.0, timeout_s=10)
    scenario.rows_sent, scenario.records_read, scenario.lost = 0, len(got.records), 0
    assert not got.records, "rows of a refused DataFrame reached Kafka"


@pytest.mark.parametrize("engine", ENGINES)
def test_13b_null_topic_without_default_fails_the_task_naming_the_row(spark, broker, tmp_path, scenario, engine):
    scenario.scenario = "13b_null_topic" + engine_suffix(engine)
    scenario.title = f"Topic column with a null, no default topic ({engine} engine)"
    scenario.fault = "row 3333 of 6000 has topic NULL, sink topic=None"
    topic = new_topic(broker.bootstrap)
    sink = _sink(broker, tmp_path, "f13b", None, delivery_engine=engine)
    df = spark.range(0, 6000, 1, 2).selectExpr(
        "cast(id as string) as key", "cast(concat('row-', cast(id as string)) as binary) as value",
        f"case when id = 3333 then null else '{topic}' end as topic")
    with pytest.raises(Exception) as ei:
        sink.write(df, batch_id=5)
    msg = str(ei.value)
    got = read_topic(broker.bootstrap, topic, idle_s=3.0, timeout_s=30)
    keys = {int(r.key) for r in got.records}
    scenario.rows_sent, scenario.records_read, scenario.distinct_ids = 6000, len(got.records), len(keys)
    scenario.lost = None
    scenario.figures.update(error=msg[msg.find("InvalidRecordError"):][:300], delivered_before_failure=len(keys))
    scenario.notes.append("the write fails (nothing silent); rows of the partition's earlier Arrow batches and "
                          "of the other partition may already be in Kafka")
    assert "InvalidRecordError" in msg and "null topic" in msg, msg[:2000]
    # a row refused before it was accepted has no id: it is named by its row, batch and Spark partition
    assert re.search(r"row \d+ of batch 5 partition \d+", msg), "the error does not name the row"
    assert 3333 not in keys


@pytest.mark.parametrize("engine", ENGINES)
def test_13c_partition_out_of_range_is_dead_lettered(spark, broker, tmp_path, scenario, engine):
    scenario.scenario = "13c_partition_out_of_range" + engine_suffix(engine)
    scenario.title = f"Partition column out of range ({engine} engine)"
    scenario.fault = "every 1000th row (6 of 6000) has partition 7 on a 3-partition topic"
    topic = new_topic(broker.bootstrap)
    dlq = new_topic(broker.bootstrap, partitions=1, prefix="dlq")
    bad = {i for i in range(6000) if i % 1000 == 7}
    df = spark.range(0, 6000, 1, 2).selectExpr(
        "cast(id as string) as key", "cast(concat('row-', cast(id as string)) as binary) as value",
        "cast(case when id % 1000 = 7 then 7 else id % 3 end as int) as partition")
    with_dlq = _sink(broker, tmp_path, "f13c", topic, dead_letter_topic=dlq, delivery_engine=engine)
    rep = with_dlq.write(df, batch_id=1)
    without = _sink(broker, tmp_path, "f13cn", topic, delivery_engine=engine)
    with pytest.raises(Exception) as ei:
        without.write(df, batch_id=2)
    good = [i for i in range(6000) if i not in bad]
    got = read_topic(broker.bootstrap, topic, expected=2 * len(good), idle_s=3.0)
    dead = read_topic(broker.bootstrap, dlq, expected=len(bad), idle_s=3.0)
    from collections import Counter

    per_key = Counter(int(r.key) for r in got.records)
    scenario.rows_sent, scenario.records_read = 2 * 6000, len(got.records)
    scenario.lost = sum(1 for i in good if per_key[i] < 2)
    scenario.duplicates = sum(max(0, c - 2) for c in per_key.values())
    scenario.figures.update(dead_lettered=rep.dead_lettered, dlq_keys=sorted(int(r.key) for r in dead.records),
                            error_codes=sorted({header_dict(r).get("rks-error-code", b"").decode()
                                                for r in dead.records}),
                            no_dlq_error=type(ei.value).__name__ + ": " + str(ei.value)[:300])
    assert scenario.lost == 0
    assert not (set(per_key) & bad), "an out-of-range row reached some partition"
    assert rep.dead_lettered == len(bad)
    assert {int(r.key) for r in dead.records} == bad
    assert "DeadLetterError" in type(ei.value).__name__ or "DeadLetterError" in str(ei.value)
    named = {rid for rid, _e in ei.value.errors.items()} if hasattr(ei.value, "errors") else set()
    assert len(named) == len(bad), named
    # each out-of-range row named by its id (run of that write, batch 2, Spark partition 0: rows 0..2999,
    # 1: rows 3000..5999): a write() never run again of spark.range, so by its position in its partition
    run = without.last_report.run
    assert {id_run(rid) for rid in named} == {run_of(without.name, run)}, named
    import pyarrow as pa

    ids = []
    for p in (0, 1):
        rows = range(3000 * p, 3000 * (p + 1))
        part = pa.RecordBatch.from_pydict({
            "key": pa.array([str(i) for i in rows], pa.string()),
            "value": pa.array([b"row-%d" % i for i in rows], pa.binary()),
            "partition": pa.array([7 if i % 1000 == 7 else i % 3 for i in rows], pa.int32())})
        ids += ids_of(without.name, run, 2, p, [part], topic, kind=POSITION)
    assert named == {ids[i] for i in bad}, named
    assert any(rid in str(ei.value) for rid in named), str(ei.value)[:500]


@pytest.mark.parametrize("engine", ENGINES)
def test_13d_non_utf8_string_key_passes_through_as_bytes(spark, broker, tmp_path, scenario, engine):
    scenario.scenario = "13d_non_utf8_key" + engine_suffix(engine)
    scenario.title = f"Non-UTF-8 bytes in a string key ({engine} engine)"
    scenario.fault = "key = cast(row number) || 0xFF 0xC3 0x28 as a Spark string"
    topic = new_topic(broker.bootstrap)
    sink = _sink(broker, tmp_path, "f13d", topic, delivery_engine=engine)
    n = 6000
    df = spark.range(0, n, 1, 2).selectExpr(
        "concat(cast(id as string), cast(unhex('FFC328') as string)) as key",
        "cast(concat('row-', cast(id as string)) as binary) as value")
    rep = sink.write(df, batch_id=1)
    got = read_topic(broker.bootstrap, topic, expected=n, idle_s=3.0)
    by_row = {int(r.value[4:]): r.key for r in got.records}
    wrong = [i for i, k in by_row.items() if k != str(i).encode() + b"\xff\xc3\x28"]
    scenario.rows_sent, scenario.records_read, scenario.distinct_ids = n, len(got.records), len(by_row)
    scenario.lost = n - len(by_row)
    scenario.duplicates = len(got.records) - len(by_row)
    scenario.figures.update(acked=rep.acked, keys_altered=len(wrong), sample_key=repr(got.records[0].key),
                            per_partition={f"{t}[{p}]": c for (t, p), c in
                                                                            got.per_partition().items()},
                            reader_errors=got.errors[:5])
    assert scenario.lost == 0
    assert not wrong, f"keys altered in transit, e.g. {[by_row[i] for i in wrong[:3]]}"
