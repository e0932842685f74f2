"""WAL slots seen from outside: who holds each slot's lock, what a slot holds, where missing rows are.

Everything here only reads (``/proc/locks``, LMDB opened read-only), so
it can look at the slots of dead and live workers alike.
"""

from __future__ import annotations

import contextlib
import os
from typing import TYPE_CHECKING, Any

from .procs import alive

if TYPE_CHECKING:
    from .readback import Tally


def _flock_holders() -> dict[tuple[int, int, int], int]:
    """(major, minor, inode) -> pid of every FLOCK WRITE lock, from /proc/locks."""
    out: dict[tuple[int, int, int], int] = {}
    with open("/proc/locks") as f:
        for line in f:
            parts = line.split()
            if "->" in parts:
                continue  # a waiter, not a holder
            if len(parts) >= 6 and parts[1] == "FLOCK" and parts[3] == "WRITE":
                with contextlib.suppress(ValueError):
                    maj, mnr, ino = parts[5].split(":")
                    out[(int(maj, 16), int(mnr, 16), int(ino))] = int(parts[4])
    return out


def slot_holders(wal_dir: str, sink: str) -> dict[int, int | None]:
    """slot index -> pid holding its flock (None when free)."""
    sdir = os.path.join(wal_dir, sink)
    holders = _flock_holders()
    out: dict[int, int | None] = {}
    if not os.path.isdir(sdir):
        return out
    for name in sorted(os.listdir(sdir)):
        if name.startswith("slot-") and name.endswith(".lock"):
            idx = int(name[5:10])
            try:
                st = os.stat(os.path.join(sdir, name))
            except FileNotFoundError:
                continue
            out[idx] = holders.get((os.major(st.st_dev), os.minor(st.st_dev), st.st_ino))
    return out


def slot_attempts(slot_path: str) -> dict[tuple[int, int, int], int]:
    """A slot's attempts table read-only: (batch, partition, gen) -> state (1 open, 2 committed)."""
    import lmdb

    from spark_recoverable_sink.wal.format import AttemptKey
    from spark_recoverable_sink.wal.records import decode_attempt

    if not os.path.exists(os.path.join(slot_path, "data.mdb")):
        return {}
    env = lmdb.open(slot_path, readonly=True, lock=True, max_dbs=4, subdir=True, create=False)
    try:
        try:
            db = env.open_db(b"attempts", create=False)
        except lmdb.NotFoundError:
            return {}
        with env.begin(db=db) as txn:
            out = {}
            for k, v in txn.cursor():
                ak = AttemptKey.unpack(bytes(k))
                out[(ak.batch, ak.origin, ak.gen)] = decode_attempt(bytes(v)).state
            return out
    finally:
        env.close()


def slot_row_keys(slot_path: str) -> dict[bytes, int]:
    """Row key -> count of every record in a slot's chunks, read-only (committed or not, acked or not)."""
    import lmdb

    from spark_recoverable_sink.wal.format import decode_chunk

    out: dict[bytes, int] = {}
    if not os.path.exists(os.path.join(slot_path, "data.mdb")):
        return out
    env = lmdb.open(slot_path, readonly=True, lock=True, max_dbs=4, subdir=True, create=False)
    try:
        try:
            db = env.open_db(b"chunks", create=False)
        except lmdb.NotFoundError:
            return out
        with env.begin(db=db) as txn:
            for _k, v in txn.cursor():
                batch = decode_chunk(bytes(v))
                for key in batch.column(batch.schema.names.index("key")).to_pylist():
                    out[key] = out.get(key, 0) + 1
        return out
    finally:
        env.close()


def explain_missing(t: "Tally", wal_dir: str, sink: str, parts: list[Any]) -> str:
    """Why rows are missing from Kafka: still in a WAL slot (whose owner is dead or alive), or nowhere.

    For the end-of-test check of a scenario: 'in a WAL' is pending (within the
    guarantee; nobody came for it yet), 'nowhere' is a loss.
    """
    missing = {str(i).encode() for i in t.lost_rows}
    where: dict[str, int] = {}
    found: set[bytes] = set()
    for idx, pid in slot_holders(wal_dir, sink).items():
        try:
            keys = slot_row_keys(os.path.join(wal_dir, sink, f"slot-{idx:05d}"))
        except Exception as exc:  # noqa: BLE001 -- part of the diagnosis
            where[f"slot {idx} unreadable ({type(exc).__name__}: {exc})"] = -1
            continue
        hit = missing & set(keys)
        if hit:
            owner = "free (owner dead)" if pid is None else f"held by pid {pid} ({'alive' if alive(pid) else 'dead'})"
            where[f"slot {idx} {owner}"] = len(hit)
            found |= hit
    nowhere = len(missing - found)
    pending = {(p.origin, p.spark_attempt, p.pid): p.pending for p in parts if p.pending}
    if not nowhere:
        case = "PENDING: every missing row is still in a WAL slot (accepted, not delivered)"
    else:
        case = "LOSS: rows in neither Kafka nor any WAL"
    return (f"{case}. missing={t.lost} in_wal={len(found)} nowhere={nowhere} by_slot={where} "
            f"offset_gaps={dict(list(t.offset_gaps.items())[:5])} sample={t.lost_sample[:10]} "
            f"task_reports_with_pending={pending} per_kafka_partition={t.per_partition} "
            f"reader_errors={t.errors[:5]}")
