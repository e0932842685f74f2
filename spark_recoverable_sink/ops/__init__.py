"""Operator tools: the ``rks`` command line (:mod:`.cli`) and the driver's Prometheus metrics (:mod:`.metrics`).

Nothing here is imported by the write path: each module loads its optional
dependencies (``prometheus_client``, ...) only when used.
"""
