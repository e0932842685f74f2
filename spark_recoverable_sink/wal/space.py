"""A slot on a full disk: what may be written, what is read-only, and how the space comes back.

Recovery must deliver what a slot holds without first needing new space, so:

* opening an existing slot writes nothing (its meta is stamped only on a
  change; named tables that exist are opened without a write);
* a new slot's LMDB lock file is allocated before LMDB maps it: LMDB writes
  that file through a memory map, and a page of it the disk cannot supply
  kills the process with SIGBUS instead of raising an error;
* a prune that the disk refuses (LMDB's copy-on-write needs fresh pages even
  to delete) is not an error when it stores no dead letter: its chunks and
  attempts are proven delivered, so they read as gone from then on and their
  deletion is written with the next prune that succeeds. Nothing depends on it
  being written: a process that dies first leaves them to be replayed
  (at-least-once) or skipped by their lane's marker (exactly-once). A dead
  letter is never deferred: it must be durable before its chunk goes;
* a slot whose every entry is gone that way (or is empty) can be removed or
  recreated whole (:meth:`SlotSpace.renewable`): unlinking returns the file's
  space to the file system without a write, which LMDB's free pages would not.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from typing import Any, Callable, Iterable

from ..errors import WalWriteError
from .format import AttemptKey, ChunkKey
from .slots import NO_ROOM

__all__ = ["SlotSpace", "prepare_lock_file", "free_space", "no_room", "map_size_for", "LOCK_FILE_BYTES",
           "RENEW_ABOVE_BYTES"]

log = logging.getLogger(__name__)

#: Allocated for a new slot's ``lock.mdb`` (LMDB needs 8 KiB for its 126 readers; larger is allowed).
LOCK_FILE_BYTES = 64 * 1024
#: An empty slot whose data file is larger than this is recreated when its owner opens it.
RENEW_ABOVE_BYTES = 1024 * 1024


def map_size_for(max_wal_bytes: int) -> int:
    """LMDB map size for a byte budget: room for the live bytes, freed pages and B-tree."""
    return max(64 * 1024 * 1024, int(max_wal_bytes * 1.5) + 64 * 1024 * 1024)


def prepare_lock_file(slot_path: str) -> None:
    """Allocate a new slot's ``lock.mdb`` on disk before LMDB maps it (no-op if it exists).

    Raises:
        OSError: the disk has no room for it (nothing is left behind).
    """
    path = os.path.join(slot_path, "lock.mdb")
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except FileExistsError:
        return
    try:
        os.posix_fallocate(fd, 0, LOCK_FILE_BYTES)
    except OSError:
        os.close(fd)
        os.unlink(path)
        raise
    os.close(fd)


def no_room(path: str, exc: BaseException) -> bool:
    """Whether a failure to create a slot at ``path`` means the disk has no room (so: try again later).

    LMDB reports a short write on a full disk as EIO, so the file system's free space decides when the
    error has no errno that says so.
    """
    if getattr(exc, "errno", None) in NO_ROOM:
        return True
    try:
        st = os.statvfs(path)
    except OSError:
        return False
    return st.f_bavail * st.f_frsize < RENEW_ABOVE_BYTES


def free_space(path: str) -> str:
    """How much room the file system of ``path`` has left, for error messages."""
    try:
        st = os.statvfs(path)
    except OSError:
        return "free space unknown"
    return f"{st.f_bavail * st.f_frsize} bytes free on its file system"


class SlotSpace:
    """Space accounting of one slot (mixed into :class:`.log.Wal`)."""

    path: str
    live_bytes: int
    _bytes_lock: threading.Condition
    _gone_chunks: dict[bytes, int]
    _gone_attempts: set[bytes]
    gen: int
    retired: bool
    _fresh_gen: int
    env: Any
    _open: Callable[[], None]
    _read: Callable[[str], Any]
    _chunks: Any
    _attempts: Any
    _write: Callable[[str], Any]

    def _defer_deletions(self, chunks: Iterable[tuple[ChunkKey, int]], attempts: Iterable[AttemptKey],
                         exc: WalWriteError) -> int:
        """Record deletions the disk refused: they read as gone now and are written with the next prune.

        Returns the bytes newly counted free.
        """
        freed = 0
        with self._read("defer deletions") as txn:  # only what is there: reads subtract these counts
            for ck, size in chunks:
                packed = ck.pack()
                if packed not in self._gone_chunks and txn.get(packed, db=self._chunks) is not None:
                    self._gone_chunks[packed] = size
                    freed += size
            self._gone_attempts.update(p for p in (ak.pack() for ak in attempts)
                                       if txn.get(p, db=self._attempts) is not None)
        log.warning("slot=%s prune not written (%s): chunks=%d attempts=%d read as gone; their records are in "
                    "Kafka, the deletion is written with the next prune", self.path, exc, len(self._gone_chunks),
                    len(self._gone_attempts))
        return freed

    def deferred(self) -> bool:
        """Whether deletions wait to be written."""
        return bool(self._gone_chunks or self._gone_attempts)

    def data_file_bytes(self) -> int:
        try:
            return os.path.getsize(os.path.join(self.path, "data.mdb"))
        except OSError:
            return 0

    def renewable(self) -> bool:
        """Whether the slot holds nothing that must be kept: no chunk, attempt or dead letter but deferred ones.

        Such a slot can be removed (an adopted orphan) or recreated (its owner's slot) without losing anything.

        Raises:
            WalReadError: LMDB failed.
        """
        return self.is_empty() and not self.dead_letters()  # type: ignore[attr-defined]

    def renew(self) -> None:
        """Recreate a slot that holds nothing to keep (:meth:`renewable`), keeping its generation counter.

        Its files are removed first, so the space they held goes back to the
        file system before the new environment asks for any. The caller holds
        the slot's lock and nothing in this process refers to a chunk of it.

        Raises:
            WalWriteError: the new environment cannot be created (the slot is left empty, closed and
                retired: its prunes do nothing).
        """
        size = self.data_file_bytes()
        self.retired = True
        self._fresh_gen = self.gen
        self.env.close()
        for name in ("data.mdb", "lock.mdb"):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(os.path.join(self.path, name))
        self._open()  # one write: the new tables and meta, the generation counter kept
        self.retired = False
        log.warning("slot=%s held nothing to keep in a %d-byte file: recreated, the space returned", self.path, size)

    def wait_for_space(self, need: int, limit: int, timeout_s: float,
                       on_wait: Callable[[], Any] | None = None, held: Callable[[], int] | None = None) -> bool:
        """Block until ``live_bytes + held() + need <= limit`` or ``timeout_s`` passes.

        ``held`` gives what else the writer holds against the same limit (the
        slots its worker adopted); a writer that holds nothing at all takes one
        append of any size. ``on_wait`` is called between waits (to prune what
        is acked). Returns whether the space is there.
        """
        end = time.monotonic() + timeout_s
        while True:
            other = held() if held is not None else 0
            with self._bytes_lock:
                total = self.live_bytes + other
                if total + need <= limit or total == 0:
                    return True
                left = end - time.monotonic()
                if left <= 0:
                    return False
                self._bytes_lock.wait(min(0.05, left))
            if on_wait is not None:
                on_wait()
