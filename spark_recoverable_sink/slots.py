"""WAL slots and who owns them.

Each Python worker process owns one slot under ``<wal_dir>/<sink name>/``:
a directory ``slot-NNNNN`` (the LMDB environment) and a lock file
``slot-NNNNN.lock`` held with an exclusive ``flock``. The OS drops the lock
when its holder dies, however it dies, so a slot whose lock can be taken
belongs to nobody alive: if it still holds records, they are orphans that the
taker adopts (see :mod:`.runtime`). Two processes can never hold one slot.
"""

from __future__ import annotations

import fcntl
import logging
import os
import re
import socket

__all__ = ["SlotLock", "sink_dir", "slot_paths", "acquire_free_slot", "list_slots"]

log = logging.getLogger(__name__)

_SLOT_RE = re.compile(r"^slot-(\d{5})\.lock$")


def sink_dir(wal_dir: str, sink_name: str) -> str:
    """``<wal_dir>/<sink name>``, created readable by its owner only."""
    os.makedirs(wal_dir, mode=0o700, exist_ok=True)
    path = os.path.join(wal_dir, sink_name)
    os.makedirs(path, mode=0o700, exist_ok=True)
    return path


def slot_paths(sdir: str, index: int) -> tuple[str, str]:
    """(lock file, LMDB directory) of slot ``index``."""
    return os.path.join(sdir, f"slot-{index:05d}.lock"), os.path.join(sdir, f"slot-{index:05d}")


def list_slots(sdir: str) -> list[int]:
    """Indices of the slots that exist under a sink directory, in order."""
    out = []
    for name in os.listdir(sdir):
        m = _SLOT_RE.match(name)
        if m:
            out.append(int(m.group(1)))
    return sorted(out)


class SlotLock:
    """An exclusive, non-blocking ``flock`` on a slot's lock file."""

    def __init__(self, sdir: str, index: int) -> None:
        self.index = index
        self.lock_path, self.wal_path = slot_paths(sdir, index)
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def try_acquire(self, create: bool = False) -> bool:
        """Take the lock if nobody alive holds it.

        With ``create`` the lock file must not exist yet (so that two processes
        creating "the next slot" at once never pick the same one).
        """
        flags = os.O_RDWR | os.O_CLOEXEC | (os.O_CREAT | os.O_EXCL if create else 0)
        try:
            fd = os.open(self.lock_path, flags, 0o600)
        except (FileExistsError, FileNotFoundError):
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        self._fd = fd
        # Who holds it, for operators (the lock itself is what counts).
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid={os.getpid()} host={socket.gethostname()}\n".encode(), 0)
        return True

    def release(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            try:
                fcntl.flock(fd, fcntl.LOCK_UN)
            finally:
                os.close(fd)

    def __repr__(self) -> str:
        return f"SlotLock(index={self.index}, held={self.held}, path={self.lock_path!r})"


def acquire_free_slot(sdir: str, skip: set[int] = frozenset()) -> SlotLock:  # type: ignore[assignment]
    """Take the first free slot (lowest index), or create a new one.

    A free slot may hold a dead owner's records: the caller recovers them.
    """
    for index in list_slots(sdir):
        if index in skip:
            continue
        lock = SlotLock(sdir, index)
        if lock.try_acquire():
            return lock
    index = (max(list_slots(sdir), default=-1)) + 1
    while True:
        lock = SlotLock(sdir, index)
        if lock.try_acquire(create=True):
            return lock
        index += 1
