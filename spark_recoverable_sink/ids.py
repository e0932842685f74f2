"""Record ids: what a record's id is made of, and the run component that keeps queries apart.

A record's id is ``sink:run:batch:partition:seq`` and travels in its
``id_header``. It depends only on the run and the data, never on the WAL
slot or the task attempt that wrote it (see README "Record ids").
"""

from __future__ import annotations

import re

__all__ = ["valid_run_id", "record_id_prefix", "record_id"]

_RUN_RE = re.compile(r"^[A-Za-z0-9._-]{1,64}$")


def valid_run_id(run: str) -> bool:
    """Whether ``run`` can be a record id's run component (1-64 of ``[A-Za-z0-9._-]``, no ``:``)."""
    return isinstance(run, str) and bool(_RUN_RE.match(run))


def record_id_prefix(sink: str, batch: int, partition: int, run: str = "") -> bytes:
    """The part of a record id shared by one (run, batch, partition): ``sink:run:batch:partition:``.

    An empty ``run`` gives the run-less form ``sink:batch:partition:`` of
    chunks written before ids had a run (so their replays keep their ids).
    """
    return (f"{sink}:{run}:{batch}:{partition}:" if run else f"{sink}:{batch}:{partition}:").encode()


def record_id(sink: str, batch: int, partition: int, seq: int, run: str = "") -> str:
    """The deterministic id of one record: ``sink:run:batch:partition:seq``."""
    return f"{record_id_prefix(sink, batch, partition, run).decode()}{seq}"
