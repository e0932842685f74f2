"""One round of ``produce`` calls of one chunk, and the delivery reports it gets.

Delivery reports of a round go to that round's :class:`Round`: one bound
callback per chunk and round (the Python engine; a failure is matched to its
record by content when the round is accounted for), or counts per round from the
native engine (:meth:`Round.add_reports`, each failure with its exact row).
Reports of an abandoned round (producer replaced, watchdog) land in an object
nobody reads any more.
"""

from __future__ import annotations

from typing import Any

__all__ = ["Round"]


class Round:
    """Delivery reports of one round of ``produce`` calls of one chunk."""

    __slots__ = ("indices", "expected", "reported", "acked", "failed_raw", "failed_at", "sync_failed", "sealed",
                 "started", "epoch", "rid", "__weakref__")

    def __init__(self, indices: list[int] | None, epoch: int, started: float) -> None:
        self.indices = indices  # None: every record
        self.expected = 0
        self.reported = 0
        self.acked = 0
        self.failed_raw: list[tuple[Any, str, bytes | None, bytes | None]] = []  # (error, topic, key, value)
        self.failed_at: list[tuple[int, Any]] = []  # (row index, error): failures the engine attributed exactly
        self.sync_failed: list[tuple[int, Any]] = []
        self.sealed = False
        self.started = started
        self.epoch = epoch  # which producer the round went to
        self.rid = 0  # the round's id with the engine

    def on_delivery(self, err: Any, msg: Any) -> None:
        """confluent-kafka delivery callback (runs under the publisher's poll lock)."""
        if err is None:
            self.acked += 1
        else:
            self.failed_raw.append((err, msg.topic(), msg.key(), msg.value()))
        self.reported += 1

    def add_reports(self, acked: int, reported: int, failures: list[tuple[int, Any]]) -> None:
        """Delivery reports counted by the native engine: acks, and each failed row with its error."""
        self.acked += acked
        self.failed_at.extend(failures)
        self.reported += reported

    @property
    def done(self) -> bool:
        return self.sealed and self.reported >= self.expected
