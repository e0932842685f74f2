"""Scenarios 8, 9, 10: the WAL fills up, the disk refuses writes, the WAL files are damaged.

8 runs through Spark (local[2,3] session fixture); 9 and 10 call the WAL and
``write_partition`` directly (in this process, or in a subprocess through
``tests/programs/writer_cli.py`` so that a damaged slot can do no harm to the
test process).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import time

import pytest

from spark_recoverable_sink import RecoverableKafkaSink, WalFullError, WalWriteError
from spark_recoverable_sink.config import SinkConfig
from spark_recoverable_sink.ids import CONTENT, new_occurrences, scheme_for, with_ids
from spark_recoverable_sink.schema import normalize_batch
from spark_recoverable_sink.wal.format import (
    AttemptKey,
    ChunkKey,
    decode_chunk,
    encode_chunk,
)
from spark_recoverable_sink.wal.log import Wal, map_size_for
from spark_recoverable_sink.wal.records import OPEN, AttemptState
from spark_recoverable_sink.wal.slots import sink_dir, slot_paths
from tests.kafka_helpers import read_topic

from .conftest import ENGINES, engine_suffix, new_topic, sink_name
from .procs import run_cli
from .readback import LiveReader, keys_of, read_back, tally
from .streams import BatchProbe, row_value, start_stream, unit_batches, write_source
from tests.record_ids import TEST_IDS

MIB = 1024 * 1024


# -- 8: max_wal_bytes reached while the broker is down ---------------------------------------------


@pytest.mark.spark
@pytest.mark.parametrize("engine", ENGINES)
def test_08_wal_full_while_broker_down_then_everything_accepted_arrives(spark, own_broker, tmp_path, scenario,
                                                                         engine):
    scenario.scenario = "08_wal_full_broker_down" + engine_suffix(engine)
    scenario.title = f"WAL reaches max_wal_bytes while the broker is down ({engine} engine)"
    scenario.fault = "broker SIGSTOPped before the query; max_wal_bytes=1 MiB, max_block_s=3, ack_timeout_s=0"
    n, files = 30000, 10  # 3000 rows of ~330 B per batch: about one MiB slot fills after a batch or two
    src, wal, chk = str(tmp_path / "src"), str(tmp_path / "wal"), str(tmp_path / "chk")
    write_source(src, n, files, value_size=300)
    topic = new_topic(own_broker.bootstrap)
    name = sink_name("f08")
    conf = {"bootstrap.servers": own_broker.bootstrap}
    opts = dict(topic=topic, wal_dir=wal, ack_timeout_s=0.0, max_wal_bytes=MIB, max_block_s=3.0,
                delivery_engine=engine)
    sink = RecoverableKafkaSink(name, conf, **opts)
    probe = BatchProbe(sink, record_rows=True)
    own_broker.pause()
    fault_at = time.time()
    q = start_stream(spark, src, probe, chk, files_per_trigger=1)
    try:
        q.awaitTermination(300)
    except Exception:  # noqa: BLE001 -- read through q.exception()
        pass
    exc = q.exception()
    failed_batch = probe.errors[0][0] if probe.errors else None
    blocked_s = (probe.ended[failed_batch] - probe.started[failed_batch]) if failed_batch is not None else None
    committed = [r.batch_id for r in sink.reports]
    # The rows each committed batch really held (which file a batch reads is Spark's choice).
    accepted = sorted(i for b in committed for i in probe.rows[b])
    own_broker.resume()
    restored_at = time.time()
    reader = LiveReader(own_broker.bootstrap, topic).start()
    try:
        # Without any restart, everything accepted must arrive once the broker is back.
        accepted_at = reader.wait_for(keys_of(accepted), 60)
        first = tally(read_topic(own_broker.bootstrap, topic, expected=len(accepted), idle_s=2.0, timeout_s=20),
                      accepted)
        # Then the query is restarted (broker up): the failed batch and the rest go through.
        sink2 = RecoverableKafkaSink(name, conf, **opts)
        q2 = start_stream(spark, src, BatchProbe(sink2), chk, files_per_trigger=1)
        q2.awaitTermination(300)
        q2_exc = q2.exception()
        full_at = reader.wait_for(keys_of(range(n)), 120)
        t = read_back(own_broker.bootstrap, topic, range(n), reader)
    finally:
        reader.stop()
    scenario.apply(t)
    scenario.recovery(fault_at, full_at)
    scenario.figures.update(
        committed_batches=committed, failed_batch=failed_batch, failed_batch_seconds=round(blocked_s or 0, 1),
        accepted_rows=len(accepted), accepted_missing_before_restart=first.lost,
        accepted_visible_after_resume_s=round(accepted_at - restored_at, 2) if accepted_at else None,
        error=(str(exc)[str(exc).find("WalFullError"):][:300] if exc else None))
    if first.lost:
        scenario.notes.append(f"{first.lost} of {len(accepted)} accepted rows arrived only after the query restart")
    assert exc is not None and "WalFullError" in str(exc), f"expected the query to fail with WalFullError: {exc}"
    assert "max_wal_bytes" in str(exc) and wal in str(exc), "the WalFullError does not name the slot and the limit"
    assert blocked_s is not None and blocked_s >= 3.0, "the writer did not block max_block_s before failing"
    assert committed, "no batch was accepted before the WAL filled (test too small?)"
    assert first.lost == 0, (f"{first.lost} of {len(accepted)} accepted rows still missing 60 s after the broker "
                             f"came back (before any restart), e.g. {first.lost_sample}")
    assert q2_exc is None, q2_exc
    assert t.lost == 0, f"lost {t.lost} rows, e.g. {t.lost_sample}"


# -- 9: LMDB map full, ENOSPC ------------------------------------------------------------------------


def _norm_chunk(first: int, rows: int, topic: str = "t", size: int = 300):
    rb = next(unit_batches(first, rows, size, chunk=rows))
    return with_ids(normalize_batch(rb, topic, first, "r"), TEST_IDS, new_occurrences())


def _fill(wal: Wal, rows_per_chunk: int = 200, limit: int = 10_000) -> tuple[list[ChunkKey], BaseException]:
    keys: list[ChunkKey] = []
    gen = wal.reserve_gen()
    for i in range(limit):
        key = ChunkKey(1, 0, i * rows_per_chunk, gen)
        chunk = encode_chunk(_norm_chunk(i * rows_per_chunk, rows_per_chunk))
        try:
            wal.append(key, chunk, new_attempt=AttemptState(OPEN, 0, 0, time.time()) if i == 0 else None)
        except Exception as exc:  # noqa: BLE001 -- returned for the assertions
            return keys, exc
        keys.append(key)
    raise AssertionError(f"{limit} chunks went in without an error")


def _check_all_readable(path: str, sink: str, keys: list[ChunkKey], rows_per_chunk: int = 200) -> int:
    wal = Wal(path, sink_name=sink, map_size=256 * MIB, sync=True)
    try:
        stored = {k for k, _ in wal.chunk_keys()}
        assert set(keys) <= stored, f"{len(set(keys) - stored)} accepted chunks are gone"
        for k in keys:
            b = decode_chunk(wal.read_chunk(k))
            assert b.num_rows == rows_per_chunk
            assert b.column(b.schema.names.index("value"))[0].as_py() == row_value(k.first_seq, 300)
        return len(stored)
    finally:
        wal.close()


def test_09a_lmdb_map_full_is_a_clear_error_and_loses_nothing(tmp_path, scenario):
    """Runs once: the WAL alone (``Wal.append``), no producer and so no delivery engine is involved."""
    scenario.scenario, scenario.title = "09a_lmdb_map_full", "LMDB map full (tiny map_size)"
    scenario.fault = "Wal(map_size=512 KiB): append 60 KB chunks until it refuses"
    path = str(tmp_path / "slot-00000")
    wal = Wal(path, sink_name="s", map_size=512 * 1024, sync=True)
    keys, exc = _fill(wal)
    still = len(wal.chunk_keys())  # the same handle still reads after the refusal
    wal.close()
    stored = _check_all_readable(path, "s", keys)
    scenario.rows_sent, scenario.distinct_ids, scenario.lost = len(keys) * 200, stored * 200, 0
    scenario.figures.update(accepted_chunks=len(keys), error=f"{type(exc).__name__}: {exc}"[:300])
    assert isinstance(exc, WalFullError), f"{type(exc).__name__}: {exc}"
    assert path in str(exc) and exc.path == path
    assert still == len(keys) and stored == len(keys)


def test_09b_enospc_on_wal_append_is_a_clear_error_and_loses_nothing(tmpfs_dir, scenario):
    """Runs once: the WAL alone (``Wal.append``), no producer and so no delivery engine is involved."""
    scenario.scenario, scenario.title = "09b_enospc_direct", "ENOSPC under the WAL (2 MiB tmpfs), WAL level"
    scenario.fault = "Wal on a 2 MiB tmpfs: append 60 KB chunks until the disk refuses"
    path = os.path.join(tmpfs_dir, "slot-00000")
    wal = Wal(path, sink_name="s", map_size=64 * MIB, sync=True)
    keys, exc = _fill(wal)
    wal.close()
    copy = os.path.join(os.path.dirname(tmpfs_dir), "copy")
    shutil.copytree(path, copy)  # read it back off the full disk (opening may need room for the lock file)
    stored = _check_all_readable(copy, "s", keys)
    scenario.rows_sent, scenario.distinct_ids, scenario.lost = len(keys) * 200, stored * 200, 0
    scenario.figures.update(accepted_chunks=len(keys), error=f"{type(exc).__name__}: {exc}"[:300])
    assert isinstance(exc, WalWriteError), f"{type(exc).__name__}: {exc}"
    assert path in str(exc) and exc.path == path
    assert stored == len(keys)


@pytest.mark.parametrize("engine", ENGINES)
def test_09c_enospc_in_write_partition_fails_the_task_and_accepted_rows_arrive(
        own_broker, tmpfs_dir, local_runtimes, scenario, engine):
    scenario.scenario = "09c_enospc_task" + engine_suffix(engine)
    scenario.title = f"ENOSPC under the WAL during tasks, broker paused ({engine} engine)"
    scenario.fault = "wal_dir on a 2 MiB tmpfs, broker SIGSTOPped: write_partition until the disk refuses"
    from spark_recoverable_sink.task.writer import write_partition

    topic = new_topic(own_broker.bootstrap)
    name = sink_name("f09c")
    cfg = SinkConfig.build(name, {"bootstrap.servers": own_broker.bootstrap}, tmpfs_dir, topic=topic,
                           ack_timeout_s=0.0, max_block_s=1.0, delivery_engine=engine)
    own_broker.pause()
    fault_at = time.time()
    accepted: list[int] = []
    error = None
    rows = 1000
    for b in range(40):
        first = b * rows
        try:
            write_partition(cfg, b, 0, 0, unit_batches(first, rows, 300, chunk=500))
        except Exception as exc:  # noqa: BLE001
            error = exc
            break
        accepted += range(first, first + rows)
    own_broker.resume()
    reader = LiveReader(own_broker.bootstrap, topic).start()
    try:
        full_at = reader.wait_for(keys_of(accepted), 120)
        t = read_back(own_broker.bootstrap, topic, accepted, reader)
    finally:
        reader.stop()
    scenario.apply(t)
    scenario.recovery(fault_at, full_at)
    scenario.figures.update(accepted_batches=len(accepted) // rows,
                            error=f"{type(error).__name__}: {error}"[:300] if error else None)
    assert error is not None, "40 batches fit on a 2 MiB disk?"
    assert isinstance(error, WalWriteError) and tmpfs_dir in str(error), f"{type(error).__name__}: {error}"
    assert accepted, "not one batch was accepted"
    assert t.lost == 0, f"lost {t.lost} accepted rows, e.g. {t.lost_sample}"


# -- 10: damaged WAL files ----------------------------------------------------------------------------


def _make_committed_slot(wal_dir: str, sink: str, topic: str, first: int, rows: int, batch: int = 7) -> str:
    sdir = sink_dir(wal_dir, sink)
    lock_path, wal_path = slot_paths(sdir, 0)
    open(lock_path, "a").close()
    wal = Wal(wal_path, sink_name=sink, map_size=map_size_for(20 * 1024**3), sync=True)
    gen = wal.reserve_gen()
    scheme = scheme_for(CONTENT, sink, "r", batch, 0)
    seq = 0
    occurrences = new_occurrences()
    for rb in unit_batches(first, rows, 300):
        norm = with_ids(normalize_batch(rb, topic, seq, "r"), scheme, occurrences)
        wal.append(ChunkKey(batch, 0, seq, gen), encode_chunk(norm),
                   new_attempt=AttemptState(OPEN, 0, 0, time.time()) if seq == 0 else None)
        seq += norm.num_rows
    wal.commit_attempt(AttemptKey(batch, 0, gen), 0, seq, time.time())
    wal.close()
    return wal_path


def _corrupt(wal_path: str, how: str, first: int) -> None:
    data = os.path.join(wal_path, "data.mdb")
    if how == "format_version":
        import lmdb

        env = lmdb.open(wal_path, max_dbs=4, subdir=True)
        with env.begin(write=True) as txn:
            txn.put(b"format", b"99", db=env.open_db(b"meta", txn=txn))
        env.close()
    elif how == "chunk_bytes":
        with open(data, "r+b") as f:
            raw = bytearray(f.read())
            marker = row_value(first + 10, 300)[:12]
            pos, hits = raw.find(marker), 0
            while pos >= 0:
                raw[pos + 20] ^= 0xFF  # in the padding of that value: only the checksum can tell
                hits += 1
                pos = raw.find(marker, pos + 1)
            assert hits, "marker not found in data.mdb"
            f.seek(0)
            f.write(raw)
    elif how == "truncated":
        os.truncate(data, os.path.getsize(data) // 2)
    elif how in ("attempt_record", "dead_letter_record"):
        import struct

        import lmdb

        from spark_recoverable_sink.wal.records import DeadLetter, encode_dead_letter

        env = lmdb.open(wal_path, max_dbs=4, subdir=True)
        with env.begin(write=True) as txn:
            if how == "attempt_record":  # one bit of the row count: only a checksum can tell
                attempts = env.open_db(b"attempts", txn=txn)
                [(key, raw)] = list(txn.cursor(db=attempts))
                raw = bytearray(raw)
                raw[18] ^= 0x01
                txn.put(key, bytes(raw), db=attempts)
            else:  # a dead letter whose record id is no longer UTF-8 (was a UnicodeDecodeError)
                raw = bytearray(encode_dead_letter(DeadLetter("x:7:0:5", 10, "too large", "t", None, None, b"v", (),
                                                              None)))
                raw[35] = 0xFF
                txn.put(struct.pack(">QIQI", 7, 0, 5, 1), bytes(raw), db=env.open_db(b"dead", txn=txn))
        env.close()
    else:
        raise ValueError(how)


def _digest(path: str) -> str:
    h = hashlib.sha256()
    for root, _dirs, names in sorted(os.walk(path)):
        for n in sorted(names):
            if n == "lock.mdb":
                continue
            with open(os.path.join(root, n), "rb") as f:
                h.update(n.encode() + f.read())
    return h.hexdigest()


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("how", ["format_version", "chunk_bytes", "truncated", "attempt_record", "dead_letter_record"])
def test_10_damaged_wal_slot_is_named_and_can_be_quarantined(broker, tmp_path, scenario, how, engine):
    scenario.scenario = f"10_damaged_wal_{how}" + engine_suffix(engine)
    scenario.title = {
        "format_version": "WAL slot of an unknown format version",
        "chunk_bytes": "WAL chunk bytes corrupted (checksum)",
        "truncated": "WAL data.mdb truncated to half",
        "attempt_record": "WAL attempt record corrupted (checksum)",
        "dead_letter_record": "WAL dead-letter record corrupted (not UTF-8)"}[how] + f" ({engine} engine)"
    scenario.fault = f"slot-00000 holds 3000 committed, unacked rows; then {how}"
    topic = new_topic(broker.bootstrap)
    name = sink_name("f10")
    wal_dir = str(tmp_path / "wal")
    slot = _make_committed_slot(wal_dir, name, topic, first=0, rows=3000)
    _corrupt(slot, how, first=0)
    base = {"name": name, "kafka_conf": {"bootstrap.servers": broker.bootstrap}, "wal_dir": wal_dir,
            "topic": topic, "opts": {"ack_timeout_s": 20.0, "delivery_engine": engine}, "value_size": 300,
            "wait_idle_s": 10}
    # A new process writes two tasks on this wal_dir.
    rc, out, err = run_cli("task", {**base, "units": [[100, 0, 100_000, 2000], [101, 0, 102_000, 2000]]})
    texts = [o["message"] if not o["ok"] else str(o["report"].get("problems") or "") for o in out]
    scenario.figures.update(victim_rc=rc, victim=[
        (o["type"] + ": " + o["message"][:250]) if not o["ok"] else
        {"problems": o["report"]["problems"][:250], "replayed": o["report"]["replayed"]} for o in out])
    if rc != 0 or len(out) != 2:
        scenario.notes.append(f"victim process exit code {rc}: {err[-500:]}")
    # Whatever the damage, the operator must learn which file it is.
    assert rc == 0 and len(out) == 2, f"the writer process died (exit {rc}) on a damaged slot: {err[-1500:]}"
    assert any(slot in t for t in texts[:1]), f"the first task neither failed nor reported naming {slot}: {texts}"
    assert all(slot in t for t in texts), f"a later task in the same process no longer mentions {slot}: {texts}"
    # The way out: quarantine it (bytes kept), and the sink stops complaining.
    from spark_recoverable_sink.wal.quarantine import quarantine_slot

    before = _digest(slot)
    dest = quarantine_slot(wal_dir, name, 0)
    scenario.figures["quarantined_to"] = os.path.relpath(dest, wal_dir)
    assert not os.path.exists(slot) and _digest(dest) == before
    rc2, out2, err2 = run_cli("task", {**base, "units": [[102, 0, 104_000, 2000]]})
    assert rc2 == 0 and out2 and out2[0]["ok"], (rc2, out2, err2[-1500:])
    assert json.loads(out2[0]["report"]["problems"] or "[]") == [], out2[0]["report"]["problems"]
    delivered = [i for o, (b, p, f, r) in zip(out + out2, [[100, 0, 100_000, 2000], [101, 0, 102_000, 2000],
                                                          [102, 0, 104_000, 2000]]) if o["ok"] for i in range(f, f + r)]
    t = read_back(broker.bootstrap, topic, delivered)
    scenario.apply(t)
    assert t.lost == 0, f"rows of tasks that succeeded are missing: {t.lost_sample}"
