"""Tier 1: the WAL says what it holds. A slot, or a chunk, of a version this build does not know is refused naming
the version and the slot, left as it is on disk, and nothing of it is replayed (invariant 4).

Slots are made by this build (records and attempts committed as a worker commits them), then their version is
changed in place as another build would have written it: the slot's meta ``format``, or a chunk header's version.
What reads them is what a worker runs (:class:`.WorkerRuntime`: its own slot's recovery and adoption) and
``rks inspect``.
"""

from __future__ import annotations

import hashlib
import os

import lmdb
import pytest

from spark_recoverable_sink.errors import WalFormatError
from spark_recoverable_sink.wal.format import ChunkKey
from spark_recoverable_sink.wal.log import Wal, map_size_for
from spark_recoverable_sink.wal.records import OPEN, AttemptState

from .wal_helpers import _chunk


def _config(tmp_path):
    from spark_recoverable_sink.config import SinkConfig

    return SinkConfig.build("s", {"bootstrap.servers": "127.0.0.1:9"}, str(tmp_path / "wal"), topic="t")


def _slot0(tmp_path) -> str:
    """Slot 0 of sink ``s``, whose owner died: two committed attempts of 5 records each, not acked."""
    from spark_recoverable_sink.wal.slots import sink_dir, slot_paths

    lock_path, path = slot_paths(sink_dir(str(tmp_path / "wal"), "s"), 0)
    open(lock_path, "w").close()
    wal = Wal(path, sink_name="s", map_size=map_size_for(1 << 30), sync=True)
    for batch in (1, 2):
        ck = ChunkKey(batch, 0, 0, wal.reserve_gen())
        wal.append(ck, _chunk(5), new_attempt=AttemptState(OPEN, 0, 0, 1.0))
        wal.commit_attempt(ck.attempt, 0, 5, 1.0)
    wal.close()
    return path


def _digest(path: str) -> str:
    with open(os.path.join(path, "data.mdb"), "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def _set_slot_format(path: str, version: bytes) -> None:
    env = lmdb.open(path, max_dbs=4)
    with env.begin(write=True) as txn:
        txn.put(b"format", version, db=env.open_db(b"meta", txn=txn))
    env.close()


def _set_chunk_version(path: str, batch: int, version: int) -> None:
    """The header version of batch ``batch``'s chunk (bytes 4-5 of ``RKSC | u16 version | ...``)."""
    env = lmdb.open(path, max_dbs=4)
    with env.begin(write=True) as txn:
        chunks = env.open_db(b"chunks", txn=txn)
        for key, raw in list(txn.cursor(db=chunks)):
            if ChunkKey.unpack(bytes(key)).batch == batch:
                raw = bytearray(raw)
                raw[4:6] = version.to_bytes(2, "big")
                txn.put(key, bytes(raw), db=chunks)
    env.close()


def _recovered_by_a_worker(tmp_path, path: str) -> tuple[dict[int, str], int, int]:
    """What a worker of the sink does with slot 0: ``(unreadable slots, records it replayed, its own slot)``."""
    from spark_recoverable_sink.task.runtime import WorkerRuntime

    rt = WorkerRuntime(_config(tmp_path))
    try:
        replayed = rt._replayed + rt.adopt_orphans()  # its own slot's recovery, then what a task adopts
        return dict(rt.adopter.unreadable), replayed, rt.lock.index
    finally:
        rt.close()


@pytest.mark.parametrize("version", [b"1", b"2", b"3", b"4", b"5", b"7", b"99"])
def test_a_slot_of_a_version_this_build_does_not_know_is_refused_naming_it_and_left_as_it_is(tmp_path, version):
    """Versions 1-3 are this sink's pre-release formats: version 3's chunks got other meanings (the ``rks.ids`` scope,
    the ``rks_place`` column) without a new version, so a build that reads them may send other ids. 5 and 99:
    builds after this one. None is read."""
    path = _slot0(tmp_path)
    _set_slot_format(path, version)
    before = _digest(path)
    with pytest.raises(WalFormatError) as ei:
        Wal(path, sink_name="s", map_size=map_size_for(1 << 30), sync=True)
    assert ei.value.path == path and path in str(ei.value)
    assert f"format version {version.decode()!r}" in str(ei.value), str(ei.value)
    assert getattr(ei.value, "version", None) == version.decode()
    unreadable, replayed, own = _recovered_by_a_worker(tmp_path, path)
    assert own != 0 and replayed == 0, (own, replayed)  # nothing of it replayed: the worker took another slot
    assert f"format version {version.decode()!r}" in unreadable[0] and path in unreadable[0], unreadable
    assert _digest(path) == before  # never stamped, pruned or dropped: on disk as it was


@pytest.mark.parametrize("version", [1, 7])
def test_a_chunk_of_a_version_this_build_does_not_know_refuses_its_slot_naming_it(tmp_path, version):
    """A chunk's header version is its own: 1 (the pre-release chunks, whose meaning changed under it), 7 (a later
    build's). Its slot is refused whole, named in every report, and nothing of it is replayed, set aside or dropped
    (before, such a chunk was taken for damaged bytes: set aside and deleted from the slot, the rest replayed)."""
    from spark_recoverable_sink.ops.inspect import inspect_wal

    path = _slot0(tmp_path)
    _set_chunk_version(path, 2, version)
    before = _digest(path)
    unreadable, replayed, own = _recovered_by_a_worker(tmp_path, path)
    assert own != 0 and replayed == 0, (own, replayed)
    why = unreadable.get(0, "")
    assert f"chunk of format version {version}" in why and path in why, unreadable
    assert _digest(path) == before
    assert not os.path.exists(os.path.join(str(tmp_path / "wal"), "s", "quarantine"))  # nothing set aside
    (row,) = [r for r in inspect_wal(str(tmp_path / "wal")) if r.slot == 0]
    assert row.error and f"chunk of format version {version}" in row.error and path in row.error, row


def test_a_slot_of_another_version_that_holds_nothing_is_taken_as_a_new_one_of_this_version(tmp_path):
    """What an upgrade after a drain leaves: slots of the former version holding nothing. Nothing in them can be
    misread, so a worker takes one (stamped with this version) instead of reporting it for ever. One holding a
    dead letter alone is refused like any other."""
    from spark_recoverable_sink.task.runtime import WorkerRuntime
    from spark_recoverable_sink.wal.format import WAL_VERSION
    from spark_recoverable_sink.wal.records import DeadLetter, encode_dead_letter
    from spark_recoverable_sink.wal.slots import sink_dir, slot_paths

    sdir = sink_dir(str(tmp_path / "wal"), "s")
    for index in (0, 1):
        lock_path, path = slot_paths(sdir, index)
        open(lock_path, "w").close()
        Wal(path, sink_name="s", map_size=map_size_for(1 << 30), sync=True).close()
        _set_slot_format(path, b"3")
    held = slot_paths(sdir, 1)[1]
    env = lmdb.open(held, max_dbs=4)
    with env.begin(write=True) as txn:  # slot 1 holds a dead letter, written by that version
        txn.put(ChunkKey(1, 0, 0, 1).pack(), encode_dead_letter(DeadLetter("s:r:1:0:x-0", 10, "too large", "t", None,
                                                                           None, b"v", (), None)),
                db=env.open_db(b"dead", txn=txn))
    env.close()
    rt = WorkerRuntime(_config(tmp_path))
    try:
        assert rt.lock.index == 0 and rt._replayed == 0
        rt.adopt_orphans()
        assert list(rt.adopter.unreadable) == [1] and "format version '3'" in rt.adopter.unreadable[1]
    finally:
        rt.close()
    env = lmdb.open(slot_paths(sdir, 0)[1], max_dbs=4)
    with env.begin() as txn:
        assert txn.get(b"format", db=env.open_db(b"meta", txn=txn)) == str(WAL_VERSION).encode()
    env.close()


#: What each WAL version means, pinned: the digest of :func:`_meaning` under that version.
PINNED = {6: "20523b21f68fcd655e06f74a286769c6191ee1160bf758e3540834fab0792622"}


def _meaning() -> str:
    """What this build writes into a slot, and what a replay makes of it: chunk columns and metadata in both id
    scopes, the ids and unit digest of fixed records (the fingerprint hash, occurrences, places), the header of a
    chunk, the bytes of an attempt and of a dead letter."""
    import json

    import numpy as np
    import pyarrow as pa

    from spark_recoverable_sink.ids import CONTENT, POSITION, new_occurrences, record_ids, scheme_for, unit_digest, with_ids
    from spark_recoverable_sink.schema import normalize_batch
    from spark_recoverable_sink.wal.format import encode_chunk
    from spark_recoverable_sink.wal.records import EXACTLY_ONCE, DeadLetter, encode_attempt, encode_dead_letter

    rows = pa.RecordBatch.from_pydict({
        "key": pa.array([b"k", None, b"k"], pa.binary()), "value": pa.array([b"v", b"", b"v"], pa.binary()),
        "topic": pa.array(["a", None, "a"]), "partition": pa.array([0, None, 0], pa.int32()),
        "timestamp": pa.array([1_700_000_000_000, None, 1_700_000_000_000], pa.int64())})
    out = []
    for kind, scope, places in ((CONTENT, 3, None), (CONTENT, None, np.array([-5, 77, -5], dtype=np.int32)),
                                (POSITION, 3, None)):
        scheme = scheme_for(kind, "s", "run-1", 7, scope)
        chunk = with_ids(normalize_batch(rows, "t", 0, "run-1"), scheme, new_occurrences() if kind == CONTENT else None,
                         places)
        out.append({"columns": [(f.name, str(f.type)) for f in chunk.schema],
                     "metadata": sorted((k.decode(), v.hex()) for k, v in chunk.schema.metadata.items()),
                     "ids": [i.hex() for i in record_ids(chunk, 5).to_pylist()],
                     "digest": unit_digest(chunk, 5), "header": bytes(encode_chunk(chunk)[:12]).hex()})
    out.append(encode_attempt(AttemptState(2, 1, 3, 1.5, EXACTLY_ONCE, 2**64 - 5)).hex())
    out.append(encode_dead_letter(DeadLetter("s:run-1:7:3:x-0", 10, "too large", "t", 4, b"k", None, (("h", b"1"),),
                                             1_700_000_000_000, forwarded=True)).hex())
    return json.dumps(out, sort_keys=True)


def test_what_a_wal_version_means_is_pinned_so_a_change_of_meaning_bumps_it():
    """A change of what a slot holds or means (a column, a metadata key, the id form, the fingerprint hash, a record
    layout) changes this digest: bump ``WAL_VERSION`` (wal/format.py) and pin the new meaning under the new version.
    Changing the meaning under the same version is what let a build replay another's chunks with other ids."""
    from spark_recoverable_sink.wal.format import WAL_VERSION

    digest = hashlib.sha256(_meaning().encode()).hexdigest()
    assert PINNED.get(WAL_VERSION) == digest, (
        f"what WAL version {WAL_VERSION} holds is not what was pinned for it (digest {digest}): if the change is "
        "meant, bump WAL_VERSION in spark_recoverable_sink/wal/format.py and pin the digest under the new version")
