"""Compatibility name: the chunk state machine lives in :mod:`.delivery.chunks`."""

from .delivery.chunks import NON_RETRIABLE, PRODUCER_RESET, AttemptTracker, ChunkTracker, State

__all__ = ["ChunkTracker", "AttemptTracker", "NON_RETRIABLE", "PRODUCER_RESET", "State"]
