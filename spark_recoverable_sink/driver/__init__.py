"""The driver side: where a batch starts and ends.

``foreachBatch(sink)`` / ``sink.write`` (:mod:`.sink`) and the data source
``recoverable-kafka`` (:mod:`.datasource`) differ only in how tasks are
started and where the driver side runs; both run
:func:`..task.writer.write_partition` in the tasks and
:func:`.batches.conclude_batch` on the driver. Exactly-once batches end only
once settled (:mod:`.settle`); :mod:`.metrics` is the Prometheus endpoint.

Internal: not part of the public API (:mod:`spark_recoverable_sink`), which may change in any release.
"""
