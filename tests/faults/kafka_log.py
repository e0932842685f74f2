"""A partition's log as a node holds it on disk, read-only: its record batches, how each transaction ended, and its
transaction index as Apache Kafka's fetch path reads it.

What a ``read_committed`` consumer is shown is the broker's doing twice over:
the records up to the last stable offset, less the aborted transactions the
fetch response lists, which the leader takes from its ``.txnindex`` files
(``TransactionIndex.collectAbortedTxns``). An exactly-once scenario that finds
a record it did not expect asks this module what the log says of it: was it
committed (the sink's doing) or aborted (then a reader was shown an aborted
record: the broker's)? And which replica's index would leave its aborted
transaction out of a fetch response.

Formats (Apache Kafka 4.x, ``DefaultRecordBatch``, ``TransactionIndex``):

* a record batch: base offset (int64), length (int32), partition leader
  epoch (int32), magic (int8, 2), CRC (uint32), attributes (int16: 0x10
  transactional, 0x20 control), last offset delta (int32), two timestamps
  (int64), producer id (int64), producer epoch (int16), base sequence
  (int32), record count (int32), the records; a control batch's one record's
  key is version (int16) and type (int16: 0 ABORT, 1 COMMIT);
* a transaction index entry (34 bytes): version (int16), producer id, first
  offset, last offset, last stable offset (int64 each).

Test code only.
"""

from __future__ import annotations

import bisect
import glob
import os
import struct
from dataclasses import dataclass

__all__ = ["Batch", "AbortedTxn", "batches", "aborted_index", "collect_aborted", "Fates", "omitting_entry"]

_HEADER = struct.Struct(">qiibIhiqqqhii")  # base offset .. record count: 61 bytes
_TXN_ENTRY = struct.Struct(">hqqqq")
_TRANSACTIONAL, _CONTROL = 0x10, 0x20


@dataclass(frozen=True)
class Batch:
    """One record batch of a partition's log."""

    base: int
    last: int
    producer_id: int
    producer_epoch: int
    transactional: bool
    control: str | None  # "COMMIT", "ABORT" (a transaction marker), or None (records)
    leader_epoch: int


@dataclass(frozen=True)
class AbortedTxn:
    """One entry of a ``.txnindex``: an aborted transaction and the last stable offset the node wrote with it."""

    producer_id: int
    first: int
    last: int
    last_stable: int


def _zigzag(raw: bytes, i: int) -> tuple[int, int]:
    n = shift = 0
    while True:
        b = raw[i]
        i += 1
        n |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return (n >> 1) ^ -(n & 1), i


def _control_type(body: bytes) -> str:
    """The type of a control batch's record (its key's second int16)."""
    _length, i = _zigzag(body, 0)
    i += 1  # attributes
    _ts, i = _zigzag(body, i)
    _delta, i = _zigzag(body, i)
    _key_len, i = _zigzag(body, i)
    kind = struct.unpack_from(">h", body, i + 2)[0]
    return {0: "ABORT", 1: "COMMIT"}.get(kind, f"type-{kind}")


def batches(partition_dir: str) -> list[Batch]:
    """Every record batch of the partition's segments in ``partition_dir``, in offset order.

    Raises:
        OSError: a segment could not be read.
        ValueError: a batch that is not of the record format v2 (magic 2).
    """
    out: list[Batch] = []
    for path in sorted(glob.glob(os.path.join(partition_dir, "*.log"))):
        with open(path, "rb") as f:
            data = f.read()
        pos = 0
        while pos + _HEADER.size <= len(data):
            (base, length, leader_epoch, magic, _crc, attrs, last_delta, _t0, _t1, pid, epoch, _seq,
             _count) = _HEADER.unpack_from(data, pos)
            if length <= 0 or pos + 12 + length > len(data):
                break  # the segment's preallocated or unwritten tail
            if magic != 2:
                raise ValueError(f"{path}: batch at offset {base} has magic {magic}, not 2")
            control = _control_type(data[pos + _HEADER.size:pos + 12 + length]) if attrs & _CONTROL else None
            out.append(Batch(base, base + last_delta, pid, epoch, bool(attrs & _TRANSACTIONAL), control,
                             leader_epoch))
            pos += 12 + length
    return out


def aborted_index(partition_dir: str) -> list[AbortedTxn]:
    """The entries of the partition's ``.txnindex`` files, segment by segment, in file order.

    Raises:
        OSError: an index could not be read.
    """
    out: list[AbortedTxn] = []
    for path in sorted(glob.glob(os.path.join(partition_dir, "*.txnindex"))):
        with open(path, "rb") as f:
            raw = f.read()
        for i in range(0, len(raw) - len(raw) % _TXN_ENTRY.size, _TXN_ENTRY.size):
            _v, pid, first, last, lso = _TXN_ENTRY.unpack_from(raw, i)
            out.append(AbortedTxn(pid, first, last, lso))
    return out


def collect_aborted(entries: list[AbortedTxn], fetch_offset: int, upper_bound: int) -> list[AbortedTxn]:
    """The aborted transactions a fetch of ``[fetch_offset, upper_bound)`` lists, as Apache Kafka's
    ``TransactionIndex.collectAbortedTxns`` picks them from ``entries``: it stops at the first entry whose last
    stable offset is at or past ``upper_bound``."""
    got = []
    for e in entries:
        if e.last >= fetch_offset and e.first < upper_bound:
            got.append(e)
        if e.last_stable >= upper_bound:
            break
    return got


def omitting_entry(entries: list[AbortedTxn], producer_id: int, first: int) -> AbortedTxn | None:
    """An entry before the aborted transaction ``(producer_id, first)`` whose last stable offset lies past ``first``:
    a fetch whose range holds ``first`` and ends in ``(first, that offset]`` stops there (:func:`collect_aborted`)
    and leaves the transaction out of its response. ``None`` when the index holds no such entry, or not the
    transaction at all."""
    if not any((x.producer_id, x.first) == (producer_id, first) for x in entries):
        return None
    for e in entries:
        if (e.producer_id, e.first) == (producer_id, first):
            return None
        if e.last_stable > first:
            return e
    return None


class Fates:
    """How each transactional record of a partition's log ended: by the next marker of its producer id after it."""

    def __init__(self, log: list[Batch]) -> None:
        self._log = log
        self._bases = [b.base for b in log]

    def batch_of(self, offset: int) -> Batch | None:
        """The batch holding ``offset`` (``None``: not in the log)."""
        i = bisect.bisect_right(self._bases, offset) - 1
        if i < 0 or not self._log[i].base <= offset <= self._log[i].last:
            return None
        return self._log[i]

    def transaction_first(self, batch: Batch) -> int:
        """The first offset of the transaction ``batch`` belongs to: its producer id's first batch after that producer
        id's previous marker (what the broker's transaction index calls the transaction's first offset)."""
        i = bisect.bisect_left(self._bases, batch.base)
        first = batch.base
        for earlier in reversed(self._log[:i]):
            if earlier.producer_id != batch.producer_id:
                continue
            if earlier.control is not None:
                break
            first = earlier.base
        return first

    def fate(self, offset: int) -> tuple[str, int | None, Batch | None]:
        """``(fate, marker offset, batch)`` of the record at ``offset``: ``COMMIT`` / ``ABORT`` (its producer id's next
        marker), ``open`` (none yet), ``plain`` (not transactional) or ``missing`` (not in the log)."""
        b = self.batch_of(offset)
        if b is None:
            return "missing", None, None
        if not b.transactional or b.control is not None:
            return "plain" if not b.transactional else b.control or "plain", None, b
        i = bisect.bisect_right(self._bases, b.base)
        for later in self._log[i:]:
            if later.producer_id == b.producer_id and later.control is not None:
                return later.control, later.base, b
        return "open", None, b
