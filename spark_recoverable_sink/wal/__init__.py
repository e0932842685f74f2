"""The write-ahead log: plain versioned, checksummed bytes in one LMDB environment per slot.

:mod:`.format` (chunk bytes and keys), :mod:`.records` (attempt and
dead-letter records), :mod:`.slots` (slot directories and their locks),
:mod:`.log` (the :class:`~.log.Wal` of one slot: writes), :mod:`.reads`
(its checked reads) and :mod:`.quarantine` (setting a slot aside).

Internal: not part of the public API (:mod:`spark_recoverable_sink`), which may change in any release.
"""
