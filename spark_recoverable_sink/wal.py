"""The write-ahead log of one slot: an LMDB environment with four tables.

* ``meta``     -- format version, sink name, the slot's attempt generation counter
* ``chunks``   -- records, one entry per Arrow batch (see :mod:`.encoding`)
* ``attempts`` -- one entry per task attempt: open, or committed
* ``dead``     -- records that failed with a non-retriable error, with the reason

Every change is one LMDB write transaction (a context manager that commits on
success and aborts on error). With ``sync=True`` each commit is fsynced, so a
record in a committed transaction survives power loss; with ``sync=False`` it
survives the crash of the process but not of the machine.

A :class:`Wal` is used by one process at a time -- the slot lock in
:mod:`.slots` sees to that -- but by two threads in it (the task thread
appends, the background thread prunes); LMDB serialises the writers.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from typing import Iterator

import lmdb

from .encoding import (
    COMMITTED,
    FORMAT_VERSION,
    AttemptKey,
    AttemptState,
    ChunkKey,
    DeadLetter,
    decode_attempt,
    decode_dead_letter,
    encode_attempt,
    encode_dead_letter,
)
from .errors import WalError, WalFormatError, WalFullError, WalWriteError

__all__ = ["Wal", "WalStats", "map_size_for"]

log = logging.getLogger(__name__)

_FORMAT_KEY = b"format"
_SINK_KEY = b"sink"
_GEN_KEY = b"gen"
_MIB = 1024 * 1024


def map_size_for(max_wal_bytes: int) -> int:
    """LMDB map size for a byte budget: room for the live bytes, freed pages and B-tree."""
    return max(64 * _MIB, int(max_wal_bytes * 1.5) + 64 * _MIB)


class WalStats:
    """Counts of what a slot holds."""

    __slots__ = ("chunks", "records", "attempts", "committed_attempts", "dead_letters", "live_bytes")

    def __init__(self) -> None:
        self.chunks = self.records = self.attempts = 0
        self.committed_attempts = self.dead_letters = self.live_bytes = 0

    def as_dict(self) -> dict[str, int]:
        return {k: getattr(self, k) for k in self.__slots__}


class Wal:
    """One slot's LMDB environment.

    Raises (from the constructor):
        WalFormatError: the files are not a WAL of this format version, or corrupt.
        WalError: the environment cannot be opened.
    """

    def __init__(self, path: str, *, sink_name: str, map_size: int, sync: bool) -> None:
        self.path = path
        self.sink_name = sink_name
        os.makedirs(path, mode=0o700, exist_ok=True)
        try:
            self.env = lmdb.open(
                path, map_size=map_size, subdir=True, max_dbs=4, sync=sync, metasync=sync,
                mode=0o600, readahead=False, max_spare_txns=2, lock=True,
            )
        except (lmdb.InvalidError, lmdb.CorruptedError, lmdb.VersionMismatchError) as exc:
            raise WalFormatError(f"WAL slot {path} is not a readable LMDB environment: {exc}", path) from exc
        except lmdb.Error as exc:
            raise WalError(f"cannot open WAL slot {path}: {exc}", path) from exc
        try:
            self._check_file_size()
            self._meta = self.env.open_db(b"meta")
            self._chunks = self.env.open_db(b"chunks")
            self._attempts = self.env.open_db(b"attempts")
            self._dead = self.env.open_db(b"dead")
            self._check_format()
        except lmdb.Error as exc:
            self.env.close()
            raise WalFormatError(f"WAL slot {path} is unreadable: {exc}", path) from exc
        except WalFormatError:
            self.env.close()
            raise
        self._bytes_lock = threading.Condition()
        self.live_bytes = self._count_live_bytes()

    # -- format ----------------------------------------------------------------

    def _check_file_size(self) -> None:
        """A data file shorter than LMDB's last page is truncated: reading it would SIGBUS."""
        info, stat = self.env.info(), self.env.stat()
        need = (info["last_pgno"] + 1) * stat["psize"]
        have = os.path.getsize(os.path.join(self.path, "data.mdb"))
        if have < need:
            raise WalFormatError(
                f"WAL slot {self.path}: data.mdb is truncated ({have} bytes, its last page ends at {need}); "
                "quarantine the slot", self.path)

    def _check_format(self) -> None:
        with self.env.begin() as txn:
            fmt = txn.get(_FORMAT_KEY, db=self._meta)
            sink = txn.get(_SINK_KEY, db=self._meta)
            self.gen = int(txn.get(_GEN_KEY, b"0", db=self._meta))
            populated = txn.stat(self._chunks)["entries"] or txn.stat(self._attempts)["entries"]
        if fmt is None:
            if populated:
                raise WalFormatError(f"WAL slot {self.path} holds records but no format version", self.path)
            with self.env.begin(write=True) as txn:
                txn.put(_FORMAT_KEY, str(FORMAT_VERSION).encode(), db=self._meta)
                txn.put(_SINK_KEY, self.sink_name.encode(), db=self._meta)
                txn.put(_GEN_KEY, b"0", db=self._meta)
            return
        if fmt != str(FORMAT_VERSION).encode():
            raise WalFormatError(
                f"WAL slot {self.path} has format version {fmt.decode(errors='replace')!r}; "
                f"this build reads version {FORMAT_VERSION}. Use a matching version of "
                "spark_recoverable_sink, or quarantine the slot.", self.path,
            )
        if sink is not None and sink.decode(errors="replace") != self.sink_name:
            raise WalFormatError(
                f"WAL slot {self.path} belongs to sink {sink.decode(errors='replace')!r}, not {self.sink_name!r}",
                self.path,
            )

    def _count_live_bytes(self) -> int:
        total = 0
        with self.env.begin(buffers=True) as txn:
            for _k, v in txn.cursor(db=self._chunks):
                total += len(v)
        return total

    # -- write transactions ----------------------------------------------------

    @contextlib.contextmanager
    def _write(self, what: str) -> Iterator[lmdb.Transaction]:
        """A write transaction; LMDB failures become typed WAL errors."""
        try:
            with self.env.begin(write=True) as txn:
                yield txn
        except lmdb.MapFullError as exc:
            raise WalFullError(
                f"WAL slot {self.path} is full (LMDB map size {self.env.info()['map_size']} bytes) during {what}",
                self.path,
            ) from exc
        except (lmdb.Error, OSError) as exc:
            # ENOSPC and EIO arrive as lmdb.Error (DiskError or a generic one):
            # the transaction was aborted, so nothing of it was written.
            raise WalWriteError(
                f"WAL slot {self.path}: {what} failed, nothing written: {exc} ({self._free_space()})", self.path,
            ) from exc

    def _free_space(self) -> str:
        # LMDB reports a short write on a full disk as EIO: say how much room is left.
        try:
            st = os.statvfs(self.path)
        except OSError:
            return "free space unknown"
        return f"{st.f_bavail * st.f_frsize} bytes free on its file system"

    def reserve_gen(self) -> int:
        """A fresh generation number for a task attempt in this slot.

        Kept in memory and stored with the attempt's first chunk, so it costs
        no transaction of its own.
        """
        self.gen += 1
        return self.gen

    def append(self, key: ChunkKey, chunk: bytes, new_attempt: AttemptState | None = None) -> None:
        """Write one chunk (and, for a task's first chunk, its open attempt) in one transaction.

        Raises:
            WalFullError / WalWriteError: nothing of the chunk was written.
        """
        with self._write("append") as txn:
            if new_attempt is not None:
                txn.put(key.attempt.pack(), encode_attempt(new_attempt), db=self._attempts)
                txn.put(_GEN_KEY, str(key.gen).encode(), db=self._meta)
            txn.put(key.pack(), chunk, db=self._chunks)
        with self._bytes_lock:
            self.live_bytes += len(chunk)

    def set_attempt(self, key: AttemptKey, state: AttemptState) -> None:
        """Record an attempt's state (e.g. committed) durably."""
        with self._write("set_attempt") as txn:
            txn.put(key.pack(), encode_attempt(state), db=self._attempts)

    def commit_attempt(self, key: AttemptKey, spark_attempt: int, rows: int, started_at: float) -> None:
        self.set_attempt(key, AttemptState(COMMITTED, spark_attempt, rows, started_at))

    def prune(
        self,
        chunks: list[tuple[ChunkKey, int]] = (),  # type: ignore[assignment]
        dead: list[tuple[bytes, DeadLetter]] = (),  # type: ignore[assignment]
        attempts_done: list[AttemptKey] = (),  # type: ignore[assignment]
    ) -> None:
        """In one transaction: store dead letters, delete finished chunks and attempts.

        ``chunks`` pairs each key with the byte size it was counted with.
        """
        if not (chunks or dead or attempts_done):
            return
        with self._write("prune") as txn:
            for dkey, d in dead:
                txn.put(dkey, encode_dead_letter(d), db=self._dead)
            for ck, _size in chunks:
                txn.delete(ck.pack(), db=self._chunks)
            for ak in attempts_done:
                txn.delete(ak.pack(), db=self._attempts)
        freed = sum(size for _ck, size in chunks)
        if freed:
            with self._bytes_lock:
                self.live_bytes -= freed
                self._bytes_lock.notify_all()

    def put_dead_letters(self, dead: list[tuple[bytes, DeadLetter]]) -> None:
        self.prune(dead=dead)

    def abort_attempt(self, key: AttemptKey) -> int:
        """Delete an attempt and all its chunks; returns the number of chunks removed."""
        removed: list[tuple[ChunkKey, int]] = []
        with self.env.begin(buffers=True) as txn:
            for ck, size in self._chunk_keys(txn, lambda k: k.attempt == key):
                removed.append((ck, size))
        self.prune(chunks=removed, attempts_done=[key])
        return len(removed)

    # -- reads -----------------------------------------------------------------

    def _chunk_keys(self, txn: lmdb.Transaction, pred=None) -> Iterator[tuple[ChunkKey, int]]:
        for raw_key, v in txn.cursor(db=self._chunks):
            ck = ChunkKey.unpack(bytes(raw_key))
            if pred is None or pred(ck):
                yield ck, len(v)

    def attempts(self) -> dict[AttemptKey, AttemptState]:
        with self.env.begin() as txn:
            return {AttemptKey.unpack(k): decode_attempt(v) for k, v in txn.cursor(db=self._attempts)}

    def chunk_keys(self) -> list[tuple[ChunkKey, int]]:
        with self.env.begin(buffers=True) as txn:
            return list(self._chunk_keys(txn))

    def check_chunks(self) -> dict[ChunkKey, int]:
        """Validate every chunk (header and checksum); returns rows per chunk.

        Raises:
            WalFormatError: naming this slot's path and the bad chunk.
        """
        from .encoding import check_chunk

        out: dict[ChunkKey, int] = {}
        with self.env.begin(buffers=True) as txn:
            for raw_key, v in txn.cursor(db=self._chunks):
                ck = ChunkKey.unpack(bytes(raw_key))
                try:
                    out[ck] = check_chunk(v)
                except WalFormatError as exc:
                    raise WalFormatError(f"WAL slot {self.path}, chunk {ck}: {exc}", self.path) from exc
        return out

    def read_chunk(self, key: ChunkKey) -> bytes | None:
        with self.env.begin() as txn:
            return txn.get(key.pack(), db=self._chunks)

    def dead_letters(self) -> list[tuple[bytes, DeadLetter]]:
        with self.env.begin() as txn:
            return [(bytes(k), decode_dead_letter(v)) for k, v in txn.cursor(db=self._dead)]

    def dead_keys_in_chunk(self, key: ChunkKey, rows: int) -> set[int]:
        """Indices of a chunk's records already in the dead-letter store."""
        from .encoding import _CHUNK_KEY  # same layout as dead-letter keys

        lo = _CHUNK_KEY.pack(key.batch, key.partition, key.first_seq, 0)
        out: set[int] = set()
        with self.env.begin() as txn:
            cur = txn.cursor(db=self._dead)
            if not cur.set_range(lo):
                return out
            for raw_key in cur.iternext(values=False):
                b, p, seq, gen = _CHUNK_KEY.unpack(raw_key)
                if (b, p) != (key.batch, key.partition) or seq >= key.first_seq + rows:
                    break
                if gen == key.gen:
                    out.add(seq - key.first_seq)
        return out

    def stats(self) -> WalStats:
        s = WalStats()
        with self.env.begin(buffers=True) as txn:
            from .encoding import chunk_rows

            for _k, v in txn.cursor(db=self._chunks):
                s.chunks += 1
                s.live_bytes += len(v)
                try:
                    s.records += chunk_rows(v)
                except WalFormatError:
                    pass
            for _k, v in txn.cursor(db=self._attempts):
                s.attempts += 1
                s.committed_attempts += decode_attempt(v).state == COMMITTED
            s.dead_letters = txn.stat(self._dead)["entries"]
        return s

    def dead_letters_pending(self, forwarding: bool) -> bool:
        """Whether a dead letter still waits to be forwarded (or, without a topic, reported)."""
        return any(not (d.forwarded if forwarding else d.reported) for _k, d in self.dead_letters())

    def is_empty(self) -> bool:
        with self.env.begin() as txn:
            return not (txn.stat(self._chunks)["entries"] or txn.stat(self._attempts)["entries"])

    # -- space -----------------------------------------------------------------

    def wait_for_space(self, need: int, limit: int, timeout_s: float, on_wait=None) -> bool:
        """Block until ``live_bytes + need <= limit`` or ``timeout_s`` passes.

        ``on_wait`` is called between waits (to prune what is acked). Returns
        whether the space is there.
        """
        import time

        end = time.monotonic() + timeout_s
        while True:
            with self._bytes_lock:
                if self.live_bytes + need <= limit or (self.live_bytes == 0):
                    return True
                left = end - time.monotonic()
                if left <= 0:
                    return False
                self._bytes_lock.wait(min(0.05, left))
            if on_wait is not None:
                on_wait()

    def close(self) -> None:
        with contextlib.suppress(lmdb.Error):
            self.env.close()

