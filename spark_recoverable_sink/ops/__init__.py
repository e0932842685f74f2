"""Operator tools: the ``rks`` command line (:mod:`.cli`) and the functions behind each of its subcommands.

Nothing here is imported by the write path: a task never loads ``click`` or
``rich``. The driver's Prometheus metrics live in :mod:`..driver.metrics`.

Internal: not part of the public API (:mod:`spark_recoverable_sink`), which may change in any release.
"""
