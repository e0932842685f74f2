"""Delivery: from WAL chunks to Kafka acks.

* :mod:`.chunks`: a chunk's state machine (``ChunkTracker``, ``ChunkBook``) and attempt counts;
* :mod:`.rows`: the produce loop (the hot path);
* :mod:`.producer`: the client: lazy creation, replacement, purge of replaced ones;
* :mod:`.checkpoint`: pruning done chunks and finished attempts;
* :mod:`.steps`: the settle, watchdog and retry steps of a pass;
* :mod:`.publisher`: the facade the rest of the package calls, and the poller pass.
"""

from .publisher import Publisher

__all__ = ["Publisher"]
