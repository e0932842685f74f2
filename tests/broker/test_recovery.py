"""Tier 2: recovery of slots whose bytes are damaged."""

from __future__ import annotations

import os

import lmdb
import pytest

from spark_recoverable_sink.config import SinkConfig
from spark_recoverable_sink.ids import new_occurrences, with_ids
from spark_recoverable_sink.ops.inspect import chunks_set_aside, inspect_wal
from spark_recoverable_sink.schema import normalize_batch
from spark_recoverable_sink.task.runtime import reset_runtimes
from spark_recoverable_sink.task.writer import write_partition
from spark_recoverable_sink.wal.format import ChunkKey, encode_chunk
from spark_recoverable_sink.wal.log import Wal
from spark_recoverable_sink.wal.quarantine import quarantine_slot
from spark_recoverable_sink.wal.records import OPEN, AttemptState
from spark_recoverable_sink.wal.slots import sink_dir, slot_paths

from ..kafka_helpers import read_topic
from .rows import batches
from tests.record_ids import TEST_IDS

pytestmark = pytest.mark.broker


def _damaged_slot(wal_dir: str, name: str) -> str:
    """Slot 0 with one committed attempt whose chunk bytes are then overwritten (owner dead)."""
    import pyarrow as pa

    path = slot_paths(sink_dir(wal_dir, name), 0)[1]
    open(slot_paths(sink_dir(wal_dir, name), 0)[0], "w").close()
    wal = Wal(path, sink_name=name, map_size=64 << 20, sync=True)
    key = ChunkKey(1, 0, 0, wal.reserve_gen())
    chunk = encode_chunk(with_ids(normalize_batch(pa.RecordBatch.from_pydict({"value": [b"a", b"b"]}), "t", 0, "r"),
                                  TEST_IDS, new_occurrences()))
    wal.append(key, chunk, new_attempt=AttemptState(OPEN, 0, 0, 0.0))
    wal.commit_attempt(key.attempt, 0, 2, 0.0)
    wal.close()
    env = lmdb.open(path, max_dbs=4)
    db = env.open_db(b"chunks")
    with env.begin(write=True) as txn:
        damaged = bytearray(chunk)
        damaged[-5] ^= 0xFF
        txn.put(key.pack(), bytes(damaged), db=db)
    env.close()
    return path


def test_a_damaged_chunk_of_its_own_slot_is_set_aside_named_and_the_slot_goes_on(broker, topic, tmp_path):
    name = "damaged"
    bad = _damaged_slot(str(tmp_path), name)
    cfg = SinkConfig.build(name, {"bootstrap.servers": broker.bootstrap}, str(tmp_path), topic=topic)
    report = write_partition(cfg, 2, 0, 0, batches(0, 100, 10))
    # the damaged chunk is set aside with its bytes; the task works in the same slot and names the chunk
    assert report.acked == 100 and report.slot == bad
    [aside] = chunks_set_aside(str(tmp_path), name)
    assert "checksum" in aside["why"] and any(aside["file"] in p for p in report.problems), report.problems
    assert os.path.getsize(aside["file"]) > 0  # nothing was dropped: its bytes are kept
    assert len(read_topic(broker.bootstrap, topic, expected=100).distinct_ids()) == 100
    reset_runtimes()  # the worker goes away: the slot can be inspected and moved aside by an operator
    info = {r.slot: r for r in inspect_wal(str(tmp_path), name)}
    assert info[0].error is None  # the slot itself is clean now
    moved = quarantine_slot(str(tmp_path), name, 0)
    assert os.path.exists(os.path.join(moved, "data.mdb")) and not os.path.exists(bad)


def test_quarantine_refuses_a_live_owner(broker, topic, tmp_path):
    cfg = SinkConfig.build("live", {"bootstrap.servers": broker.bootstrap}, str(tmp_path), topic=topic)
    report = write_partition(cfg, 1, 0, 0, batches(0, 10, 10))
    index = int(os.path.basename(report.slot).split("-")[1])
    from spark_recoverable_sink.errors import WalError

    with pytest.raises(WalError, match="live process"):
        quarantine_slot(str(tmp_path), "live", index)
