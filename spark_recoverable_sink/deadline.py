"""A shared time limit, so nested waits never add up past the caller's budget."""

from __future__ import annotations

import time

__all__ = ["Deadline"]


class Deadline:
    """A point in monotonic time; ``timeout_s=None`` means no limit."""

    __slots__ = ("_end",)

    def __init__(self, timeout_s: float | None) -> None:
        self._end = None if timeout_s is None else time.monotonic() + max(0.0, timeout_s)

    def remaining(self) -> float | None:
        """Seconds left (never negative), or ``None`` for no limit."""
        if self._end is None:
            return None
        return max(0.0, self._end - time.monotonic())

    def expired(self) -> bool:
        return self._end is not None and time.monotonic() >= self._end

    def cap(self, seconds: float) -> float:
        """``seconds`` shortened so that it ends no later than the deadline."""
        left = self.remaining()
        return seconds if left is None else min(seconds, left)
