"""Operator actions on a sink's WAL directory (the CLI builds on these).

``inspect_slots`` lists the slots with their owner state and contents;
``quarantine_slot`` moves an unreadable (or unwanted) slot aside, keeping its
bytes, so that the sink stops reporting it and an operator can examine it.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

from .errors import WalError
from .slots import SlotLock, list_slots, slot_paths
from .wal import Wal

__all__ = ["SlotInfo", "inspect_slots", "quarantine_slot", "QUARANTINE_DIR"]

QUARANTINE_DIR = "quarantine"


@dataclass(frozen=True)
class SlotInfo:
    """What an operator needs to know about one slot."""

    index: int
    path: str
    owner_alive: bool
    stats: dict[str, int] | None
    error: str | None


def inspect_slots(wal_dir: str, sink_name: str, map_size: int = 1 << 30) -> list[SlotInfo]:
    """Describe every slot of a sink. Slots held by a live process are not opened."""
    sdir = os.path.join(wal_dir, sink_name)
    if not os.path.isdir(sdir):
        return []
    out = []
    for index in list_slots(sdir):
        lock = SlotLock(sdir, index)
        path = lock.wal_path
        if not lock.try_acquire():
            out.append(SlotInfo(index, path, True, None, None))
            continue
        try:
            if not os.path.exists(os.path.join(path, "data.mdb")):
                out.append(SlotInfo(index, path, False, None, None))
                continue
            try:
                wal = Wal(path, sink_name=sink_name, map_size=map_size, sync=False)
            except WalError as exc:
                out.append(SlotInfo(index, path, False, None, str(exc)))
                continue
            try:
                stats = wal.stats().as_dict()
                wal.check_chunks()  # what recovery would refuse, the operator sees
                out.append(SlotInfo(index, path, False, stats, None))
            except WalError as exc:
                out.append(SlotInfo(index, path, False, None, str(exc)))
            finally:
                wal.close()
        finally:
            lock.release()
    return out


def quarantine_slot(wal_dir: str, sink_name: str, slot_index: int) -> str:
    """Move a slot aside (bytes kept) to ``<wal_dir>/<sink>/quarantine/``; returns its new path.

    Its records are no longer replayed by the sink: what it held is the
    operator's to examine (and, if readable, to replay with the CLI).

    Raises:
        WalError: the slot does not exist, or a live process owns it.
    """
    sdir = os.path.join(wal_dir, sink_name)
    lock_path, wal_path = slot_paths(sdir, slot_index)
    if not os.path.exists(lock_path) and not os.path.exists(wal_path):
        raise WalError(f"no slot {slot_index} under {sdir}", wal_path)
    lock = SlotLock(sdir, slot_index)
    if not lock.try_acquire():
        raise WalError(f"slot {wal_path} is owned by a live process; stop it first", wal_path)
    try:
        qdir = os.path.join(sdir, QUARANTINE_DIR)
        os.makedirs(qdir, mode=0o700, exist_ok=True)
        dest = os.path.join(qdir, f"slot-{slot_index:05d}-{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}")
        if os.path.exists(wal_path):
            os.rename(wal_path, dest)
        else:
            os.makedirs(dest, mode=0o700)
        # The lock file goes last, while we still hold it: nobody can take the
        # slot between the move and the unlink.
        os.unlink(lock_path)
        return dest
    finally:
        lock.release()
