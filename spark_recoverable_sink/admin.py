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
from .slots import SlotLock, ensure_private_dir, list_slots, resolve_wal_dir, slot_paths
from .wal import Wal

__all__ = ["SlotInfo", "inspect_slots", "quarantine_slot", "quarantine_held", "abort_transactions", "QUARANTINE_DIR"]

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
    sdir = os.path.join(resolve_wal_dir(wal_dir), sink_name)
    if not os.path.isdir(sdir):
        return []
    out = []
    for index in list_slots(sdir):
        lock = SlotLock(sdir, index)
        path = lock.wal_path
        try:
            free = lock.try_acquire()
        except WalError as exc:
            out.append(SlotInfo(index, path, False, None, str(exc)))
            continue
        if not free:
            out.append(SlotInfo(index, path, True, None, None))
            continue
        try:
            if not os.path.exists(os.path.join(path, "data.mdb")):
                out.append(SlotInfo(index, path, False, None, None))
                continue
            try:
                # sync=True: a look must not mark the slot as written without fsync
                wal = Wal(path, sink_name=sink_name, map_size=map_size, sync=True)
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


def abort_transactions(name: str, kafka_conf: dict, topic: str, lanes: "list[str] | None" = None,
                       timeout_s: float = 30.0) -> list[str]:
    """Exactly-once: abort every transaction the sink's lanes left open; returns the lanes handled.

    ``lanes`` defaults to every lane that ever committed (its marker group
    exists); pass lane names (``rks-eo.<sink>.<run>.<partition>``) for others.
    A lane in use is fenced too; its owner re-initialises and carries on.

    Raises:
        ConfigError: the configuration is not valid for an exactly-once sink.
        confluent_kafka.KafkaException: a lane could not be initialised in ``timeout_s``.
    """
    from .config import SinkConfig
    from .delivery.lanes import abort_lingering

    config = SinkConfig.build(name, kafka_conf, "/nonexistent-wal-dir-not-used", topic=topic,
                              guarantee="exactly_once")
    return abort_lingering(config, lanes, timeout_s)
