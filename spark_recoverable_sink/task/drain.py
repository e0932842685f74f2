"""Delivering what is left in executors' WALs, without writing anything new.

:meth:`.RecoverableKafkaSink.drain` runs one small Spark job whose tasks:

1. take this worker's runtime for the sink (its slot, its producer);
2. adopt every orphan slot of the sink on that executor (dead owners);
3. deliver for up to ``timeout_s`` (:meth:`..recovery.deliver.Delivery.deliver`).

A task returns even when the broker is still down: its worker stays alive
and its background thread keeps delivering. The driver runs a drain after a
batch fails, because PySpark ends the worker of a failed task -- and with it
the thread that would have delivered the records that worker had accepted.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from typing import Any, Collection, Iterable, Iterator

import pyarrow as pa

from ..arrays import record_batch
from ..config import SinkConfig
from ..deadline import Deadline
from ..delivery.exactly_once.topic import expect_marker_topic
from .runtime import get_runtime

__all__ = ["DrainTask", "DrainReport", "DRAIN_DDL", "drain_worker"]

DRAIN_DDL = ("pid bigint, slot string, replayed bigint, pending bigint, seconds double, units string, "
             "dead_letters string")
_SCHEMA = pa.schema([("pid", pa.int64()), ("slot", pa.string()), ("replayed", pa.int64()),
                     ("pending", pa.int64()), ("seconds", pa.float64()), ("units", pa.string()),
                     ("dead_letters", pa.string())])


@dataclass(frozen=True)
class DrainReport:
    """What a drain found: orphaned records replayed, records still pending when it returned.

    ``units``: exactly-once units still waiting, per worker (``{"lane", "batch",
    "rows", "tries", "last_error"}``); ``dead_letters``: (record id, error,
    token) the workers offer, as in task reports.
    """

    replayed: int
    pending: int
    workers: int
    seconds: float
    units: tuple[dict[str, Any], ...] = ()
    dead_letters: tuple[tuple[str, str, str], ...] = ()


def drain_worker(config: SinkConfig, timeout_s: float, confirmed: Collection[str] = (),
                 marker_topic_id: str | None = None) -> dict[str, float | int | str]:
    """Adopt orphans and wait for this worker's records to be acked (or the timeout).

    Dead letters whose token is in ``confirmed`` (the driver holds them) are
    marked reported. ``marker_topic_id``: exactly-once, the marker topic as the
    driver checked it (:func:`..delivery.exactly_once.topic.expect_marker_topic`).
    """
    t0 = time.monotonic()
    if marker_topic_id is not None:
        expect_marker_topic(config, marker_topic_id)
    rt = get_runtime(config)
    deadline = Deadline(timeout_s)
    with rt.publisher.task():
        replayed = rt.take_replayed() + rt.adopt_orphans()
        if confirmed:
            rt.publisher.confirm_dead_letters(frozenset(confirmed))
        pending = rt.delivery.deliver(deadline)
        rt.write_deferred()  # deletions a full disk refused: written now, or the empty slot recreated
        waiting = rt.units.waiting() if rt.units is not None else []
        offered = rt.publisher.offer_unreported_dead()
    return {"pid": os.getpid(), "slot": rt.wal.path if rt.wal is not None else "", "replayed": replayed,
            "pending": pending,
            "seconds": time.monotonic() - t0, "units": json.dumps(waiting),
            "dead_letters": json.dumps([list(x) for x in offered])}


class DrainTask:
    """Picklable ``mapInArrow`` function of a drain job: configuration and confirmed dead letters."""

    def __init__(self, config: SinkConfig, timeout_s: float, confirmed: tuple[str, ...] = (),
                 marker_topic_id: str | None = None) -> None:
        self.config = config
        self.timeout_s = timeout_s
        self.confirmed = confirmed
        self.marker_topic_id = marker_topic_id

    def __call__(self, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for _ in batches:  # the input only places the task
            pass
        yield record_batch([drain_worker(self.config, self.timeout_s, self.confirmed, self.marker_topic_id)],
                           _SCHEMA)
