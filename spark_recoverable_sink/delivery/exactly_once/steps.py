"""The bound of one step of a unit's publication (a client call), and how a step ends a try early.

Where it runs: a worker, inside :meth:`.transactions.Committer.commit` and
the steps it calls (:mod:`.sweep`); nothing here pickles.
"""

from __future__ import annotations

from ...deadline import Deadline

__all__ = ["left", "StepTimeout", "Decided", "STEP_S", "COMMITTED", "SKIPPED", "PENDING", "MISMATCH", "REFUSED"]

#: How a try at a unit ends (:meth:`.transactions.Committer.commit`).
COMMITTED, SKIPPED, PENDING, MISMATCH, REFUSED = "committed", "skipped", "pending", "mismatch", "refused"
STEP_S = 2.0  # the least time one step gets: the deadline is checked between steps, a step is not cut short


class StepTimeout(Exception):
    """No time left for a step: the unit stays pending (resumed later)."""


class Decided(Exception):
    """The lane's marker decided the unit before any producer was touched (skipped, or a mismatch)."""

    def __init__(self, outcome: str) -> None:
        super().__init__(outcome)
        self.outcome = outcome


def left(deadline: Deadline, what: str) -> float:
    """The timeout of one step (client call): what is left, at least ``STEP_S``.

    The deadline is checked before a step starts, never in the middle of one, so a unit longer than any
    window still progresses (each try resumes where the last one stopped); a try ends at most one step late.

    Raises:
        StepTimeout: no time is left.
    """
    rest = deadline.remaining()
    if rest is not None and rest <= 0:
        raise StepTimeout(f"no time left for {what} (resumed later)")
    return 30.0 if rest is None else max(STEP_S, rest)
