"""Exactly-once delivery: a task's committed WAL attempt (a unit) published in one Kafka transaction.

:mod:`.markers` (lane names and what a marker holds), :mod:`.lanes` (a
lane's producer and consumer, and lanes seen from outside),
:mod:`.transactions` (the committer and the inline transaction) and
:mod:`.units` (units waiting for their transaction).
"""
