"""Tier 1: the LMDB write-ahead log of one slot."""

from __future__ import annotations

import os
import stat

import lmdb
import pytest

from spark_recoverable_sink.errors import WalFormatError, WalFullError
from spark_recoverable_sink.wal.format import (
    AttemptKey,
    ChunkKey,
    decode_chunk,
)
from spark_recoverable_sink.wal.log import Wal, map_size_for
from spark_recoverable_sink.wal.records import OPEN, AttemptState, DeadLetter

from .wal_helpers import MIB, _chunk, _committed, _raw_put, _wal


def test_append_commit_prune_and_key_order(tmp_path):
    wal = _wal(tmp_path)
    gen = wal.reserve_gen()
    keys = [ChunkKey(2, 1, s, gen) for s in (0, 100, 200)] + [ChunkKey(1, 5, 0, gen), ChunkKey(2, 0, 0, gen)]
    for i, k in enumerate(keys):
        wal.append(k, _chunk(100, start=k.first_seq), new_attempt=AttemptState(OPEN, 0, 0, 1.0))
    assert [k for k, _ in wal.chunk_keys()] == sorted(keys)
    assert wal.live_bytes == sum(size for _k, size in wal.chunk_keys()) > 0
    wal.commit_attempt(AttemptKey(2, 1, gen), 0, 300, 1.0)
    atts = wal.attempts()
    assert atts[AttemptKey(2, 1, gen)].committed and not atts[AttemptKey(1, 5, gen)].committed
    rows = decode_chunk(wal.read_chunk(keys[1])).column(0).to_pylist()
    assert rows[0].startswith(b"0000000100")
    before = wal.live_bytes
    pruned = [(k, s) for k, s in wal.chunk_keys() if k.attempt == AttemptKey(2, 1, gen)]
    wal.prune(chunks=pruned, attempts_done=[AttemptKey(2, 1, gen)])
    assert wal.live_bytes == before - sum(s for _k, s in pruned)
    assert [k for k, _ in wal.chunk_keys()] == [ChunkKey(1, 5, 0, gen), ChunkKey(2, 0, 0, gen)]
    assert AttemptKey(2, 1, gen) not in wal.attempts()
    wal.close()


def test_reopen_keeps_records_generation_and_bytes(tmp_path):
    wal = _wal(tmp_path)
    g1 = wal.reserve_gen()
    wal.append(ChunkKey(1, 0, 0, g1), _chunk(10), new_attempt=AttemptState(OPEN, 0, 0, 1.0))
    live = wal.live_bytes
    wal.close()  # a crash is the same for LMDB: the committed txn is on disk
    again = _wal(tmp_path)
    assert again.live_bytes == live
    assert again.reserve_gen() > g1
    assert len(again.chunk_keys()) == 1
    again.close()


def test_abort_attempt_removes_only_its_chunks(tmp_path):
    wal = _wal(tmp_path)
    g1, g2 = wal.reserve_gen(), wal.reserve_gen()
    wal.append(ChunkKey(1, 0, 0, g1), _chunk(5), new_attempt=AttemptState(OPEN, 0, 0, 1.0))
    wal.append(ChunkKey(1, 0, 5, g1), _chunk(5))
    wal.append(ChunkKey(1, 0, 0, g2), _chunk(5), new_attempt=AttemptState(OPEN, 1, 0, 1.0))
    assert wal.abort_attempt(AttemptKey(1, 0, g1)) == 2
    assert [k for k, _ in wal.chunk_keys()] == [ChunkKey(1, 0, 0, g2)]
    wal.close()


def test_dead_letters_stored_and_found_by_chunk(tmp_path):
    import struct

    wal = _wal(tmp_path)
    ck = ChunkKey(3, 1, 100, 4)
    d = DeadLetter("s:3:1:102", 10, "too large", "t", None, b"k", b"v", (), None)
    wal.put_dead_letters([(struct.pack(">QIQI", 3, 1, 102, 4), d)])
    assert wal.dead_keys_in_chunk(ck, 10) == {2}
    assert wal.dead_keys_in_chunk(ChunkKey(3, 1, 100, 5), 10) == set()  # other generation
    assert wal.dead_keys_in_chunk(ChunkKey(3, 1, 0, 4), 100) == set()  # other range
    assert [x.record_id for _k, x in wal.dead_letters()] == ["s:3:1:102"]
    assert wal.dead_letters_pending(forwarding=True) and wal.dead_letters_pending(forwarding=False)
    wal.close()


def test_files_are_owner_only(tmp_path):
    wal = _wal(tmp_path)
    wal.close()
    assert stat.S_IMODE(os.stat(tmp_path / "slot").st_mode) == 0o700
    for name in ("data.mdb", "lock.mdb"):
        assert stat.S_IMODE(os.stat(tmp_path / "slot" / name).st_mode) == 0o600


def test_unknown_format_version_is_refused_with_the_path(tmp_path):
    _committed(tmp_path)[0].close()  # (a slot holding nothing is taken whatever its version: test_wal_versions.py)
    env = lmdb.open(str(tmp_path / "slot"), max_dbs=4)
    meta = env.open_db(b"meta")
    with env.begin(write=True) as txn:
        txn.put(b"format", b"99", db=meta)
    env.close()
    with pytest.raises(WalFormatError) as ei:
        _wal(tmp_path)
    assert str(tmp_path / "slot") in str(ei.value) and "99" in str(ei.value)
    assert ei.value.path == str(tmp_path / "slot")


def test_garbage_file_is_refused_not_crashed(tmp_path):
    slot = tmp_path / "slot"
    slot.mkdir()
    (slot / "data.mdb").write_bytes(os.urandom(64 * 1024))
    with pytest.raises(WalFormatError) as ei:
        _wal(tmp_path)
    assert str(slot) in str(ei.value)


def test_map_full_is_a_clear_wal_full_error_and_nothing_half_written(tmp_path):
    wal = _wal(tmp_path, map_size=2 * MIB)
    gen = wal.reserve_gen()
    written = 0
    with pytest.raises(WalFullError) as ei:
        for i in range(1000):
            wal.append(ChunkKey(1, 0, i * 1000, gen), _chunk(1000, size=200, start=i * 1000))
            written += 1
    assert "full" in str(ei.value) and ei.value.path == str(tmp_path / "slot")
    # every append that returned is there, the failed one is not
    assert len(wal.chunk_keys()) == written
    wal.close()


def test_wait_for_space_blocks_until_pruned_or_times_out(tmp_path):
    import threading
    import time

    wal = _wal(tmp_path)
    gen = wal.reserve_gen()
    k = ChunkKey(1, 0, 0, gen)
    wal.append(k, _chunk(1000))
    size = wal.live_bytes
    t0 = time.monotonic()
    assert not wal.wait_for_space(size, size + 10, timeout_s=0.3)
    assert time.monotonic() - t0 >= 0.3
    threading.Timer(0.2, lambda: wal.prune(chunks=[(k, size)])).start()
    assert wal.wait_for_space(size, size + 10, timeout_s=5)
    wal.close()


def test_map_size_leaves_room_over_the_byte_budget():
    assert map_size_for(20 * 1024**3) > 20 * 1024**3
    assert map_size_for(MIB) >= 64 * MIB


def test_truncated_data_file_is_refused_not_a_sigbus(tmp_path):
    wal = _wal(tmp_path)
    gen = wal.reserve_gen()
    for i in range(30):
        wal.append(ChunkKey(1, 0, i * 1000, gen), _chunk(1000, size=300, start=i * 1000))
    wal.close()
    data = tmp_path / "slot" / "data.mdb"
    os.truncate(data, os.path.getsize(data) // 2)
    with pytest.raises(WalFormatError, match="truncated") as ei:
        _wal(tmp_path)
    assert ei.value.path == str(tmp_path / "slot")


# -- every LMDB error a WalError, every bad record a WalFormatError naming it ----------

def test_every_read_turns_lmdb_errors_into_a_wal_read_error_naming_the_slot(tmp_path):
    from spark_recoverable_sink.errors import WalReadError

    wal, ck = _committed(tmp_path)
    wal.env.close()  # any LMDB failure will do: operations on a closed environment raise lmdb.Error
    reads = {
        "read_chunk": lambda: wal.read_chunk(ck), "attempts": wal.attempts, "chunk_keys": wal.chunk_keys,
        "check_chunks": wal.check_chunks, "dead_letters": wal.dead_letters,
        "dead_keys_in_chunk": lambda: wal.dead_keys_in_chunk(ck, 5), "stats": wal.stats,
        "is_empty": wal.is_empty, "count": wal._count_live_bytes, "abort_attempt": lambda: wal.abort_attempt(ck.attempt),
    }
    for name, read in reads.items():
        with pytest.raises(WalReadError) as ei:
            read()
        assert ei.value.path == str(tmp_path / "slot") and str(tmp_path / "slot") in str(ei.value), name
        assert isinstance(ei.value.__cause__, lmdb.Error), name


def test_a_corrupt_attempt_record_is_a_format_error_naming_slot_and_record(tmp_path):
    wal, ck = _committed(tmp_path)
    wal.close()
    from spark_recoverable_sink.wal.records import encode_attempt

    good = encode_attempt(AttemptState(OPEN, 0, 0, 1.0))
    _raw_put(tmp_path / "slot", b"attempts", ck.attempt.pack(), good[:12] + bytes([good[12] ^ 1]) + good[13:])
    wal = _wal(tmp_path)
    for read in (wal.attempts, wal.stats, wal.validate):
        with pytest.raises(WalFormatError) as ei:
            read()
        assert str(tmp_path / "slot") in str(ei.value) and "attempt" in str(ei.value) and str(ck.attempt) in str(ei.value)
    wal.close()


def test_a_corrupt_dead_letter_or_key_is_a_format_error_not_a_unicode_or_struct_error(tmp_path):
    import struct

    from spark_recoverable_sink.wal.records import encode_dead_letter

    wal, ck = _committed(tmp_path)
    d = DeadLetter("s:1:0:2", 10, "too large", "t", None, b"k", b"v", (), None)
    dkey = struct.pack(">QIQI", 1, 0, 2, ck.gen)
    wal.put_dead_letters([(dkey, d)])
    wal.close()
    raw = bytearray(encode_dead_letter(d))
    raw[35] = 0xFF  # inside the record id: not UTF-8 any more
    _raw_put(tmp_path / "slot", b"dead", dkey, bytes(raw))
    wal = _wal(tmp_path)
    with pytest.raises(WalFormatError, match="dead letter"):
        wal.dead_letters()
    wal.close()
    _raw_put(tmp_path / "slot", b"dead", dkey, encode_dead_letter(d))
    _raw_put(tmp_path / "slot", b"dead", struct.pack(">QIQ", 1, 0, 3), encode_dead_letter(d))  # a short key
    wal = _wal(tmp_path)
    for read in (wal.dead_letters, lambda: wal.dead_keys_in_chunk(ck, 5)):
        with pytest.raises(WalFormatError) as ei:
            read()
        assert str(tmp_path / "slot") in str(ei.value)
    wal.close()


def test_a_failed_open_closes_the_environment_whatever_the_exception(tmp_path, monkeypatch):
    _wal(tmp_path).close()
    opened = []
    real_open = lmdb.open
    monkeypatch.setattr(lmdb, "open", lambda *a, **kw: opened.append(real_open(*a, **kw)) or opened[-1])
    monkeypatch.setattr(Wal, "_count_live_bytes", lambda self: (_ for _ in ()).throw(RuntimeError("boom")))
    with pytest.raises(RuntimeError):
        _wal(tmp_path)
    with pytest.raises(lmdb.Error):  # closed
        opened[0].info()


def test_slot_directory_that_is_a_symlink_or_not_private_is_refused(tmp_path):
    from spark_recoverable_sink.errors import WalError

    real = tmp_path / "elsewhere"
    real.mkdir(mode=0o700)
    (tmp_path / "slot").symlink_to(real)
    with pytest.raises(WalError, match="symbolic link"):
        _wal(tmp_path)
    (tmp_path / "slot").unlink()
    (tmp_path / "slot").mkdir(mode=0o700)
    os.chmod(tmp_path / "slot", 0o777)
    with pytest.raises(WalError, match="go-w"):
        _wal(tmp_path)
    os.chmod(tmp_path / "slot", 0o700)
    os.chown(tmp_path / "slot", 54321, 54321)
    with pytest.raises(WalError, match="owned by uid 54321"):
        _wal(tmp_path)


def test_reopening_an_unchanged_slot_writes_nothing(tmp_path, monkeypatch):
    wal, _ck = _committed(tmp_path)
    wal.close()
    monkeypatch.setattr(Wal, "_write", lambda self, what: (_ for _ in ()).throw(AssertionError(f"wrote: {what}")))
    again = _wal(tmp_path)  # e.g. an orphan slot adopted on a full disk: its open must not need room
    assert len(again.attempts()) == 1
    again.close()


def test_wait_for_space_counts_what_the_writer_holds_elsewhere(tmp_path):
    """A worker's adopted slots count against its limit: a fresh, empty slot does not take a chunk when the
    worker already holds the limit in slots it adopted (else every re-run of a task that hit max_wal_bytes gets
    a new slot, and the WAL grows past max_wal_bytes x workers)."""
    wal = _wal(tmp_path)
    assert wal.live_bytes == 0
    assert not wal.wait_for_space(1000, 4000, timeout_s=0.2, held=lambda: 4000)
    assert not wal.wait_for_space(1000, 4000, timeout_s=0.2, held=lambda: 3500)
    assert wal.wait_for_space(1000, 4000, timeout_s=0.2, held=lambda: 3000)
    assert wal.wait_for_space(10_000, 4000, timeout_s=0.2, held=lambda: 0), "a writer holding nothing takes any chunk"
    wal.close()
