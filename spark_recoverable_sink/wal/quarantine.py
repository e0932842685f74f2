"""Setting a slot aside: moved under the sink's ``quarantine/`` directory with its bytes kept.

``quarantine_slot`` is the operator's (``rks quarantine``): it moves an
unreadable (or unwanted) slot aside so that the sink stops reporting it and an
operator can examine it; ``quarantine_held`` is the move itself, also used by
recovery for a slot that fails validation after a reboot.
"""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING

from ..errors import WalError
from .format import ChunkKey
from .slots import SlotLock, ensure_private_dir, resolve_wal_dir, slot_paths

if TYPE_CHECKING:  # pragma: no cover
    from .log import Wal

__all__ = ["quarantine_slot", "quarantine_held", "quarantine_chunk", "quarantined_chunks", "QUARANTINE_DIR"]

QUARANTINE_DIR = "quarantine"


def quarantine_slot(wal_dir: str, sink_name: str, slot_index: int) -> str:
    """Move a slot aside (bytes kept) to ``<wal_dir>/<sink>/quarantine/``; returns its new path.

    Its records are no longer replayed by the sink: what it held is the
    operator's to examine (and, if readable, to replay with the CLI).

    Raises:
        WalError: the slot does not exist, or a live process owns it.
    """
    sdir = os.path.join(resolve_wal_dir(wal_dir), sink_name)
    lock_path, wal_path = slot_paths(sdir, slot_index)
    if not os.path.lexists(lock_path) and not os.path.lexists(wal_path):
        raise WalError(f"no slot {slot_index} under {sdir}", wal_path)
    lock = SlotLock(sdir, slot_index)
    if not lock.try_acquire():
        raise WalError(f"slot {wal_path} is owned by a live process; stop it first", wal_path)
    try:
        return quarantine_held(lock, sdir)
    finally:
        lock.release()


def quarantine_held(lock: SlotLock, sdir: str) -> str:
    """Move the slot whose lock the caller holds to ``<sdir>/quarantine/``; returns its new path.

    The caller releases the lock afterwards. A process that opened the lock
    file before it was unlinked finds, once it has the ``flock``, that the file
    is no longer the one at the path, and lets it go (see :class:`.SlotLock`).

    Raises:
        WalError: the quarantine directory is not private, or the move failed.
    """
    qdir = ensure_private_dir(os.path.join(sdir, QUARANTINE_DIR), "quarantine directory")
    dest = os.path.join(qdir, f"slot-{lock.index:05d}-{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}")
    try:
        if os.path.lexists(lock.wal_path):
            os.rename(lock.wal_path, dest)
        else:
            os.mkdir(dest, 0o700)
        # The lock file goes last, while we still hold it: nobody can take the
        # slot between the move and the unlink.
        os.unlink(lock.lock_path)
    except OSError as exc:
        raise WalError(f"cannot quarantine slot {lock.wal_path} to {dest}: {exc}", lock.wal_path) from exc
    return dest


def quarantine_chunk(sdir: str, wal: "Wal", key: ChunkKey, why: str) -> str:
    """Copy one chunk's bytes (as stored, damaged or not) to ``<sdir>/quarantine/``; returns the file's path.

    The file is written and fsynced before the caller deletes the chunk from
    the WAL; a ``.why`` file beside it says why it was set aside.

    Raises:
        WalError: the quarantine directory is not private, or the copy failed (nothing is deleted then).
    """
    qdir = ensure_private_dir(os.path.join(sdir, QUARANTINE_DIR), "quarantine directory")
    raw = wal.read_chunk(key) or b""
    slot = os.path.basename(wal.path)
    dest = os.path.join(qdir, f"chunk-{slot}-b{key.batch}-p{key.origin}-s{key.first_seq}-g{key.gen}-"
                              f"{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}.bin")
    try:
        for path, data in ((dest, raw), (dest[:-4] + ".why", why.encode())):
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
            try:
                view = memoryview(data)
                while view:  # a short write (a nearly full disk) is written on, or raises
                    view = view[os.write(fd, view):]
                os.fsync(fd)
            finally:
                os.close(fd)
    except OSError as exc:
        raise WalError(f"cannot set chunk {key} of {wal.path} aside to {dest}: {exc}", wal.path) from exc
    return dest


def quarantined_chunks(sdir: str) -> list[tuple[str, str]]:
    """``(file, why)`` of every chunk set aside under ``<sdir>/quarantine/`` (operators: ``rks inspect``)."""
    qdir = os.path.join(sdir, QUARANTINE_DIR)
    if not os.path.isdir(qdir):
        return []
    out = []
    for name in sorted(os.listdir(qdir)):
        if name.startswith("chunk-") and name.endswith(".bin"):
            path = os.path.join(qdir, name)
            try:
                with open(path[:-4] + ".why", encoding="utf-8", errors="replace") as f:
                    why = f.read()
            except OSError:
                why = ""
            out.append((path, why))
    return out
