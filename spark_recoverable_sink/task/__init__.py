"""The executor side of one Spark task: write a partition through the WAL, then hand it to delivery.

:mod:`.writer` (``write_partition``, the one task path of every entry point),
:mod:`.runtime` (the worker process's slot, publisher and recovery, built
lazily and reused by the next tasks), :mod:`.exactly_once` (a task's unit in
its transaction) and :mod:`.drain` (the tasks of a drain job).

Internal: not part of the public API (:mod:`spark_recoverable_sink`), which may change in any release.
"""
