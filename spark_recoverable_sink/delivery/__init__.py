"""Delivery: from WAL chunks to Kafka acks.

* :mod:`.chunks`: a chunk's state machine (``ChunkTracker``, ``ChunkBook``); :mod:`.attempts`: chunks per attempt;
* :mod:`.rows`: the produce loop (the hot path); :mod:`.client`: the client, created lazily and replaced;
* :mod:`.steps`: the account, watchdog and retry steps of a pass; :mod:`.poller`: the poller thread and poll lock;
* :mod:`.prune`: pruning done chunks; :mod:`.dead_letters`: records refused for good;
* :mod:`.publisher`: the facade the rest of the package calls;
* :mod:`.exactly_once`: units published in Kafka transactions.

Internal: not part of the public API (:mod:`spark_recoverable_sink`), which may change in any release.
"""
