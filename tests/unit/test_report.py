"""Tier 1: the driver's ledger of dead letters (offered by tasks, confirmed in later jobs)."""

from __future__ import annotations

from spark_recoverable_sink.report import BatchReport, DeadLetterLedger, TaskReport


def _part(p: int, dead: tuple[tuple[str, str, str], ...]) -> TaskReport:
    return TaskReport(origin=p, spark_attempt=0, rows=1, bytes=1, acked=1, pending=0, retried=0,
                           dead_lettered=len(dead), replayed=0, seconds=0.0, pid=1, slot="s", dead_letters=dead)


def test_offers_round_trip_through_the_report_row():
    p = _part(0, (("s:r:1:0:5", "too large", "h:/w/slot-00000:00ab"),))
    assert TaskReport.from_row(p.to_row()) == p


def test_the_ledger_admits_each_dead_letter_once_and_confirms_it_in_later_jobs():
    ledger = DeadLetterLedger()
    a, b = ("s:r:1:0:5", "too large", "tok-a"), ("s:r:1:1:9", "invalid", "tok-b")
    assert ledger.admit([_part(0, (a,)), _part(1, (a, b))]) == (("s:r:1:0:5", "too large"), ("s:r:1:1:9", "invalid"))
    assert set(ledger.confirmed()) == {"tok-a", "tok-b"}
    # offered again (the owning worker had no task since): not new
    assert ledger.admit([_part(0, (a,))]) == ()
    # the same record refused again by a re-run is a new dead letter (another WAL entry, another token)
    again = ("s:r:1:0:5", "too large", "tok-a2")
    assert ledger.admit([_part(0, (again,))]) == (("s:r:1:0:5", "too large"),)


def test_the_ledger_keeps_the_most_recent_tokens():
    ledger = DeadLetterLedger(keep=2)
    for i in range(3):
        ledger.admit([_part(0, ((f"id{i}", "e", f"t{i}"),))])
    assert ledger.confirmed() == ("t1", "t2")


def test_batch_report_lists_each_offered_dead_letter_once():
    a = ("s:r:1:0:5", "too large", "tok-a")
    r = BatchReport.from_tasks(1, [_part(0, (a,)), _part(1, (a,))], 0.1)
    assert r.dead_letters == (("s:r:1:0:5", "too large"),)
    assert BatchReport.from_tasks(1, [_part(0, (a,))], 0.1, dead_letters=()).dead_letters == ()
