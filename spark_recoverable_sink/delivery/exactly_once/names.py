"""The names of a sink's exactly-once lanes in Kafka: one string is a lane's ``transactional.id``, its marker
group's ``group.id`` and its marker record's key.

``rks-eo.<sink>:<run>:<lane>``: every attempt at a lane's units, in any task
and run of its batches, shares it, so Kafka fences the older producer, and the
marker of the lane's last commit is found by it (:mod:`.markers`).
"""

from __future__ import annotations

__all__ = ["lane_id", "parse_lane_id", "sink_lane_prefix", "LANE_ID_MAX"]

_LANE_PREFIX = "rks-eo."
#: The longest lane id: prefix 7, sink name 100, run id 64, lane 10 (an int32) and two colons. Kafka sets no
#: length limit on a transactional.id or group.id beyond its protocol's (32767 bytes); this stays below the
#: tightest name limit it has (a topic's, 249), for tools and brokers that cap them.
LANE_ID_MAX = 7 + 100 + 1 + 64 + 1 + 10


def lane_id(sink: str, run: str, lane: int) -> str:
    """The ``transactional.id`` (and marker group and record key) of one lane: what all attempts at its units share.

    ``rks-eo.<sink>:<run>:<lane>``. Sink names and run ids hold no
    ``:`` (``[A-Za-z0-9._-]``), so no two (sink, run, lane) share a name
    (:func:`parse_lane_id` reads one back).

    Raises:
        ValueError: ``sink`` or ``run`` holds a ``:`` (never so for a validated sink name and run id).
    """
    if ":" in sink or ":" in run:
        raise ValueError(f"a lane's sink name and run id hold no ':' (sink {sink!r}, run {run!r})")
    return f"{_LANE_PREFIX}{sink}:{run}:{lane}"


def sink_lane_prefix(sink: str) -> str:
    """What every lane id of ``sink``, and no other sink's, starts with."""
    return f"{_LANE_PREFIX}{sink}:"


def parse_lane_id(lid: str) -> tuple[str, str, int] | None:
    """``(sink, run, lane)`` of a lane id of :func:`lane_id`; ``None`` for anything else."""
    parts = lid[len(_LANE_PREFIX):].split(":") if lid.startswith(_LANE_PREFIX) else []
    if len(parts) != 3 or not parts[0] or not parts[2].isdigit():
        return None
    return parts[0], parts[1], int(parts[2])
