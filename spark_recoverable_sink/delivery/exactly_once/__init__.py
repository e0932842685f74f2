"""Exactly-once delivery: a task's committed WAL attempt (a unit) published in one Kafka transaction.

:mod:`.commit` is the commit: a unit's steps over its lane's states
(:mod:`.lane`: the transaction as a state machine), with :mod:`.sweep` (closing
what an earlier producer of the lane left open) and :mod:`.parts` (a unit too
large for one transaction). Around it: :mod:`.markers` (lane names and what a marker holds, as bytes),
:mod:`.marker_reads` (reading markers back), :mod:`.subunits` (what a part of
a unit too large for one transaction is), :mod:`.units` (units waiting for
their transaction), :mod:`.plan` (a run's lane count) and :mod:`.topic` (the
marker topic's checks).
"""
