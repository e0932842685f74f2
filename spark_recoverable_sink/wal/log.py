"""The write-ahead log of one slot: an LMDB environment with four tables.

* ``meta``     -- format version, sink name, the slot's attempt generation counter,
  the sync mode it was last opened with and, with ``wal_sync="none"``, the boot id
* ``chunks``   -- records, one entry per Arrow batch (see :mod:`.format`)
* ``attempts`` -- one entry per task attempt: open, or committed
* ``dead``     -- records that failed with a non-retriable error, with the reason

Every change is one LMDB write transaction (a context manager that commits on
success and aborts on error). With ``sync=True`` each commit is fsynced, so a
record in a committed transaction survives power loss; with ``sync=False`` it
survives the crash of the process but not of the machine, and LMDB documents
that a system crash without sync can corrupt the whole environment. So a slot
opened with ``sync=False`` records the machine's boot id in its meta; opened
again after a reboot, it is validated in full (every key, chunk, attempt and
dead letter) and refused with :class:`WalUncleanError` if anything fails, for
the runtime to quarantine it.

Every LMDB failure, reads included, becomes a :class:`WalError` subclass naming
the slot (one context manager for reads, one for writes), and every record
that does not decode is a :class:`WalFormatError` naming the slot and the
record's key. A slot of another version than :data:`.format.WAL_VERSION` is
refused (:class:`WalVersionError`), untouched, unless it holds nothing.

A :class:`Wal` is used by one process at a time -- the slot lock in
:mod:`.slots` sees to that -- but by two threads in it (the task thread
appends, the background thread prunes); LMDB serialises the writers.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from typing import Iterable, Iterator

import lmdb

from ..errors import WalError, WalFormatError, WalFullError, WalUncleanError, WalVersionError, WalWriteError
from .format import WAL_VERSION, AttemptKey, ChunkKey
from .reads import SlotReads, WalStats
from .records import AT_LEAST_ONCE, COMMITTED, AttemptState, DeadLetter, encode_attempt, encode_dead_letter
from .slots import ensure_private_dir
from .space import SlotSpace, free_space, map_size_for, no_room, prepare_lock_file

__all__ = ["Wal", "WalStats", "map_size_for", "boot_id"]

log = logging.getLogger(__name__)

_FORMAT_KEY = b"format"
_SINK_KEY = b"sink"
_GEN_KEY = b"gen"
_SYNC_KEY = b"sync"
_BOOT_KEY = b"boot"
_BOOT_ID_FILE = "/proc/sys/kernel/random/boot_id"
_TABLES = (b"meta", b"chunks", b"attempts", b"dead")


def boot_id() -> bytes | None:
    """This machine's boot id (Linux), or None where there is none."""
    try:
        with open(_BOOT_ID_FILE, "rb") as f:
            return f.read().strip() or None
    except OSError:
        return None


class Wal(SlotReads, SlotSpace):
    """One slot's LMDB environment.

    Raises (from the constructor):
        WalFormatError: the files are not a WAL, or corrupt; WalVersionError: of another :data:`.format.WAL_VERSION`.
        WalError: the environment cannot be opened.
    """

    def __init__(self, path: str, *, sink_name: str, map_size: int, sync: bool) -> None:
        self.path = path
        self.sink_name = sink_name
        self.sync = sync
        self.map_size = map_size
        self.validated_after_reboot = False
        self.retired = False  # its files were removed (a renew that failed): prunes do nothing
        self._fresh_gen = 0  # the generation a new environment starts from (a renewed slot keeps its own)
        self._stamp: dict[bytes, bytes] = {}  # meta to write with the next write transaction
        self._bytes_lock = threading.Condition()
        ensure_private_dir(path, "WAL slot directory")
        self._open()

    def _open(self) -> None:
        """Open (or create) the environment and its tables; check the format; count live bytes.

        An existing slot opens without a write; creating one on a full disk is a
        :class:`WalWriteError` (nothing is left behind but an empty directory).
        """
        self._gone_chunks, self._gone_attempts = {}, set()
        data = os.path.join(self.path, "data.mdb")
        fresh = not os.path.exists(data) or os.path.getsize(data) == 0
        try:
            prepare_lock_file(self.path)  # LMDB writes it through a mapping: no room would be SIGBUS
            self.env = lmdb.open(
                self.path, map_size=self.map_size, subdir=True, max_dbs=4, sync=self.sync, metasync=self.sync,
                mode=0o600, readahead=False, max_spare_txns=2, lock=True,
            )
        except (lmdb.InvalidError, lmdb.CorruptedError, lmdb.VersionMismatchError) as exc:
            raise WalFormatError(f"WAL slot {self.path} is not a readable LMDB environment: {exc}",
                                 self.path) from exc
        except (lmdb.Error, OSError) as exc:
            if fresh and no_room(self.path, exc):
                raise WalWriteError(f"WAL slot {self.path} cannot be created: {exc} ({free_space(self.path)})",
                                    self.path) from exc
            raise WalError(f"cannot open WAL slot {self.path}: {exc}", self.path) from exc
        try:
            self._check_file_size()
            with self._read("open") as txn:  # named tables that exist open without a write
                fresh = fresh or any(txn.get(name) is None for name in _TABLES)
            self._meta, self._chunks, self._attempts, self._dead = (self.env.open_db(t) for t in _TABLES)
            self._check_format()
            self.live_bytes = self._count_live_bytes()
        except lmdb.Error as exc:
            self.env.close()
            if fresh and no_room(self.path, exc):
                raise WalWriteError(f"WAL slot {self.path} cannot be created: {exc} ({free_space(self.path)})",
                                    self.path) from exc
            raise WalFormatError(f"WAL slot {self.path} is unreadable: {exc}", self.path) from exc
        except BaseException:
            # Whatever failed, the environment is closed before the caller releases the slot's lock.
            self.env.close()
            raise

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
        with self._read("open") as txn:
            fmt, sink, gen, last_sync, last_boot = (
                None if v is None else bytes(v)
                for v in (txn.get(k, db=self._meta) for k in (_FORMAT_KEY, _SINK_KEY, _GEN_KEY, _SYNC_KEY, _BOOT_KEY))
            )
            gen = b"0" if gen is None else gen
            populated = txn.stat(self._chunks)["entries"] or txn.stat(self._attempts)["entries"]
            empty = self.holds_nothing(txn, _TABLES)
        boot = boot_id()
        if fmt is None:
            if populated:
                raise WalFormatError(f"WAL slot {self.path} holds records but no format version", self.path)
            self.gen = self._fresh_gen
            self._stamp = self._meta_entries(boot, {_SINK_KEY: self.sink_name.encode(),
                                                    _GEN_KEY: str(self.gen).encode()})
            with self._write("create"):  # a new slot's tables and meta
                pass
            return
        version = fmt[:40].decode(errors="replace")
        if version != str(WAL_VERSION) and not empty:
            raise WalVersionError(
                f"WAL slot {self.path} has format version {version!r}; this build reads version {WAL_VERSION} only. "
                "Nothing of it is read or changed: deliver it with the version of spark_recoverable_sink that wrote "
                "it (rks replay), or set it aside (rks quarantine).", self.path, version=version,
            )
        if sink is not None and sink.decode(errors="replace") != self.sink_name:
            raise WalFormatError(
                f"WAL slot {self.path} belongs to sink {sink.decode(errors='replace')!r}, not {self.sink_name!r}",
                self.path,
            )
        if not gen.isdigit():
            raise WalFormatError(f"WAL slot {self.path}: meta gen is {gen[:40]!r}, not a number", self.path)
        self.gen = int(gen)
        if last_sync == b"none" and (boot is None or last_boot != boot):
            # Written without fsync, and the machine may have crashed since: trust nothing unchecked.
            try:
                self.validate()
            except WalError as exc:
                raise WalUncleanError(
                    f"WAL slot {self.path} was written with wal_sync=\"none\" and the machine restarted since; "
                    f"it fails validation and must be set aside (quarantine): {exc}", self.path) from exc
            self.validated_after_reboot = True
            log.warning("slot=%s written with wal_sync=none before a restart: validated in full", self.path)
        if version != str(WAL_VERSION):  # another version's slot holding nothing: nothing to misread, taken as new
            log.warning("slot=%s of format version %r holds nothing: stamped %d", self.path, version, WAL_VERSION)
        # Stamped only on a change; a disk that refuses it does not stop a recovery: it goes with the next write.
        if version != str(WAL_VERSION) or last_sync != (b"commit" if self.sync else b"none") or (
                not self.sync and boot is not None and last_boot != boot):
            self._stamp = self._meta_entries(boot, {})
            try:
                with self._write("open"):
                    pass
            except WalWriteError as exc:
                log.warning("slot=%s meta not stamped at open, stamped with its next write: %s", self.path, exc)

    def _meta_entries(self, boot: bytes | None, extra: dict[bytes, bytes]) -> dict[bytes, bytes]:
        """This build's format and how the slot is being written (and ``extra``), as meta entries."""
        out = {_FORMAT_KEY: str(WAL_VERSION).encode(), _SYNC_KEY: b"commit" if self.sync else b"none", **extra}
        if not self.sync and boot is not None:
            out[_BOOT_KEY] = boot
        return out

    # -- write transactions ----------------------------------------------------

    @contextlib.contextmanager
    def _write(self, what: str) -> Iterator[lmdb.Transaction]:
        """A write transaction; LMDB failures become typed WAL errors."""
        stamp = self._stamp
        try:
            with self.env.begin(write=True) as txn:
                yield txn
                for k, v in stamp.items():  # in the same transaction as the first change
                    txn.put(k, v, db=self._meta)
            if stamp:
                self._stamp = {}
                if not self.sync:  # how the slot is written: on disk before what it says is trusted
                    with contextlib.suppress(lmdb.Error):
                        self.env.sync(True)
        except lmdb.MapFullError as exc:
            raise WalFullError(
                f"WAL slot {self.path} is full (LMDB map size {self.env.info()['map_size']} bytes) during {what}",
                self.path,
            ) from exc
        except (lmdb.Error, OSError) as exc:
            # ENOSPC and EIO arrive as lmdb.Error (DiskError or a generic one):
            # the transaction was aborted, so nothing of it was written.
            raise WalWriteError(
                f"WAL slot {self.path}: {what} failed, nothing written: {exc} ({free_space(self.path)})", self.path,
            ) from exc

    def reserve_gen(self) -> int:
        """A fresh generation number for a task attempt in this slot.

        Kept in memory and stored with the attempt's first chunk, so it costs
        no transaction of its own.
        """
        self.gen += 1
        return self.gen

    def append(self, key: ChunkKey, chunk: bytes | memoryview,
               new_attempt: AttemptState | None = None) -> None:
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
        self.set_attempts([(key, state)])

    def set_attempts(self, states: Iterable[tuple[AttemptKey, AttemptState]]) -> None:
        """Record attempts' states in one transaction, durably (a coalesced task commits all of its own at once)."""
        with self._write("set_attempt") as txn:
            for key, state in states:
                txn.put(key.pack(), encode_attempt(state), db=self._attempts)

    def commit_attempt(self, key: AttemptKey, spark_attempt: int, rows: int, started_at: float,
                       guarantee: int = AT_LEAST_ONCE, digest: int = 0) -> None:
        """Mark an attempt committed (durably): its records are accepted under ``guarantee``."""
        self.set_attempt(key, AttemptState(COMMITTED, spark_attempt, rows, started_at, guarantee, digest))

    def prune(
        self,
        chunks: list[tuple[ChunkKey, int]] = (),  # type: ignore[assignment]
        dead: list[tuple[bytes, DeadLetter]] = (),  # type: ignore[assignment]
        attempts_done: list[AttemptKey] = (),  # type: ignore[assignment]
    ) -> None:
        """In one transaction: store dead letters, delete finished chunks and attempts.

        ``chunks`` pairs each key with the byte size it was counted with. A
        prune without dead letters that the disk refuses is deferred, not an
        error (see :mod:`.space`).

        Raises:
            WalWriteError: a prune that stores dead letters was refused (nothing written).
        """
        if self.retired or not (chunks or dead or attempts_done or self.deferred()):
            return
        gone_chunks, gone_attempts = list(self._gone_chunks), list(self._gone_attempts)
        try:
            with self._write("prune") as txn:
                for dkey, d in dead:
                    txn.put(dkey, encode_dead_letter(d), db=self._dead)
                for ck, _size in chunks:
                    txn.delete(ck.pack(), db=self._chunks)
                for ak in attempts_done:
                    txn.delete(ak.pack(), db=self._attempts)
                for packed in gone_chunks:  # deletions a full disk refused before
                    txn.delete(packed, db=self._chunks)
                for packed in gone_attempts:
                    txn.delete(packed, db=self._attempts)
        except WalWriteError as exc:
            if dead:  # a dead letter must be stored before its chunk goes: the caller tries again
                raise
            freed = self._defer_deletions(chunks, attempts_done, exc)
        else:
            freed = sum(size for ck, size in chunks if ck.pack() not in self._gone_chunks)
            for packed in gone_chunks:
                self._gone_chunks.pop(packed, None)
            self._gone_attempts.difference_update(gone_attempts)
        if freed:
            with self._bytes_lock:
                self.live_bytes -= freed
                self._bytes_lock.notify_all()

    def put_dead_letters(self, dead: list[tuple[bytes, DeadLetter]]) -> None:
        self.prune(dead=dead)

    def delete_dead_letters(self, keys: list[bytes]) -> int:
        """Remove dead letters from the store (an operator re-sent them); returns how many were there.

        Raises:
            WalWriteError: the transaction failed; nothing was removed.
        """
        with self._write("delete_dead_letters") as txn:
            return sum(bool(txn.delete(k, db=self._dead)) for k in keys)

    def abort_attempt(self, key: AttemptKey) -> int:
        """Delete an attempt and all its chunks; returns the number of chunks removed."""
        removed: list[tuple[ChunkKey, int]] = []
        with self._read("abort_attempt") as txn:
            for ck, size in self._chunk_keys(txn, lambda k: k.attempt == key):
                removed.append((ck, size))
        self.prune(chunks=removed, attempts_done=[key])
        return len(removed)

    def close(self) -> None:
        with contextlib.suppress(lmdb.Error):
            self.env.close()

