"""The compiled part of the package: ``_rks_native`` (C), its loader and its producer.

``_rks_native`` is built from ``rks_native.c`` when the package is installed
with a C compiler (optional: without one the package is pure Python and the
sink runs on the Python engine). It links nothing at build time: at first use
it opens the librdkafka that confluent-kafka's wheel ships
(:mod:`.library`). It holds the native delivery engine's producer
(:mod:`.producer`), record fingerprints, occurrence counting and unit digests
(used through :mod:`..fingerprint`).

Internal: not part of the public API (:mod:`spark_recoverable_sink`), which may change in any release.
"""
