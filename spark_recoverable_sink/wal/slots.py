"""WAL slots and who owns them.

Each Python worker process owns one slot under ``<wal_dir>/<sink name>/``:
a directory ``slot-NNNNN`` (the LMDB environment) and a lock file
``slot-NNNNN.lock`` held with an exclusive ``flock``. The OS drops the lock
when its holder dies, however it dies, so a slot whose lock can be taken
belongs to nobody alive: if it still holds records, they are orphans that the
taker adopts (see :mod:`..recovery.adopter`). Two processes can never hold one slot:
after ``flock`` the taker checks that the file it locked is still the one at
the path (an operator's quarantine unlinks lock files), and tries again if not.

A WAL directory is trusted only if it is private: ``wal_dir``, the sink
directory, each slot directory and each lock file must be owned by the
current user, not writable by group or others, and not a symbolic link (they
are checked with ``lstat``/``O_NOFOLLOW``, never followed). Another local user
could otherwise plant a slot whose "committed" records the sink would publish.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import logging
import os
import re
import shutil
import socket
import stat

from .. import _points
from ..errors import WalError, WalWriteError

__all__ = [
    "SlotLock", "sink_dir", "slot_paths", "acquire_free_slot", "list_slots", "resolve_wal_dir",
    "ensure_private_dir", "check_private",
]

log = logging.getLogger(__name__)

#: errno values that mean the disk has no room (a WalWriteError: tried again later, never "unreadable")
NO_ROOM = frozenset({errno.ENOSPC, errno.EDQUOT})
_SLOT_RE = re.compile(r"^slot-(\d{5})\.lock$")


def resolve_wal_dir(wal_dir: str) -> str:
    """``wal_dir`` with a leading ``~`` expanded for the user this process runs as (on the executor).

    Raises:
        WalError: ``~`` cannot be expanded (no home directory for this user).
    """
    path = os.path.expanduser(wal_dir)
    if path.startswith("~"):
        raise WalError(f"wal_dir {wal_dir}: this user (uid {os.geteuid()}) has no home directory to expand "
                       "'~' into; set wal_dir to a private directory on a persistent disk", wal_dir)
    return path


def check_private(path: str, what: str, st: os.stat_result, kind: int) -> None:
    """Refuse a file or directory another user could have planted or can change.

    ``st`` comes from ``lstat``/``fstat`` (never following a link); ``kind``
    is ``stat.S_IFDIR`` or ``stat.S_IFREG``.

    Raises:
        WalError: naming ``what``, the path, the reason and what to change.
    """
    if stat.S_ISLNK(st.st_mode):
        raise WalError(f"{what} {path} is a symbolic link; the sink never follows one there: "
                       "point the option at the real directory", path)
    if stat.S_IFMT(st.st_mode) != kind:
        want = "a directory" if kind == stat.S_IFDIR else "a regular file"
        raise WalError(f"{what} {path} is not {want}; choose another path or remove it", path)
    if st.st_uid != os.geteuid():
        raise WalError(f"{what} {path} is owned by uid {st.st_uid}, not by the user running the sink "
                       f"(uid {os.geteuid()}); its contents cannot be trusted: chown it or choose another path",
                       path)
    if st.st_mode & 0o022:
        raise WalError(f"{what} {path} is writable by group or others (mode {stat.S_IMODE(st.st_mode):o}); "
                       f"run chmod go-w {path} (the sink creates it as 700)", path)


def ensure_private_dir(path: str, what: str) -> str:
    """Create ``path`` (mode 700) unless it exists; check it is a private directory.

    Raises:
        WalError: it cannot be created, or is not a directory of this user that only they can write.
    """
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    except OSError as exc:
        kind = WalWriteError if exc.errno in NO_ROOM else WalError
        raise kind(f"{what} {path} cannot be created: {exc.strerror or exc}", path) from exc
    try:
        st = os.lstat(path)
    except OSError as exc:
        raise WalError(f"{what} {path} cannot be read: {exc.strerror or exc}", path) from exc
    check_private(path, what, st, stat.S_IFDIR)
    if not os.access(path, os.W_OK | os.X_OK):
        raise WalError(f"{what} {path} is not writable by this process; choose another path", path)
    return path


def sink_dir(wal_dir: str, sink_name: str) -> str:
    """``<wal_dir>/<sink name>``, created readable by its owner only, both checked private.

    Raises:
        WalError: ``wal_dir`` or the sink directory is unusable (names the option, the path and the reason).
    """
    wal_dir = resolve_wal_dir(wal_dir)
    parent = os.path.dirname(os.path.abspath(wal_dir))
    try:
        os.makedirs(parent, mode=0o700, exist_ok=True)
    except OSError as exc:
        raise WalError(f"wal_dir {wal_dir}: its parent {parent} cannot be created: {exc.strerror or exc}",
                       wal_dir) from exc
    ensure_private_dir(wal_dir, "wal_dir")
    return ensure_private_dir(os.path.join(wal_dir, sink_name), "sink directory")


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
        creating "the next slot" at once never pick the same one). The lock
        counts only if the locked file is still the one at the path: a file
        unlinked (quarantined) between our open and our flock is let go and,
        unless we were creating it, the path is tried again.

        Raises:
            WalError: the lock file is a symbolic link, or not private to this user.
        """
        flags = os.O_RDWR | os.O_CLOEXEC | os.O_NOFOLLOW | (os.O_CREAT | os.O_EXCL if create else 0)
        while True:
            try:
                fd = os.open(self.lock_path, flags, 0o600)
            except (FileExistsError, FileNotFoundError):
                return False
            except OSError as exc:
                if exc.errno == errno.ELOOP:
                    raise WalError(f"slot lock file {self.lock_path} is a symbolic link; the sink never "
                                   "follows one: remove it", self.lock_path) from exc
                kind = WalWriteError if exc.errno in NO_ROOM else WalError
                raise kind(f"slot lock file {self.lock_path} cannot be opened: {exc.strerror or exc}",
                           self.lock_path) from exc
            try:
                check_private(self.lock_path, "slot lock file", os.fstat(fd), stat.S_IFREG)
                _points.point("slot.lock.opened", path=self.lock_path)
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    os.close(fd)
                    return False
                if self._still_at_path(fd):
                    break
            except BaseException:
                os.close(fd)
                raise
            os.close(fd)  # unlocks: what we locked is no longer the slot's lock file
            log.info("slot lock file %s was replaced while being locked; %s", self.lock_path,
                     "giving up on it" if create else "trying again")
            if create:
                return False
        self._fd = fd
        # Who holds it, for operators (the lock itself is what counts): best effort, since
        # recovering a slot on a full disk must not need new space.
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"pid={os.getpid()} host={socket.gethostname()}\n".encode(), 0)
        except OSError as exc:
            log.warning("slot lock file %s taken; its holder's pid not written: %s", self.lock_path, exc)
        return True

    def _still_at_path(self, fd: int) -> bool:
        try:
            at_path = os.lstat(self.lock_path)
        except FileNotFoundError:
            return False
        mine = os.fstat(fd)
        return (mine.st_dev, mine.st_ino) == (at_path.st_dev, at_path.st_ino)

    def release(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            try:
                fcntl.flock(fd, fcntl.LOCK_UN)
            finally:
                os.close(fd)

    def remove(self) -> None:
        """Delete the slot (its LMDB directory, then its lock file) and let the lock go.

        The caller holds the lock and has closed the slot's environment; what
        the slot held is no longer needed. A process that opened the lock file
        before the unlink finds, once it has the lock, that the file is no
        longer at the path, and gives up on it (:meth:`try_acquire`).
        """
        if self._fd is None:
            raise RuntimeError(f"slot {self.index} removed without its lock held")
        try:
            shutil.rmtree(self.wal_path, ignore_errors=True)
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.lock_path)
        except OSError as exc:  # e.g. a file system remounted read-only: the slot stays, empty
            log.warning("slot %s could not be removed (%s); released instead", self.lock_path, exc)
        finally:
            self.release()

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
