"""Exactly-once delivery: a task's committed WAL attempt (a unit) published in one Kafka transaction.

:mod:`.lane` is the commit: one lane's transaction as a state machine, and the
steps that publish a unit through it (in the task, from the WAL, in parts).
Around it: :mod:`.markers` (lane names and what a marker holds, as bytes),
:mod:`.marker_reads` (reading markers back), :mod:`.subunits` (what a part of
a unit too large for one transaction is), :mod:`.units` (units waiting for
their transaction), :mod:`.plan` (a run's lane count) and :mod:`.topic` (the
marker topic's checks).
"""
