"""Tier 1: the fault suite's readers of a broker's files and of the wire (tests/faults/kafka_log.py, cluster.py, wire.py).

A segment and a transaction index written here byte for byte, in Apache
Kafka's formats; the index reproduces what scenario 21 found on a replica
that caught up after a restart (an entry whose last stable offset lies past
the next aborted transaction of the same producer id), so that a fetch
ending in between leaves that transaction out.
"""

from __future__ import annotations

import struct

from tests.faults.cluster import java_string_hash, transaction_partition
from tests.faults.kafka_log import AbortedTxn, Fates, aborted_index, batches, collect_aborted, omitting_entry
from tests.faults.wire import _compact_str, _Reader, _uvarint


def _zigzag(n: int) -> bytes:
    return _uvarint((n << 1) ^ (n >> 63))


def _batch(base: int, pid: int, epoch: int, count: int = 1, control: int | None = None) -> bytes:
    """A record batch (magic 2) of ``count`` one-byte records, or one control record (0 ABORT, 1 COMMIT)."""
    if control is None:
        records = b"".join(_zigzag(len(body)) + body for body in
                           (b"\x00" + _zigzag(0) + _zigzag(i) + _zigzag(1) + b"k" + _zigzag(1) + b"v" + _zigzag(0)
                            for i in range(count)))
    else:
        key, value = struct.pack(">hh", 0, control), struct.pack(">hi", 0, 0)
        body = b"\x00" + _zigzag(0) + _zigzag(0) + _zigzag(len(key)) + key + _zigzag(len(value)) + value + _zigzag(0)
        records = _zigzag(len(body)) + body
    attrs = 0x10 | (0x20 if control is not None else 0)
    after_length = struct.pack(">ibIhiqqqhii", 0, 2, 0, attrs, count - 1, 0, 0, pid, epoch, 0, count) + records
    return struct.pack(">qi", base, len(after_length)) + after_length


def _write(tmp_path, log: list[bytes], index: list[tuple[int, int, int, int]]) -> str:
    d = tmp_path / "topic-0"
    d.mkdir()
    (d / "00000000000000000000.log").write_bytes(b"".join(log) + b"\x00" * 64)  # a preallocated tail
    (d / "00000000000000000000.txnindex").write_bytes(b"".join(struct.pack(">hqqqq", 0, *e) for e in index))
    return str(d)


def test_fates_and_an_index_that_leaves_an_aborted_transaction_out(tmp_path):
    # Producer 7: a transaction of 3 records aborted (offsets 0-2, ABORT 3), a sweep record aborted (4, ABORT 5),
    # a transaction committed (6-7, COMMIT 8); producer 9 begins one at 9 that is still open.
    log = [_batch(0, 7, 1, 2), _batch(2, 7, 1), _batch(3, 7, 2, control=0), _batch(4, 7, 3), _batch(5, 7, 3, control=0),
           _batch(6, 7, 3, 2), _batch(8, 7, 3, control=1), _batch(9, 9, 0)]
    # The caught-up replica's index: the first entry's last stable offset is 9 (producer 9's open transaction, in the
    # same fetch), not 4; a correct one says 4.
    d = _write(tmp_path, log, [(7, 0, 3, 9), (7, 4, 5, 9)])
    got = batches(d)
    assert [(b.base, b.last, b.producer_id, b.control) for b in got] == [
        (0, 1, 7, None), (2, 2, 7, None), (3, 3, 7, "ABORT"), (4, 4, 7, None), (5, 5, 7, "ABORT"), (6, 7, 7, None),
        (8, 8, 7, "COMMIT"), (9, 9, 9, None)]
    fates = Fates(got)
    assert fates.fate(1)[:2] == ("ABORT", 3) and fates.transaction_first(fates.batch_of(2)) == 0
    assert fates.fate(4)[:2] == ("ABORT", 5) and fates.transaction_first(fates.batch_of(4)) == 4
    assert fates.fate(7)[:2] == ("COMMIT", 8)
    assert fates.fate(9)[0] == "open" and fates.fate(42)[0] == "missing"
    entries = aborted_index(d)
    assert entries == [AbortedTxn(7, 0, 3, 9), AbortedTxn(7, 4, 5, 9)]
    # A fetch of [0, 6) stops at the first entry (9 >= 6): the sweep's transaction is not listed, its record is shown.
    assert collect_aborted(entries, 0, 6) == [AbortedTxn(7, 0, 3, 9)]
    assert collect_aborted(entries, 0, 10) == entries
    assert omitting_entry(entries, 7, 4) == AbortedTxn(7, 0, 3, 9)
    assert omitting_entry([AbortedTxn(7, 0, 3, 4), AbortedTxn(7, 4, 5, 9)], 7, 4) is None  # the correct index
    assert omitting_entry(entries, 8, 4) is None  # not in the index at all


def test_java_string_hash_and_the_transaction_log_partition():
    assert java_string_hash("") == 0
    assert java_string_hash("hello") == 99162322
    assert java_string_hash("Aa") == java_string_hash("BB") == 2112
    assert java_string_hash("polygenelubricants") == -(1 << 31)  # Integer.MIN_VALUE: Utils.abs makes it 0
    assert transaction_partition("polygenelubricants", 6) == 0
    assert transaction_partition("hello", 6) == 99162322 % 6


def test_the_wire_reader_reads_what_the_encoders_write():
    r = _Reader(_uvarint(300) + _compact_str("lane") + _uvarint(0) + _uvarint(1) + _uvarint(5) + _uvarint(2) + b"xy"
                + struct.pack(">hiq", -1, 7, 1 << 40))
    assert r.uvarint() == 300 and r.compact_str() == "lane" and r.compact_str() is None
    r.tagged()  # one tagged field (tag 5, two bytes) skipped
    assert (r.int16(), r.int32(), r.int64()) == (-1, 7, 1 << 40)
