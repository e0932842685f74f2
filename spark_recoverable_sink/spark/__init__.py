"""The Spark entry points' shared driver side, and the data source ``recoverable-kafka``.

``foreachBatch(sink)`` / ``sink.write`` (:mod:`..sink`) and the data source
(:mod:`.datasource`) differ only in how tasks are started and where the
driver side runs; both run :func:`..partition_writer.write_partition` in the
tasks and :func:`.batches.conclude_batch` on the driver.
"""
