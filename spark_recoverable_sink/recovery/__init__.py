"""What happens to records a task did not see acked: slots of dead workers adopted, and delivered.

:mod:`.adopter` recovers a slot (drop uncommitted attempts, queue committed
unacked chunks) and adopts orphan slots; :mod:`.deliver` is the one
deliver-until-deadline loop used by adoption, drain jobs and ``rks replay``.

Internal: not part of the public API (:mod:`spark_recoverable_sink`), which may change in any release.
"""
