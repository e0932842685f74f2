"""One round of ``produce`` calls of one chunk, and the delivery reports it gets.

Delivery reports of a round go to that round's :class:`Round` (one bound
callback per chunk and round, never per record): reports of an abandoned
round (producer replaced, watchdog) land in an object nobody reads any more.
"""

from __future__ import annotations

from typing import Any

__all__ = ["Round"]


class Round:
    """Delivery reports of one round of ``produce`` calls of one chunk."""

    __slots__ = ("indices", "expected", "settled", "acked", "failed_raw", "sync_failed", "sealed", "started",
                 "epoch")

    def __init__(self, indices: list[int] | None, epoch: int, started: float) -> None:
        self.indices = indices  # None: every record
        self.expected = 0
        self.settled = 0
        self.acked = 0
        self.failed_raw: list[tuple[Any, str, bytes | None, bytes | None]] = []  # (error, topic, key, value)
        self.sync_failed: list[tuple[int, Any]] = []
        self.sealed = False
        self.started = started
        self.epoch = epoch  # which producer the round went to

    def on_delivery(self, err: Any, msg: Any) -> None:
        """confluent-kafka delivery callback (runs under the publisher's poll lock)."""
        if err is None:
            self.acked += 1
        else:
            self.failed_raw.append((err, msg.topic(), msg.key(), msg.value()))
        self.settled += 1

    @property
    def done(self) -> bool:
        return self.sealed and self.settled >= self.expected
