"""Reading a WAL slot: every read in one transaction context manager, every record decoded checked.

:class:`SlotReads` is the read half of :class:`.log.Wal` (which opens the
environment and writes). Every read runs in :meth:`SlotReads._read`, so an
LMDB failure becomes a :class:`WalReadError` naming the slot, chained with
``from``; every key and record is decoded through ``_key``/``_decode``, so bad
bytes become a :class:`WalFormatError` naming the slot and the record.
"""

from __future__ import annotations

import contextlib
from typing import Any, Callable, Iterator

import lmdb

from ..errors import WalFormatError, WalReadError, WalVersionError
from .format import AttemptKey, ChunkKey, check_chunk, chunk_rows
from .records import (
    COMMITTED,
    AttemptState,
    DeadLetter,
    decode_attempt,
    decode_dead_letter,
)

__all__ = ["SlotReads", "WalStats"]


class WalStats:
    """Counts of what a slot holds."""

    __slots__ = ("chunks", "records", "attempts", "committed_attempts", "dead_letters", "live_bytes")

    def __init__(self) -> None:
        self.chunks = self.records = self.attempts = 0
        self.committed_attempts = self.dead_letters = self.live_bytes = 0

    def as_dict(self) -> dict[str, int]:
        return {k: getattr(self, k) for k in self.__slots__}


class SlotReads:
    """Reads of one slot's tables (mixed into :class:`.log.Wal`)."""

    path: str
    env: lmdb.Environment
    _chunks: Any
    _attempts: Any
    _dead: Any
    #: deletions a prune could not write (the disk refused): packed chunk key -> size, packed attempt keys.
    #: Their records are proven delivered; they read as gone and go with the next prune (see .space).
    _gone_chunks: dict[bytes, int]
    _gone_attempts: set[bytes]

    def validate(self) -> None:
        """Decode every key and record of the slot: chunks (checksum), attempts, dead letters.

        Raises:
            WalFormatError: naming the slot and the first bad record.
            WalReadError: LMDB failed while reading.
        """
        self.check_chunks()
        self.attempts()
        self.dead_letters()

    def _count_live_bytes(self) -> int:
        total = 0
        with self._read("count live bytes") as txn:
            for _k, v in txn.cursor(db=self._chunks):
                total += len(v)
        return total

    # -- read transactions -----------------------------------------------------

    @contextlib.contextmanager
    def _read(self, what: str) -> Iterator[lmdb.Transaction]:
        """A read transaction (zero-copy buffers); LMDB failures become :class:`WalReadError`."""
        try:
            with self.env.begin(buffers=True) as txn:
                yield txn
        except lmdb.Error as exc:
            raise WalReadError(f"WAL slot {self.path}: {what} failed: {exc}", self.path) from exc

    def _decode(self, kind: str, key: object, fn: Callable[[Any], Any], raw: Any) -> Any:
        """``fn(raw)``, with a bad record named by slot, kind and key (a version it does not read kept as such)."""
        try:
            return fn(raw)
        except WalVersionError as exc:
            raise WalVersionError(f"WAL slot {self.path}, {kind} {key}: {exc}", self.path, exc.version) from exc
        except WalFormatError as exc:
            raise WalFormatError(f"WAL slot {self.path}, {kind} {key}: {exc}", self.path) from exc

    def _key(self, cls: Any, raw: Any) -> Any:
        try:
            return cls.unpack(bytes(raw))
        except WalFormatError as exc:
            raise WalFormatError(f"WAL slot {self.path}: {exc} ({bytes(raw)[:32].hex()})", self.path) from exc

    # -- reads -----------------------------------------------------------------
    # Every read runs in ``_read`` (LMDB errors become WalReadError) and decodes
    # through ``_key``/``_decode`` (bad bytes become WalFormatError naming the record).

    def _chunk_keys(self, txn: lmdb.Transaction, pred=None) -> Iterator[tuple[ChunkKey, int]]:
        for raw_key, v in txn.cursor(db=self._chunks):
            if self._gone_chunks and bytes(raw_key) in self._gone_chunks:
                continue
            ck = self._key(ChunkKey, raw_key)
            if pred is None or pred(ck):
                yield ck, len(v)

    def attempts(self) -> dict[AttemptKey, AttemptState]:
        """Every attempt record of the slot.

        Raises:
            WalFormatError: a key or record does not decode. WalReadError: LMDB failed.
        """
        with self._read("attempts") as txn:
            out = {}
            for k, v in txn.cursor(db=self._attempts):
                if self._gone_attempts and bytes(k) in self._gone_attempts:
                    continue
                ak = self._key(AttemptKey, k)
                out[ak] = self._decode("attempt", ak, decode_attempt, v)
            return out

    def chunk_keys(self) -> list[tuple[ChunkKey, int]]:
        """Every chunk's key and byte size, in key order.

        Raises:
            WalFormatError: a key does not decode. WalReadError: LMDB failed.
        """
        with self._read("chunk_keys") as txn:
            return list(self._chunk_keys(txn))

    def check_chunks(self) -> dict[ChunkKey, int]:
        """Validate every chunk (header and checksum); returns rows per chunk.

        Raises:
            WalFormatError: naming this slot's path and the bad chunk. WalReadError: LMDB failed.
        """
        out: dict[ChunkKey, int] = {}
        with self._read("check_chunks") as txn:
            for raw_key, v in txn.cursor(db=self._chunks):
                ck = self._key(ChunkKey, raw_key)
                out[ck] = self._decode("chunk", ck, check_chunk, v)
        return out

    def check_chunks_each(self) -> tuple[dict[ChunkKey, int], dict[ChunkKey, str]]:
        """Validate every chunk on its own: ``(rows per good chunk, why per damaged chunk)``.

        A chunk of a version this build does not read is not damaged: another
        build wrote it, and it means what that build meant. Its slot is refused
        whole, nothing of it set aside.

        Raises:
            WalVersionError: a chunk of another version (naming the slot, the chunk and its version).
            WalFormatError: a chunk key does not decode (the slot needs quarantine). WalReadError: LMDB failed.
        """
        good: dict[ChunkKey, int] = {}
        bad: dict[ChunkKey, str] = {}
        with self._read("check_chunks") as txn:
            for raw_key, v in txn.cursor(db=self._chunks):
                ck = self._key(ChunkKey, raw_key)
                try:
                    good[ck] = self._decode("chunk", ck, check_chunk, v)
                except WalVersionError:
                    raise
                except WalFormatError as exc:
                    bad[ck] = str(exc.__cause__ or exc)
        return good, bad

    def read_chunk(self, key: ChunkKey) -> bytes | None:
        """A chunk's bytes (a copy), or None if it is gone.

        Raises:
            WalReadError: LMDB failed.
        """
        packed = key.pack()
        if packed in self._gone_chunks:
            return None
        with self._read("read_chunk") as txn:
            v = txn.get(packed, db=self._chunks)
            return None if v is None else bytes(v)

    def dead_letters(self) -> list[tuple[bytes, DeadLetter]]:
        """Every dead letter with its key.

        Raises:
            WalFormatError: a key or record does not decode. WalReadError: LMDB failed.
        """
        with self._read("dead_letters") as txn:
            out = []
            for k, v in txn.cursor(db=self._dead):
                dk = self._key(ChunkKey, k)  # same layout: seq in place of first_seq
                out.append((bytes(k), self._decode("dead letter", dk, decode_dead_letter, v)))
            return out

    def dead_keys_in_chunk(self, key: ChunkKey, rows: int) -> set[int]:
        """Indices of a chunk's records already in the dead-letter store.

        Raises:
            WalFormatError: a dead-letter key does not decode. WalReadError: LMDB failed.
        """
        lo = ChunkKey(key.batch, key.origin, key.first_seq, 0).pack()  # same layout as dead-letter keys
        out: set[int] = set()
        with self._read("dead_keys_in_chunk") as txn:
            cur = txn.cursor(db=self._dead)
            if not cur.set_range(lo):
                return out
            for raw_key in cur.iternext(values=False):
                dk = self._key(ChunkKey, raw_key)
                if (dk.batch, dk.origin) != (key.batch, key.origin) or dk.first_seq >= key.first_seq + rows:
                    break
                if dk.gen == key.gen:
                    out.add(dk.first_seq - key.first_seq)
        return out

    def stats(self) -> WalStats:
        """Counts of what the slot holds (a chunk with a bad header counts no records).

        Raises:
            WalFormatError: an attempt record does not decode. WalReadError: LMDB failed.
        """
        s = WalStats()
        with self._read("stats") as txn:
            for _k, v in txn.cursor(db=self._chunks):
                s.chunks += 1
                s.live_bytes += len(v)
                try:
                    s.records += chunk_rows(v)
                except WalFormatError:
                    pass
            for k, v in txn.cursor(db=self._attempts):
                s.attempts += 1
                ak = self._key(AttemptKey, k)
                s.committed_attempts += self._decode("attempt", ak, decode_attempt, v).state == COMMITTED
            s.dead_letters = txn.stat(self._dead)["entries"]
        return s

    def dead_letters_pending(self, forwarding: bool) -> bool:
        """Whether a dead letter still waits to be forwarded (or, without a topic, reported)."""
        return any(not (d.forwarded if forwarding else d.reported) for _k, d in self.dead_letters())

    def holds_nothing(self, txn: lmdb.Transaction, tables: tuple[bytes, ...]) -> bool:
        """Whether the slot holds nothing but its meta, whatever its version: no table but ``tables`` (the main
        database names them), and no entry in chunks, attempts or dead letters (LMDB's counts: nothing decoded)."""
        if not {bytes(k) for k in txn.cursor().iternext(values=False)} <= set(tables):
            return False
        return not any(txn.stat(db)["entries"] for db in (self._chunks, self._attempts, self._dead))

    def is_empty(self) -> bool:
        """Whether the slot holds no chunk and no attempt (deletions not written yet count as done).

        Raises:
            WalReadError: LMDB failed.
        """
        with self._read("is_empty") as txn:
            return not (txn.stat(self._chunks)["entries"] - len(self._gone_chunks)
                        or txn.stat(self._attempts)["entries"] - len(self._gone_attempts))
