"""The fault suite's end-of-test accounting: a shortfall is classified, never just counted."""

from __future__ import annotations

from tests.faults.readback import tally
from tests.faults.slots import explain_missing
from tests.kafka_helpers import Record, TopicContents
from tests.record_ids import TEST_IDS


def _rec(partition: int, offset: int, row: int) -> Record:
    return Record("t", partition, offset, str(row).encode(), b"v", [], 0)


def test_tally_reports_per_partition_counts_offset_gaps_and_reader_errors():
    c = TopicContents(records=[_rec(0, 0, 0), _rec(0, 1, 1), _rec(0, 4, 4), _rec(1, 2, 5)],
                      errors=["t[1]: KafkaError{code=OFFSET_OUT_OF_RANGE}"])
    t = tally(c, range(6))
    assert t.lost == 2 and t.lost_rows == [2, 3]
    assert t.per_partition == {0: 3, 1: 1}
    assert t.offset_gaps == {0: [(2, 3)], 1: [(0, 1)]}
    assert t.errors == ["t[1]: KafkaError{code=OFFSET_OUT_OF_RANGE}"]


def test_missing_rows_in_no_wal_and_no_offset_gap_are_called_a_loss(tmp_path):
    t = tally(TopicContents(records=[_rec(0, 0, 0), _rec(0, 1, 1)]), range(3))
    why = explain_missing(t, str(tmp_path), "s", [])
    assert why.startswith("LOSS") and "missing=1" in why and "nowhere=1" in why


def test_missing_rows_in_no_wal_are_called_a_loss_even_with_offset_gaps(tmp_path):
    t = tally(TopicContents(records=[_rec(0, 0, 0), _rec(0, 2, 2)]), range(3))
    assert t.offset_gaps == {0: [(1, 1)]}
    assert explain_missing(t, str(tmp_path), "s", []).startswith("LOSS")


def test_missing_rows_still_in_a_wal_slot_are_called_pending(tmp_path):
    import pyarrow as pa

    from spark_recoverable_sink.schema import normalize_batch
    from spark_recoverable_sink.ids import new_occurrences, with_ids
    from spark_recoverable_sink.wal.format import ChunkKey, encode_chunk
    from spark_recoverable_sink.wal.log import Wal
    from spark_recoverable_sink.wal.records import OPEN, AttemptState
    from spark_recoverable_sink.wal.slots import sink_dir, slot_paths

    lock_path, wal_path = slot_paths(sink_dir(str(tmp_path), "s"), 0)
    open(lock_path, "a").close()
    wal = Wal(wal_path, sink_name="s", map_size=64 << 20, sync=False)
    key = ChunkKey(1, 0, 0, wal.reserve_gen())
    rb = pa.RecordBatch.from_pydict({"key": [b"1", b"2"], "value": [b"a", b"b"]})
    chunk = encode_chunk(with_ids(normalize_batch(rb, "t", 0, "r"), TEST_IDS, new_occurrences()))
    wal.append(key, chunk, new_attempt=AttemptState(OPEN, 0, 0, 0.0))
    wal.close()
    t = tally(TopicContents(records=[_rec(0, 0, 0)]), range(3))
    why = explain_missing(t, str(tmp_path), "s", [])
    assert why.startswith("PENDING") and "in_wal=2" in why and "slot 0 free (owner dead)" in why, why
