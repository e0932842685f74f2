"""Tier 1: a lane's plan of parts belongs to one unit (delivery/exactly_once/parts.py; scripted clients, no broker).

A unit's plan (its bucket count and sums) stays on its lane between tries.
Another unit of the same lane that opened an inline transaction (a retry of
the same task in this worker) must never be committed by that plan: its
transaction already holds every record, and committing it as part 0 then
producing parts 1.. again duplicated them.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from spark_recoverable_sink.config import SinkConfig
from spark_recoverable_sink.deadline import Deadline
from spark_recoverable_sink.delivery.exactly_once import subunits
from spark_recoverable_sink.delivery.exactly_once.commit import COMMITTED, Committer, Unit
from spark_recoverable_sink.delivery.exactly_once.lane import Lane, LaneState
from spark_recoverable_sink.delivery.exactly_once.parts import plan_parts
from spark_recoverable_sink.ids import new_occurrences, unit_digest, with_ids
from spark_recoverable_sink.wal.format import AttemptKey, ChunkKey, encode_chunk
from tests.record_ids import TEST_IDS

N = 1000
_FPS = np.arange(1, N + 1, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)
_IDS = with_ids(pa.RecordBatch.from_arrays([pa.array([b"v%d" % i for i in range(N)], pa.binary())], names=["value"]),
                TEST_IDS, new_occurrences())
BATCH = _IDS.set_column(_IDS.schema.get_field_index("rks_fp"), pa.field("rks_fp", pa.uint64(), nullable=False),
                        pa.array(_FPS, pa.uint64())).replace_schema_metadata(_IDS.schema.metadata)  # known prints
RAW = bytes(encode_chunk(BATCH))


class Wal:
    def __init__(self, path: str) -> None:
        self.path = path

    def read_chunk(self, ck):
        return RAW


class Producer:
    """Counts the records of the sink's topic in committed transactions."""

    def __init__(self) -> None:
        self.open = 0
        self.committed = 0
        self.commits = 0

    def begin_transaction(self):
        self.open = 0

    def produce_chunk(self, rid, cb, batch, index, topic, *a):
        if topic == "t":
            self.open += batch.num_rows
        return batch.num_rows, []

    def poll(self, timeout):
        return []

    def send_offsets(self, *a):
        pass

    def commit_transaction(self, timeout):
        self.committed += self.open
        self.commits += 1
        self.open = 0


def test_a_plan_of_parts_left_by_another_unit_never_commits_an_inline_transaction(monkeypatch):
    cfg = SinkConfig.build("parts", {"bootstrap.servers": "127.0.0.1:1"}, "/tmp/unused-parts", topic="t",
                           guarantee="exactly_once")
    committer = Committer(cfg)
    monkeypatch.setattr(subunits, "SUB_UNIT_BYTES", len(RAW) // 2 + 1)  # this unit: 2 parts
    monkeypatch.setattr(subunits, "PARTS_RATE", 1)  # and in parts from its first try
    digest = unit_digest(BATCH, 0)
    earlier = Unit(Wal("slot-a"), AttemptKey(5, 0, 1), "r", N, [(ChunkKey(5, 0, 0, 1), len(RAW))], digest=digest)
    lane = Lane(Producer(), None)
    lane.state, lane.swept_topics = LaneState.SWEPT, {"t"}
    lane.parts = plan_parts(earlier, None)  # its try planned 2 parts, then ran out of time before part 0
    assert lane.parts.count == 2 and lane.owner is None
    # the same batch's next attempt in this worker: its inline transaction holds every record
    mine = Unit(Wal("slot-b"), AttemptKey(5, 0, 2), "r", N, [(ChunkKey(5, 0, 0, 2), len(RAW))], digest=digest, own=True)
    lane.begin(("slot-b", mine.key))
    lane.producer.produce_chunk(0, None, BATCH, None, "t")
    lane.chunks_in = 1
    lane.produced(("slot-b", mine.key))
    assert committer._commit(lane, "rks-eo.parts:r:0", mine, Deadline(30)) == COMMITTED
    assert (lane.producer.committed, lane.producer.commits) == (N, 1)
    committer.close()
