"""Tier 2: the ``rks`` operator CLI against real WALs and the real broker (no Spark).

WALs are made by real processes (tests/programs/cli_writer.py) writing through
``write_partition``: a *dead* slot is one whose writer committed its records
with no broker to reach (``127.0.0.1:1``) and ended with ``os._exit``; a
*live* slot is one whose writer is parked at ``task.after_commit`` (tests/hooks.py)
and so holds its slot's lock until the test releases it.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys

import lmdb
import pyarrow as pa
import pytest
from click.testing import CliRunner

from spark_recoverable_sink.config import SinkConfig
from spark_recoverable_sink.ops.cli import main
from spark_recoverable_sink.task.runtime import reset_runtimes
from spark_recoverable_sink.task.writer import write_partition

from ..kafka_helpers import header_dict, read_topic
from ..record_ids import ids_of
from .rows import cli_batches, expected

pytestmark = pytest.mark.broker

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NOWHERE = "127.0.0.1:1"  # no broker: records stay pending in the WAL
SECRET = "s3cr3t-never-printed"


def _writer(wal_dir: str, name: str, topic: str, batch: int, partition: int, rows: int,
            **sink_options: object) -> subprocess.Popen:
    opts = {"name": name, "kafka_conf": {"bootstrap.servers": NOWHERE}, "wal_dir": wal_dir,
            "ack_timeout_s": 0, "records_topic": topic, **sink_options}
    return subprocess.Popen([sys.executable, "-m", "tests.programs.cli_writer", json.dumps(opts), str(batch),
                             str(partition), str(rows)], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def _dead_slot(wal_dir: str, name: str, topic: str, batch: int, partition: int, rows: int,
               **sink_options: object) -> None:
    proc = _writer(wal_dir, name, topic, batch, partition, rows, **sink_options)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert json.loads(out)["acked"] == 0  # everything is in the WAL only


def _conf(tmp_path, name: str, bootstrap: str) -> str:
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps({"bootstrap.servers": bootstrap, "sasl.password": {"env": "RKS_TEST_SECRET"}}))
    return str(path)


def _rks(*args: str):
    result = CliRunner().invoke(main, list(args), env={"RKS_TEST_SECRET": SECRET})
    assert SECRET not in result.stdout + result.stderr
    return result


def _slots(wal_dir: str, *extra: str) -> dict[int, dict]:
    r = _rks("inspect", wal_dir, "--json", *extra)
    assert r.exit_code == 0, r.stderr
    return {s["slot"]: s for s in json.loads(r.stdout)["slots"]}


def test_inspect_and_replay_take_dead_slots_and_leave_the_live_one(broker, topic, tmp_path, hooks):
    wal, name = str(tmp_path / "wal"), "cli"
    parked = hooks.park("task.after_commit", batch=1)
    live = _writer(wal, name, topic, 1, 0, 300)  # slot 0, held while parked
    try:
        owner = parked.wait()
        _dead_slot(wal, name, topic, 2, 1, 1200)  # slot 1 (slot 0 is locked), owner dead
        slots = _slots(wal)
        assert slots[0]["owner_alive"] and slots[0]["pending_records"] is None
        assert f"pid={owner['pid']}" in slots[0]["owner"]
        assert (slots[1]["owner_alive"], slots[1]["pending_records"], slots[1]["uncommitted_records"],
                slots[1]["dead_letters"], slots[1]["error"]) == (False, 1200, 0, 0, None)
        assert slots[1]["bytes_on_disk"] > 0 and slots[1]["oldest_pending_age_s"] >= 0
        human = _rks("inspect", wal, "--sink", name)
        assert human.exit_code == 0 and "1,200" in human.stdout and f"pid={owner['pid']}" in human.stdout

        r = _rks("replay", wal, "--sink", name, "--kafka-conf", _conf(tmp_path, "good", broker.bootstrap))
        assert r.exit_code == 0, r.stderr
        assert "adopted_slots=1 records=1200 delivered=1200 dead_lettered=0 pending=0" in r.stdout
        assert f"slot 0 of sink {name} skipped: owned by a live process (pid={owner['pid']}" in r.stderr
        got = read_topic(broker.bootstrap, topic, expected=1200)
        assert got.duplicates() == 0
        want_ids = ids_of(name, "r1", 2, 1, cli_batches(topic, 1, 1200), None)
        row_of = {rid: i for i, rid in enumerate(want_ids)}
        assert len(row_of) == 1200
        assert got.distinct_ids() == set(want_ids)  # none of the live writer's
        for rid, rec in got.by_id().items():
            want = expected(topic, 1, row_of[rid])
            assert (rec.partition, rec.key, rec.value, rec.timestamp) == (
                want["partition"], want["key"], want["value"], want["timestamp"])
            assert header_dict(rec)["h"] == want["headers"][0][1]
        assert 1 not in _slots(wal)  # drained, and removed: nothing in it was left to keep
    finally:
        parked.release()
        live.communicate(timeout=60)
    assert live.returncode == 0
    assert _slots(wal)[0]["pending_records"] == 300  # the live writer's records were never touched


def test_replay_without_broker_fails_with_a_count_and_keeps_every_record(broker, topic, tmp_path):
    wal, name = str(tmp_path / "wal"), "cli2"
    _dead_slot(wal, name, topic, 4, 2, 600)
    r = _rks("replay", wal, "--sink", name, "--kafka-conf", _conf(tmp_path, "nowhere", NOWHERE), "--timeout", "2")
    assert r.exit_code == 1
    assert "600 records not delivered within 2s; they stay in the WAL" in r.stderr
    assert "Connection refused" in r.stderr
    assert _slots(wal)[0]["pending_records"] == 600
    # The installed console script, as an operator runs it, delivers them once the broker is there.
    rks = os.path.join(os.path.dirname(sys.executable), "rks")
    proc = subprocess.run([rks, "replay", wal, "--sink", name, "--kafka-conf",
                           _conf(tmp_path, "good", broker.bootstrap)],
                          env=dict(os.environ, RKS_TEST_SECRET=SECRET), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "records=600 delivered=600" in proc.stdout and SECRET not in proc.stdout + proc.stderr
    got = read_topic(broker.bootstrap, topic, expected=600)
    want_ids = ids_of(name, "r1", 4, 2, cli_batches(topic, 2, 600), None)
    assert len(set(want_ids)) == 600
    assert got.distinct_ids() == set(want_ids) and got.duplicates() == 0


def test_replay_puts_ids_in_the_sinks_own_id_header(broker, topic, tmp_path):
    wal, name = str(tmp_path / "wal"), "cli-idh"
    _dead_slot(wal, name, topic, 2, 0, 50, id_header="my-id")
    r = _rks("replay", wal, "--sink", name, "--kafka-conf", _conf(tmp_path, "good", broker.bootstrap),
             "--id-header", "my-id")
    assert r.exit_code == 0, r.stderr
    got = read_topic(broker.bootstrap, topic, expected=50)
    ids = sorted(dict(rec.headers)["my-id"].hex() for rec in got.records)
    assert ids == sorted(ids_of(name, "r1", 2, 0, cli_batches(topic, 0, 50), None)) and len(set(ids)) == 50
    assert got.distinct_ids() == set()  # nothing under the default header


def test_dead_letters_list_export_and_resend(broker, topic, tmp_path):
    wal, name = str(tmp_path / "wal"), "cli3"
    cfg = SinkConfig.build(name, {"bootstrap.servers": broker.bootstrap, "message.max.bytes": 1000}, wal,
                           topic=topic, ack_timeout_s=30)
    values = [b"v%d" % i for i in range(10)]
    values[3] = b"x" * 5000  # over message.max.bytes: refused by this producer, fine for another
    parts = [0] * 10
    parts[6] = 7  # the topic has 3 partitions: refused wherever it is sent
    batch = pa.RecordBatch.from_pydict({"key": [b"k%d" % i for i in range(10)], "value": values,
                                        "partition": pa.array(parts, pa.int32())})
    report = write_partition(cfg, 1, 0, 0, iter([batch]), run="dl")
    assert (report.acked, report.dead_lettered) == (8, 2)
    row_ids = ids_of(name, "dl", 1, 0, [batch], topic)
    id3, id6 = row_ids[3], row_ids[6]
    assert len(set(row_ids)) == 10
    reset_runtimes()  # the writer goes away: its slot has a dead owner now

    listed = _rks("dead-letters", wal, "--sink", name)
    assert listed.exit_code == 0, listed.stderr
    assert id3 in listed.stdout and id6 in listed.stdout and "count=2" in listed.stdout
    out = tmp_path / "dead.jsonl"
    exported = _rks("dead-letters", wal, "--sink", name, "--export", str(out))
    assert exported.exit_code == 0, exported.stderr
    lines = {j["record_id"]: j for j in map(json.loads, out.read_text().splitlines())}
    assert set(lines) == {id3, id6}
    assert base64.b64decode(lines[id3]["value_b64"]) == values[3]
    assert lines[id6]["partition"] == 7 and lines[id6]["error"]
    assert oct(out.stat().st_mode & 0o777) == "0o600"

    r = _rks("dead-letters", wal, "--sink", name, "--resend", "--kafka-conf", _conf(tmp_path, "good", broker.bootstrap))
    assert r.exit_code == 1  # one of the two is refused again
    assert "sent=2 acked=1 removed=1 failed=1" in r.stdout
    assert f"1 dead letters not re-sent (kept in the store); first: {id6}" in r.stderr
    got = read_topic(broker.bootstrap, topic, expected=9)
    assert got.duplicates() == 0 and got.by_id()[id3].value == values[3]
    assert got.distinct_ids() == {rid for i, rid in enumerate(row_ids) if i != 6}
    again = _rks("dead-letters", wal, "--sink", name)
    assert "count=1" in again.stdout and id6 in again.stdout and id3 not in again.stdout


def test_replay_of_a_sink_whose_every_slot_a_live_process_owns_does_nothing_exit_2(tmp_path):
    """docs/operations.md: 2, nothing done, for a slot a live process owns; that process delivers it."""
    wal, name = str(tmp_path / "wal"), "cli-live"
    cfg = SinkConfig.build(name, {"bootstrap.servers": NOWHERE}, wal, topic="t", ack_timeout_s=0)
    try:
        write_partition(cfg, 1, 0, 0, iter([pa.RecordBatch.from_pydict({"value": [b"a"]})]))  # this process owns 0
        r = _rks("replay", wal, "--sink", name, "--kafka-conf", _conf(tmp_path, "nowhere", NOWHERE), "--timeout", "1")
        assert r.exit_code == 2, (r.exit_code, r.stderr)
        assert "owned by a live process" in r.stderr and "records=0" in r.stdout
    finally:
        reset_runtimes()
    assert _slots(wal)[0]["pending_records"] == 1  # untouched, and delivered by the next task or replay


def test_quarantine_refuses_a_live_owner_then_moves_the_slot(broker, topic, tmp_path):
    wal, name = str(tmp_path / "wal"), "cli4"
    cfg = SinkConfig.build(name, {"bootstrap.servers": broker.bootstrap}, wal, topic=topic)
    write_partition(cfg, 1, 0, 0, iter([pa.RecordBatch.from_pydict({"value": [b"a"]})]))  # this process owns slot 0
    r = _rks("quarantine", wal, "--sink", name, "0")
    assert r.exit_code == 2 and "owned by a live process" in r.stderr and len(r.stderr.splitlines()) == 1
    reset_runtimes()
    r = _rks("quarantine", wal, "--sink", name, "0")
    assert r.exit_code == 0, r.stderr
    moved = r.stdout.split("moved_to=")[1].strip()
    assert os.path.exists(os.path.join(moved, "data.mdb")) and not os.path.exists(os.path.join(wal, name, "slot-00000"))
    gone = _rks("inspect", wal, "--sink", name, "--json")
    assert gone.exit_code == 0 and json.loads(gone.stdout)["slots"] == []  # nothing left but quarantine/


def test_errors_are_one_line_with_a_non_zero_exit(broker, topic, tmp_path):
    wal, name = str(tmp_path / "wal"), "cli5"
    good = _conf(tmp_path, "good", broker.bootstrap)
    empty = tmp_path / "empty"
    empty.mkdir()
    afile = tmp_path / "afile"
    afile.write_text("x")
    for args in (("inspect", str(empty)), ("inspect", str(afile)), ("replay", str(empty), "--sink", name,
                                                                    "--kafka-conf", good),
                 ("dead-letters", str(tmp_path / "nope"), "--sink", name)):
        r = _rks(*args)
        assert r.exit_code == 2 and len(r.stderr.splitlines()) == 1, (args, r.stderr)
        assert "not a WAL directory" in r.stderr or "no such directory" in r.stderr
    _dead_slot(wal, name, topic, 1, 0, 100)
    for args in (("inspect", wal, "--sink", "other"), ("replay", wal, "--sink", "other", "--kafka-conf", good),
                 ("dead-letters", wal, "--sink", "other"), ("quarantine", wal, "--sink", "other", "0")):
        r = _rks(*args)
        assert r.exit_code == 2 and r.stderr.strip() == f"rks: error: sink 'other' has no slots under {wal} " \
                                                        f"(sinks there: {name})", (args, r.stderr)
    conf_no_env = _rks("replay", wal, "--sink", name, "--kafka-conf", good)  # the variable is set by _rks ...
    assert conf_no_env.exit_code == 0
    unset = CliRunner().invoke(main, ["replay", wal, "--sink", name, "--kafka-conf", good],
                                env={"RKS_TEST_SECRET": None})
    assert unset.exit_code == 2 and "environment variable RKS_TEST_SECRET is not set" in unset.stderr

    # A slot of a newer WAL format: named, never read, never changed.
    _dead_slot(wal, name, topic, 2, 0, 100)
    path = os.path.join(wal, name, "slot-00000")
    env = lmdb.open(path, max_dbs=4)
    with env.begin(write=True) as txn:
        txn.put(b"format", b"9", db=env.open_db(b"meta", txn=txn))
        chunks_before = txn.stat(env.open_db(b"chunks", txn=txn))["entries"]
    env.close()
    assert chunks_before > 0
    r = _rks("inspect", wal, "--json")
    assert r.exit_code == 1 and "format version '9'" in r.stderr and len(r.stderr.splitlines()) == 1
    assert "format version '9'" in json.loads(r.stdout)["slots"][0]["error"]
    r = _rks("replay", wal, "--sink", name, "--kafka-conf", good)
    assert r.exit_code == 1 and "format version '9'" in r.stderr and "records=0" in r.stdout
    env = lmdb.open(path, max_dbs=4)
    with env.begin() as txn:
        assert txn.stat(env.open_db(b"chunks", txn=txn))["entries"] == chunks_before
    env.close()


def test_abort_transactions_and_module_entry_point(broker, topic, tmp_path):
    good = _conf(tmp_path, "good", broker.bootstrap)
    r = _rks("abort-transactions", "--sink", "eo", "--kafka-conf", good,
             "--lane", "rks-eo.eo:run1:0", "--lane", "rks-eo.eo:run1:1")
    assert r.exit_code == 0, r.stderr
    assert "lane=rks-eo.eo:run1:0 initialised" in r.stdout and "lane=rks-eo.eo:run1:1 initialised" in r.stdout
    assert "lanes=2" in r.stdout
    for other in ("rks-eo.x:r:0", "rks-eo.eo.run1.1", "rks-eo.eo-2:r:0"):
        r = _rks("abort-transactions", "--sink", "eo", "--kafka-conf", good, "--lane", other)
        assert r.exit_code == 2 and "is not a lane of sink 'eo'" in r.stderr
    proc = subprocess.run([sys.executable, "-m", "spark_recoverable_sink", "inspect", str(tmp_path)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and proc.stderr.startswith("rks: error: ") and "not a WAL directory" in proc.stderr


def test_replay_exactly_once_commits_units_in_their_lane(broker, topic, tmp_path):
    wal, name = str(tmp_path / "wal"), "cli6"
    opts = {"name": name, "kafka_conf": {"bootstrap.servers": NOWHERE}, "wal_dir": wal, "ack_timeout_s": 1,
            "records_topic": topic, "topic": topic, "guarantee": "exactly_once"}
    proc = subprocess.run([sys.executable, "-m", "tests.programs.cli_writer", json.dumps(opts), "5", "0", "300"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert _slots(wal)[0]["pending_records"] == 300
    good = _conf(tmp_path, "good", broker.bootstrap)
    r = _rks("replay", wal, "--sink", name, "--kafka-conf", good, "--exactly-once", "--topic", topic)
    assert r.exit_code == 0, r.stderr
    assert "records=300 delivered=300 dead_lettered=0 pending=0" in r.stdout
    got = read_topic(broker.bootstrap, topic, expected=300, isolation="read_committed")
    want_ids = ids_of(name, "r1", 5, 0, cli_batches(topic, 0, 300), topic)
    assert len(set(want_ids)) == 300
    assert got.distinct_ids() == set(want_ids) and got.duplicates() == 0
    assert _slots(wal) == {}  # drained, and removed: nothing in it was left to keep
    again = _rks("replay", wal, "--sink", name, "--kafka-conf", good, "--exactly-once", "--topic", topic)
    assert again.exit_code == 0 and "records=0" in again.stdout  # nothing left to publish twice


def test_inspect_after_a_replay_drained_every_slot_reports_nothing_pending(broker, topic, tmp_path):
    wal, name = str(tmp_path / "wal"), "cli7"
    _dead_slot(wal, name, topic, 3, 0, 200)  # ack_timeout_s=0, no broker: all 200 stay pending
    _dead_slot(wal, name, topic, 4, 1, 100)  # takes the dead slot 0 over: still nothing reaches Kafka
    assert {i: s["pending_records"] for i, s in _slots(wal).items()} == {0: 300}
    r = _rks("replay", wal, "--sink", name, "--kafka-conf", _conf(tmp_path, "good", broker.bootstrap))
    assert r.exit_code == 0, r.stderr
    assert "records=300 delivered=300 dead_lettered=0 pending=0" in r.stdout
    assert read_topic(broker.bootstrap, topic, expected=300).duplicates() == 0
    assert not os.path.exists(os.path.join(wal, name, "slot-00000.lock"))  # drained, and removed

    for extra in ((), ("--sink", name)):
        r = _rks("inspect", wal, "--json", *extra)
        assert r.exit_code == 0, r.stderr
        assert json.loads(r.stdout) == {"wal_dir": wal, "slots": [], "chunks_set_aside": []}
        human = _rks("inspect", wal, *extra)
        assert human.exit_code == 0, human.stderr
        assert "pending records: 0 in slots of dead owners; slots owned by live processes: 0" in human.stdout

    # What never held a WAL is still refused: an empty directory, files, a directory of other things.
    empty, other = tmp_path / "empty", tmp_path / "other"
    empty.mkdir()
    other.mkdir()
    (other / "notes.txt").write_text("x")
    (other / "data").mkdir()
    (other / "data" / "part-0.parquet").write_text("x")
    for path in (empty, other):
        r = _rks("inspect", str(path), "--json")
        assert r.exit_code == 2 and "is not a WAL directory" in r.stderr and r.stdout == "", r.stderr


def test_replay_exactly_once_writes_its_markers_to_the_sinks_own_marker_topic(broker, topic, tmp_path):
    from spark_recoverable_sink.delivery.exactly_once.marker_reads import lane_markers

    wal, name, markers = str(tmp_path / "wal"), "cli8", f"{topic}-markers"
    opts = {"name": name, "kafka_conf": {"bootstrap.servers": NOWHERE}, "wal_dir": wal, "ack_timeout_s": 1,
            "records_topic": topic, "topic": topic, "guarantee": "exactly_once", "marker_topic": markers}
    proc = subprocess.run([sys.executable, "-m", "tests.programs.cli_writer", json.dumps(opts), "5", "0", "300"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    good = _conf(tmp_path, "good", broker.bootstrap)
    r = _rks("replay", wal, "--sink", name, "--kafka-conf", good, "--exactly-once", "--topic", topic,
             "--marker-topic", markers)
    assert r.exit_code == 0, r.stderr
    assert "records=300 delivered=300 dead_lettered=0 pending=0" in r.stdout
    assert read_topic(broker.bootstrap, topic, expected=300, isolation="read_committed").duplicates() == 0
    conf = {"bootstrap.servers": broker.bootstrap}
    own = SinkConfig.build(name, conf, wal, topic=topic, guarantee="exactly_once", marker_topic=markers)
    default = SinkConfig.build(name, conf, wal, topic=topic, guarantee="exactly_once")
    assert lane_markers(own, "r1", [0])[0].batch == 5  # the unit's marker, where the sink reads it
    assert lane_markers(default, "r1", [0])[0] is None  # and not in the default marker topic
