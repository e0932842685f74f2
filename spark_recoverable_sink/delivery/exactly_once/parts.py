"""Steps 2-4 of the exactly-once commit for a unit too large for one transaction: one bucket per transaction.

:mod:`.subunits` says what a part is (a bucket of records, the same in every run of the batch); here they are
planned (:func:`plan_parts`) and committed (:func:`commit_parts`) over the lane's states (:mod:`.lane`).
Where it runs: a worker, under the unit book's lock; nothing pickles.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import pyarrow as pa

from ... import _points
from ...config import SinkConfig
from ...deadline import Deadline
from ...wal.format import decode_chunk
from . import subunits
from .lane import (
    MISMATCH,
    Decided,
    Lane,
    LaneState,
    StepTimeout,
    chunk_terms,
    left,
    produce_unit,
    send_marker,
)
from .markers import Marker
from .subunits import Partial

__all__ = ["Parts", "plan_parts", "commit_parts", "uncommitted_rows"]

log = logging.getLogger(__name__)
_MASK64 = (1 << 64) - 1


# -- steps 2-4 in parts: a unit too large for one transaction ------------------------------------------------------


@dataclass
class Parts:
    """A unit's plan of parts: ``count`` buckets, ``next`` the first not committed, ``sums`` each bucket's digest,
    ``base`` the lane's last complete marker (every partial commit keeps it in the lane's offset); ``owner`` the
    unit's (slot, attempt). Kept on the lane between tries while its marker stays as this producer left it."""

    count: int
    next: int
    sums: list[int]
    base: Marker | None
    owner: tuple[str, Any] = ("", None)

    def prefix(self, n: int) -> int:
        """The digest of buckets ``0..n-1``."""
        return sum(self.sums[:n]) & _MASK64


def plan_parts(unit: Any, marker: Marker | None, txn_ms: int = 60000) -> Parts | None:
    """How ``unit`` is committed in parts after ``marker`` (step 2); ``None``: in one transaction.

    A unit that fits one transaction (:func:`.subunits.in_parts`), with no
    partial marker of its batch, is one transaction. Else its bucket count is
    the partial marker's (a re-run's) or its own size's, and the sum of each
    bucket's terms is read from the WAL. ``txn_ms``: the lane's
    ``transaction.timeout.ms``; a try of ``unit`` failed before when
    ``unit.last_error`` says so.

    Raises:
        Decided: ``MISMATCH`` (``unit.why`` says why): the buckets a partial marker shows committed hold other
            records than this unit's (the re-run brought other records): nothing more of the unit is produced.
    """
    done = marker.partial if marker is not None and marker.partial is not None else None
    if done is not None and done.batch != unit.batch:
        done = None
    size = sum(n for _ck, n in unit.chunks)
    if done is None and not subunits.in_parts(size, txn_ms, bool(unit.last_error)):
        return None
    count = done.count if done is not None else subunits.bucket_count(size, subunits.part_bytes(size, txn_ms))
    if count <= 1:
        return None
    sums = [0] * count
    for ck, _size in unit.chunks:
        raw = unit.wal.read_chunk(ck)
        if raw is None:
            raise RuntimeError(f"WAL slot {unit.wal.path}: chunk {ck} of a committed attempt is missing")
        t = chunk_terms(decode_chunk(raw), ck.first_seq)
        b = (t % np.uint64(count)).astype(np.int64)
        for k in np.unique(b).tolist():
            sums[k] = (sums[k] + int(t[b == k].sum(dtype=np.uint64))) & _MASK64
    base = marker if marker is not None and marker.batch >= 0 else None
    parts = Parts(count, 0 if done is None else done.k + 1, sums, base, (unit.wal.path, unit.key))
    if done is not None and parts.prefix(parts.next) != done.digest:
        unit.why = (f"its lane committed buckets 0..{done.k} of {count} of batch {unit.batch} with other records "
                    "(another digest of their ids)")
        raise Decided(MISMATCH)
    return parts


def commit_parts(config: SinkConfig, lane: Lane, lid: str, unit: Any, deadline: Deadline) -> None:
    """Every bucket of ``lane.parts`` from ``next`` on, one transaction each: begin, produce the bucket's records
    chunk by chunk (resuming after the chunks already in it), put in the partial marker (the last bucket: the
    complete one), commit. The lane is idle, or holds this unit's own open transaction.

    Raises:
        StepTimeout: no time left before a bucket (resumed by a later attempt, from the marker).
        confluent_kafka.KafkaException: a client call or a record failed (``lane.failures``; the lane doomed).
    """
    parts = lane.parts
    assert parts is not None
    owner = (unit.wal.path, unit.key)
    while parts.next < parts.count:
        j = parts.next
        unit.parts = (parts.count, j)
        if lane.idle:
            if deadline.expired():
                raise StepTimeout(f"no time left for bucket {j} of {parts.count} (resumed later)")
            lane.begin(owner)
            lane.parts = parts
        if lane.state is LaneState.OPEN:
            produce_unit(config, lane, unit, deadline, j, parts.count)
            lane.produced(owner)
        done = Partial(unit.batch, j, parts.count, parts.prefix(j + 1)) if j < parts.count - 1 else None
        if lane.state is LaneState.PRODUCED:
            send_marker(config, lane, lid, unit, deadline, done, parts.base)
        _points.point("eo.committing_part", batch=unit.batch, lane=unit.lane, part=j, parts=parts.count)
        lane.commit(left(deadline, "commit_transaction"))  # an error from here on: a new producer finalizes it
        parts.next = j + 1
        lane.parts = parts
    lane.parts = None
    unit.parts = (parts.count, parts.count)


def uncommitted_rows(unit: Any, batch: pa.RecordBatch, first_seq: int) -> Callable[[int], bool]:
    """Whether row ``i`` of a chunk of ``unit`` is not in Kafka: all of them, unless buckets were committed."""
    if unit.parts is None or unit.parts[1] == 0:
        return lambda i: True
    count, done = unit.parts
    b = chunk_terms(batch, first_seq) % np.uint64(count)
    return lambda i: int(b[i]) >= done

