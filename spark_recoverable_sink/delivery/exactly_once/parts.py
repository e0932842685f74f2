"""Exactly-once: a unit too large for one transaction, committed in parts, one bucket per transaction.

:mod:`.subunits` says what a part is (a bucket of records, the same in
every run of the batch) and how a partial marker reads. Here the commit step
of :class:`.transactions.Committer` publishes them:

1. :func:`plan_parts`, in step 2 once the lane's marker is read: a unit that
   fits one transaction (:func:`.subunits.in_parts`), with no partial marker
   of its batch, is one transaction as before (``None``). Else its bucket
   count is the partial marker's (a re-run's) or its own size's, and the sum
   of each bucket's terms is read from the WAL; a partial marker whose
   buckets ``0..k`` sum to another digest is a *mismatch* (the re-run brought
   other records): nothing more of the unit is produced.
2. :func:`commit_parts`, for each bucket from the first not committed: begin a
   transaction, produce the bucket's records chunk by chunk (resuming after
   the chunks already in it), put in the partial marker (the last bucket: the
   complete one), commit. A failure or a deadline leaves the unit in the WAL;
   the next attempt reads the marker and goes on from the bucket after it.

Where it runs: the executor, under the unit book's lock. Nothing here pickles.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from functools import partial
from typing import Any, Callable

import numpy as np
import pyarrow as pa

from ... import _points
from ...arrays import column
from ...config import SinkConfig
from ...deadline import Deadline
from ...ids import digest_terms
from ...wal.format import decode_chunk
from . import subunits
from .lanes import Lane, on_delivery, send_marker
from .markers import Marker, decode_offset, encode_offset
from .steps import MISMATCH, Decided, StepTimeout, left
from .subunits import Partial, encode_partial, encode_partial_record
from .sweep import unswept_topics

__all__ = ["Parts", "plan_parts", "commit_parts", "produce_unit", "chunk_terms", "uncommitted_rows"]

_MASK64 = (1 << 64) - 1


@dataclass
class Parts:
    """A unit's plan of parts: ``count`` buckets, ``next`` the first not committed, ``sums`` each bucket's digest,
    ``base`` the lane's last complete marker (every partial commit keeps it in the lane's offset); ``ident`` the
    unit's (slot, attempt). Kept on the lane between tries while its marker stays as this producer left it."""

    count: int
    next: int
    sums: list[int]
    base: Marker | None
    ident: tuple[str, Any] = ("", None)

    def prefix(self, n: int) -> int:
        """The digest of buckets ``0..n-1``."""
        return sum(self.sums[:n]) & _MASK64


def chunk_terms(batch: pa.RecordBatch, first_seq: int) -> np.ndarray:
    """Each record's term of the unit digest (:func:`.subunits.terms`); its bucket is the term mod the count."""
    return subunits.terms(*digest_terms(batch, first_seq))


def plan_parts(unit: Any, marker: Marker | None, txn_ms: int = 60000) -> Parts | None:
    """Step 1: how ``unit`` is committed in parts after ``marker``; ``None``: in one transaction. ``txn_ms``: the
    lane's ``transaction.timeout.ms``; a try of ``unit`` failed before when ``unit.last_error`` says so.

    Raises:
        Decided: ``MISMATCH`` (``unit.why`` says why): the buckets a partial marker shows committed hold other
            records than this unit's.
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


def _base_offset(base: Marker | None) -> int:
    if base is None:
        return 0
    return encode_offset(base.batch, base.full_digest if base.full_digest is not None else base.digest32)


def commit_parts(config: SinkConfig, lane: Lane, lid: str, unit: Any, deadline: Deadline) -> None:
    """Step 2: every bucket of ``lane.parts`` from ``next`` on, one transaction each (the caller set ``lane.open``
    to None or to this unit's own open transaction).

    Raises:
        StepTimeout: no time left before a bucket (resumed by a later attempt, from the marker).
        confluent_kafka.KafkaException: a client call or a record failed (``lane.failures``, ``lane.must_abort``).
    """
    parts: Parts = lane.parts
    ident = (unit.wal.path, unit.key)
    p = lane.producer
    while parts.next < parts.count:
        j = parts.next
        unit.parts = (parts.count, j)
        if lane.open is None:
            if deadline.expired():
                raise StepTimeout(f"no time left for bucket {j} of {parts.count} (resumed later)")
            p.begin_transaction()
            lane.open, lane.failures, lane.parts = ident, [], parts
        if not lane.produced:
            produce_unit(config, lane, unit, deadline, j, parts.count)
            lane.produced = True
        done = Partial(unit.batch, j, parts.count, parts.prefix(j + 1)) if j < parts.count - 1 else None
        if not lane.offsets_sent:
            if done is not None:
                _send_partial(config, lane, lid, parts.base, done, unit.run, deadline)
            else:
                send_marker(config, lane, lid, Marker(unit.batch, unit.digest & 0xFFFFFFFF, unit.rows, unit.digest),
                            unit.run, partial(left, deadline))
            lane.offsets_sent = True
        known = (decode_offset(_base_offset(parts.base), encode_partial(done)) if done is not None
                 else Marker(unit.batch, encode_offset(unit.batch, unit.digest) & 0xFFFFFFFF))
        _points.point("eo.committing_part", batch=unit.batch, partition=unit.partition, part=j, parts=parts.count)
        timeout = left(deadline, "commit_transaction")
        lane.ending = True  # an error from here on: a new producer settles it (note_error)
        p.commit_transaction(timeout)
        lane.ending = False
        lane.known = known
        lane.reset()
        parts.next = j + 1
        lane.parts = parts
    lane.parts = None
    unit.parts = (parts.count, parts.count)


def _send_partial(config: SinkConfig, lane: Lane, lid: str, base: Marker | None, done: Partial, run: str,
                  deadline: Deadline) -> None:
    """A partial marker into the open transaction: its record (format 2), and the lane's offset, unchanged, with
    the partial marker as the offset's metadata."""
    record = encode_partial_record(None if base is None else (base.batch, base.digest32), done, run,
                                   int(time.time() * 1000))
    batch = pa.RecordBatch.from_arrays([column([record], pa.binary()), column([lid.encode()], pa.binary()),
                                        column([0], pa.int32())], names=["value", "key", "partition"])
    _n, failed = lane.producer.produce_chunk(lane.round_for(-1), partial(on_delivery, lane, -1), batch, None,
                                             config.marker_topic, config.id_header, f"{lid}:".encode(), 0,
                                             left(deadline, "marker"))
    lane.failures.extend((e, j, -1) for j, e in failed)
    offset, meta = _base_offset(base), encode_partial(done)
    lane.producer.send_offsets(lid, lane.consumer, [(config.marker_topic, 0, offset, meta)],
                               left(deadline, "send_offsets_to_transaction"))


def produce_unit(config: SinkConfig, lane: Lane, unit: Any, deadline: Deadline, j: int = 0, count: int = 1) -> None:
    """The unit's records (``count`` > 1: bucket ``j``'s) into the open transaction, chunk by chunk from the WAL,
    after the chunks already in it; the deadline is checked between chunks only.

    Raises:
        StepTimeout: no time left, or a chunk writes topics its lane has not swept (resumed by a later attempt).
        confluent_kafka.KafkaException: a record failed (``lane.failures``; the transaction must abort).
    """
    for i in range(lane.chunks_in, len(unit.chunks)):
        if lane.failures:
            break
        if deadline.expired():
            raise StepTimeout(f"no time left to produce the unit (chunks {i}/{len(unit.chunks)} in; resumed later)")
        ck = unit.chunks[i][0]
        raw = unit.wal.read_chunk(ck)
        if raw is None:
            raise RuntimeError(f"WAL slot {unit.wal.path}: chunk {ck} of a committed attempt is missing")
        batch = decode_chunk(raw)
        rows = None if count <= 1 else np.flatnonzero(chunk_terms(batch, ck.first_seq) % np.uint64(count)
                                                       == np.uint64(j))
        n = 0
        if rows is None or len(rows):  # the bucket's rows by index: a row keeps its id (and position) in the chunk
            sub = batch if rows is None else batch.take(pa.array(rows))
            if unswept_topics(lane, sub, config.topic):  # swept first by the next attempt
                lane.must_abort = True
                raise StepTimeout(f"chunk {i} writes topics {sorted(lane.need_topics)} its lane has not swept yet")
            n, failed = lane.producer.produce_chunk(
                lane.round_for(i), partial(on_delivery, lane, i), batch, rows, config.topic, config.id_header,
                b"", ck.first_seq, max(0.5, deadline.cap(30.0)))
            lane.failures.extend((e, r, i) for r, e in failed)
            lane.collect(lane.producer.poll(0))
        if not lane.failures:
            lane.chunks_in = i + 1
        _points.point("eo.produced_chunk", batch=unit.batch, partition=unit.partition, rows=ck.first_seq + n,
                      records=n)
    if lane.failures:  # the transaction cannot commit: aborted, then the unit is tried again (or refused)
        from confluent_kafka import KafkaException

        lane.must_abort = True
        raise KafkaException(lane.failures[0][0])


def uncommitted_rows(unit: Any, batch: pa.RecordBatch, first_seq: int) -> Callable[[int], bool]:
    """Whether row ``i`` of a chunk of ``unit`` is not in Kafka: all of them, unless buckets were committed."""
    if unit.parts is None or unit.parts[1] == 0:
        return lambda i: True
    count, done = unit.parts
    b = chunk_terms(batch, first_seq) % np.uint64(count)
    return lambda i: int(b[i]) >= done
