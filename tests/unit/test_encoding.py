"""Tier 1: byte formats of the WAL and record ids."""

from __future__ import annotations

import zlib

import pyarrow as pa
import pytest

from spark_recoverable_sink.errors import WalFormatError
from spark_recoverable_sink.ids import new_occurrences, with_ids
from spark_recoverable_sink.schema import (
    HEADERS_TYPE,
    chunk_run,
    iter_rows,
    normalize_batch,
)
from spark_recoverable_sink.wal.format import (
    AttemptKey,
    ChunkKey,
    chunk_rows,
    decode_chunk,
    encode_chunk,
)
from spark_recoverable_sink.wal.records import (
    COMMITTED,
    EXACTLY_ONCE,
    OPEN,
    AttemptState,
    DeadLetter,
    decode_attempt,
    decode_dead_letter,
    encode_attempt,
    encode_dead_letter,
)
from tests.record_ids import TEST_IDS


def _batch() -> pa.RecordBatch:
    raw = pa.RecordBatch.from_pydict({
        "key": pa.array([b"k0", None, b"", "k3".encode()], pa.binary()),
        "value": pa.array([b"v0", b"", None, b"\x00\xff"], pa.binary()),
        "topic": pa.array(["a", None, "b", "a"]),
        "partition": pa.array([0, None, 2, 1], pa.int32()),
        "headers": pa.array([[{"key": "h", "value": b"1"}], None, [], [{"key": "x", "value": None}]], HEADERS_TYPE),
    })
    return with_ids(normalize_batch(raw, "default", 0, "r"), TEST_IDS, new_occurrences())


def test_chunk_round_trip_keeps_null_and_empty_apart():
    b = _batch()
    raw = encode_chunk(b)
    assert chunk_rows(raw) == 4
    back = decode_chunk(raw)
    assert back.equals(b)
    rows = list(iter_rows(back, "default"))
    assert [r["key"] for r in rows] == [b"k0", None, b"", b"k3"]
    assert [r["value"] for r in rows] == [b"v0", b"", None, b"\x00\xff"]
    assert [r["topic"] for r in rows] == ["a", "default", "b", "a"]
    assert [r["partition"] for r in rows] == [0, None, 2, 1]
    assert rows[0]["headers"] == [("h", b"1")] and rows[3]["headers"] == [("x", None)]


def test_chunk_refuses_unknown_version_and_corruption():
    raw = bytearray(encode_chunk(_batch()))
    bad_version = bytes(raw[:4]) + (99).to_bytes(2, "big") + bytes(raw[6:])
    with pytest.raises(WalFormatError, match="version 99"):
        decode_chunk(bad_version)
    corrupt = bytearray(raw)
    corrupt[-10] ^= 0xFF
    with pytest.raises(WalFormatError, match="checksum"):
        decode_chunk(bytes(corrupt))
    with pytest.raises(WalFormatError):
        decode_chunk(bytes(raw[:10]))
    with pytest.raises(WalFormatError, match="magic"):
        decode_chunk(b"PKL\x80" + bytes(raw[4:]))


def test_chunk_keys_sort_in_write_order():
    keys = [ChunkKey(b, p, s, g) for b in (0, 1, 2**40) for p in (0, 7, 300) for s in (0, 2000, 2**33) for g in (1, 2)]
    packed = sorted(k.pack() for k in keys)
    assert [ChunkKey.unpack(k) for k in packed] == sorted(keys)
    # batch first, then partition, then sequence
    assert ChunkKey(1, 0, 0, 9).pack() > ChunkKey(0, 300, 2**33, 9).pack()
    assert ChunkKey(1, 2, 0, 0).pack() > ChunkKey(1, 1, 99, 5).pack()
    assert ChunkKey(5, 3, 7, 1).attempt == AttemptKey(5, 3, 1)
    assert AttemptKey.unpack(AttemptKey(5, 3, 1).pack()) == AttemptKey(5, 3, 1)


def test_attempt_and_dead_letter_round_trip():
    a = AttemptState(COMMITTED, 2, 12345, 1700000000.5)
    assert decode_attempt(encode_attempt(a)) == a
    assert not decode_attempt(encode_attempt(AttemptState(OPEN, 0, 0, 0.0))).committed
    d = DeadLetter("s:1:2:3", 10, "Broker: Message size too large", "t", None, None, b"", (("h", None), ("k", b"v")),
                   None, forwarded=True)
    assert decode_dead_letter(encode_dead_letter(d)) == d
    with pytest.raises(WalFormatError):
        decode_dead_letter(encode_dead_letter(d)[:-1])




def test_the_run_travels_in_the_chunk_so_a_replay_rebuilds_the_same_ids():
    rb = pa.RecordBatch.from_pydict({"value": [b"a", b"b"]})
    norm = with_ids(normalize_batch(rb, "t", 10, "r1"), TEST_IDS, new_occurrences())
    back = decode_chunk(encode_chunk(norm))
    assert chunk_run(back) == "r1"
    assert back.schema.metadata[b"rks.topic"] == b"t"  # the default topic stays next to it
    assert [r["topic"] for r in iter_rows(back, None)] == ["t", "t"]
    no_run = with_ids(normalize_batch(rb, None, 0), TEST_IDS, new_occurrences())  # no run given: tools, tests
    assert chunk_run(decode_chunk(encode_chunk(no_run))) == ""


# -- damaged records: every kind checksummed, every failure a WalFormatError ----------

_DL = DeadLetter("s:1:2:3", 10, "too large", "t", 4, b"k", b"v", (("h", b"1"),), 1700000000000, reported=True)
_AT = AttemptState(COMMITTED, 2, 12345, 1700000000.5)


@pytest.mark.parametrize("encode,decode,value", [
    (encode_attempt, decode_attempt, _AT), (encode_dead_letter, decode_dead_letter, _DL),
], ids=["attempt", "dead_letter"])
def test_every_flipped_bit_of_attempt_and_dead_letter_records_is_caught(encode, decode, value):
    raw = encode(value)
    for i in range(len(raw)):
        for bit in (0x01, 0x80):
            bad = bytearray(raw)
            bad[i] ^= bit
            with pytest.raises(WalFormatError):
                decode(bytes(bad))


@pytest.mark.parametrize("encode,decode,value", [
    (encode_attempt, decode_attempt, _AT), (encode_dead_letter, decode_dead_letter, _DL),
    (encode_chunk, decode_chunk, None),
], ids=["attempt", "dead_letter", "chunk"])
def test_truncated_or_garbage_records_raise_only_wal_format_error(encode, decode, value):
    import random

    raw = bytes(encode(_batch() if value is None else value))
    rng = random.Random(7)
    samples = [raw[:n] for n in range(0, len(raw), max(1, len(raw) // 50))]
    samples += [bytes(rng.getrandbits(8) for _ in range(len(raw))) for _ in range(50)]
    samples += [raw[:8] + bytes(rng.getrandbits(8) for _ in range(len(raw) - 8)) for _ in range(50)]
    for s in samples:
        with pytest.raises(WalFormatError):
            decode(s)


def test_attempt_and_dead_letter_records_of_another_version_are_refused_naming_it():
    import struct

    from spark_recoverable_sink.errors import WalVersionError
    from spark_recoverable_sink.wal.format import WAL_VERSION

    eo = AttemptState(COMMITTED, 0, 7, 1.0, EXACTLY_ONCE, 2**64 - 5)
    assert decode_attempt(encode_attempt(eo)) == eo and eo.exactly_once
    v1_attempt = struct.pack(">4sHBIQd", b"RKSA", 1, COMMITTED, 2, 12345, 1700000000.5)  # pre-release layouts
    v3_body = bytearray(encode_attempt(eo)[:-4])
    v3_body[4:6] = (3).to_bytes(2, "big")
    v3_attempt = bytes(v3_body) + struct.pack(">I", zlib.crc32(v3_body))  # sound bytes, another version
    dead = bytearray(encode_dead_letter(_DL))
    dead[4:6] = (WAL_VERSION + 1).to_bytes(2, "big")
    dead[27:31] = struct.pack(">I", zlib.crc32(bytes(dead[31:]), zlib.crc32(bytes(dead[:27]))))
    for raw, decode, version in ((v1_attempt, decode_attempt, 1), (v3_attempt, decode_attempt, 3),
                                 (bytes(dead), decode_dead_letter, WAL_VERSION + 1)):
        with pytest.raises(WalVersionError, match=f"format version {version};") as ei:
            decode(raw)
        assert ei.value.version == str(version)
