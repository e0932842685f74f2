"""Tier 1: exactly-once's settle is bounded even when a drain job never returns (its tasks never scheduled)."""

from __future__ import annotations

import threading
import time

import pyspark
import pytest

from spark_recoverable_sink.config import SinkConfig
from spark_recoverable_sink.driver import settle as settle_mod
from spark_recoverable_sink.errors import SettleTimeoutError
from spark_recoverable_sink.report import BatchReport, TaskReport


def _config() -> SinkConfig:
    return SinkConfig.build("s1", {"bootstrap.servers": "h:1", "transaction.timeout.ms": 30000}, "/tmp/x",
                            topic="t", guarantee="exactly_once", settle_timeout_s=1.0)


def _report() -> BatchReport:
    part = TaskReport(origin=3, spark_attempt=0, rows=5, bytes=50, acked=0, pending=5, retried=0,
                           dead_lettered=0, replayed=0, seconds=0.1, pid=1, slot="s")
    return BatchReport.from_tasks(7, [part], 0.1, run="r1")


def _settle_in_thread(drain, cancel, call=None):
    """settle() in a thread of the test's own, so that a settle that never ends fails the test instead of hanging it."""
    out: dict = {}

    def run():
        try:
            out["value"] = call() if call else settle_mod.settle(_config(), _report(), drain, cancel=cancel)
        except BaseException as exc:
            out["error"] = exc

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(20)
    return t.is_alive(), out


def test_a_drain_job_that_never_returns_ends_in_a_timeout_naming_the_lane_and_is_cancelled(monkeypatch):
    monkeypatch.setattr(settle_mod, "lane_markers", lambda config, run, lanes, timeout_s=10.0: {})  # no lane committed, ever
    monkeypatch.setattr(settle_mod, "_DRAIN_GRACE_S", 1.0)
    release = threading.Event()
    cancelled = []

    def drain(timeout_s):  # a job whose tasks are never scheduled: it returns only when cancelled
        release.wait(60)
        raise RuntimeError("cancelled")

    def cancel():
        cancelled.append(time.monotonic())
        release.set()

    t0 = time.monotonic()
    alive, out = _settle_in_thread(drain, cancel)
    release.set()
    assert not alive, "settle still waiting on a drain job that never returns"
    err = out.get("error")
    assert isinstance(err, SettleTimeoutError), out
    assert time.monotonic() - t0 < 10
    assert len(cancelled) == 1
    assert [u["lane"] for u in err.lanes] == ["rks-eo.s1:r1:3"]
    assert "did not return" in str(err) and "batch_id=7" in str(err)


def test_a_drain_job_that_fails_fails_settle_with_its_own_error(monkeypatch):
    monkeypatch.setattr(settle_mod, "lane_markers", lambda config, run, lanes, timeout_s=10.0: {})

    def drain(timeout_s):
        raise ValueError("job aborted")

    alive, out = _settle_in_thread(drain, cancel=None)
    assert not alive
    assert isinstance(out.get("error"), ValueError)


def test_drain_jobs_that_return_go_on_until_the_bound(monkeypatch):
    monkeypatch.setattr(settle_mod, "lane_markers", lambda config, run, lanes, timeout_s=10.0: {})
    calls = []

    def drain(timeout_s):
        calls.append(timeout_s)
        time.sleep(0.05)
        return None

    alive, out = _settle_in_thread(drain, cancel=lambda: pytest.fail("a drain that returns is not cancelled"))
    assert not alive
    assert isinstance(out.get("error"), SettleTimeoutError)
    assert "did not return" not in str(out["error"])
    assert len(calls) >= 2 and calls[0] == 1.0  # settle_timeout_s=1 caps the first drain's 10 s


def test_lanes_committed_while_the_drain_job_waited_for_a_core_settle_the_batch(monkeypatch):
    """A drain job queued behind busy cores does not fail a batch whose lanes live workers committed meanwhile."""
    from spark_recoverable_sink.delivery.exactly_once.markers import Marker

    committed = threading.Event()
    monkeypatch.setattr(settle_mod, "lane_markers", lambda config, run, lanes, timeout_s=10.0: (
        {3: Marker(7, 0)} if committed.is_set() else {}))
    monkeypatch.setattr(settle_mod, "_DRAIN_GRACE_S", 1.0)
    release = threading.Event()

    def drain(timeout_s):
        committed.set()  # the worker's own retry commits the unit while this job never gets a core
        release.wait(60)
        raise RuntimeError("cancelled")

    alive, out = _settle_in_thread(drain, cancel=release.set)
    release.set()
    assert not alive
    assert "error" not in out, out
    assert out["value"] == []


def test_the_sinks_drain_jobs_carry_one_tag_and_a_stuck_one_is_cancelled_by_it(monkeypatch, tmp_path):
    """The wiring in the sink: the tag is added in settle's thread, and the cancellation names the same tag."""
    from spark_recoverable_sink import RecoverableKafkaSink

    monkeypatch.setattr(settle_mod, "lane_markers", lambda config, run, lanes, timeout_s=10.0: {})
    monkeypatch.setattr(settle_mod, "_DRAIN_GRACE_S", 1.0)
    release = threading.Event()
    calls = []

    class FakeContext:
        def addJobTag(self, tag):
            calls.append(("add", tag, threading.current_thread().name))

        def removeJobTag(self, tag):
            calls.append(("remove", tag, threading.current_thread().name))

        def cancelJobsWithTag(self, tag):
            calls.append(("cancel", tag, threading.current_thread().name))
            release.set()

    class FakeSession:
        sparkContext = FakeContext()

    sink = RecoverableKafkaSink("s1", {"bootstrap.servers": "h:1", "transaction.timeout.ms": 30000}, topic="t",
                                wal_dir=str(tmp_path), guarantee="exactly_once", settle_timeout_s=1.0)

    def stuck_drain(spark, timeout_s):
        release.wait(60)
        raise RuntimeError("cancelled")

    monkeypatch.setattr(sink, "drain", stuck_drain)

    class PlainThread(threading.Thread):  # InheritableThread copies a live SparkContext's properties (other tiers)
        def __init__(self, *args, session=None, **kwargs):
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(pyspark, "InheritableThread", PlainThread)
    alive, out = _settle_in_thread(None, None, call=lambda: sink._settle(FakeSession(), _report()))
    release.set()
    assert not alive
    assert isinstance(out.get("error"), SettleTimeoutError), out
    assert "cancellation was requested" in str(out["error"])
    for _ in range(100):  # the drain thread ends once cancelled
        if len(calls) == 3:
            break
        time.sleep(0.05)
    (add, tag, drain_thread), (cancel, tag2, _), (remove, tag3, _) = sorted(calls, key=lambda c: "acr".index(c[0][0]))
    assert (add, cancel, remove) == ("add", "cancel", "remove") and tag == tag2 == tag3
    assert tag.startswith("rks-settle-") and drain_thread == "rks-settle-drain"


def test_a_lane_marker_that_gives_no_answer_is_not_waited_for_past_a_short_read_before_a_drain_round(monkeypatch):
    """A lane whose offset is unstable (a dead worker's transaction left open) answers no read, however long: settle
    reads briefly and runs a drain round, whose tasks' lane init ends that transaction."""
    from spark_recoverable_sink.delivery.exactly_once.markers import Marker

    reads: list[float] = []
    drained = threading.Event()

    def markers(config, run, lanes, timeout_s=10.0):
        reads.append(timeout_s)
        if not drained.is_set():
            raise RuntimeError("Failed to get committed offsets: Local: Timed out")
        return {3: Marker(7, 0)}

    monkeypatch.setattr(settle_mod, "lane_markers", markers)
    alive, out = _settle_in_thread(lambda timeout_s: drained.set(), cancel=None)
    assert not alive and "error" not in out, out
    assert len(reads) == 2 and max(reads) <= 3.0, reads


def test_a_unit_committed_in_parts_restarts_the_bound_with_each_part_and_ends(monkeypatch):
    """A lane's unit too large for one transaction commits part after part (a partial marker each): the batch waits
    as long as parts keep coming, past settle_timeout_s (1 s here), and ends with the last one."""
    from spark_recoverable_sink.delivery.exactly_once.markers import Marker
    from spark_recoverable_sink.delivery.exactly_once.subunits import Partial

    reads = []

    def markers(config, run, lanes, timeout_s=10.0):
        reads.append(1)
        k = len(reads) - 1
        return {3: Marker(7, 0) if k >= 12 else Marker(6, 0, partial=Partial(7, k, 20, 0)) if k else Marker(6, 0)}

    monkeypatch.setattr(settle_mod, "lane_markers", markers)
    cfg = SinkConfig.build("s1", {"bootstrap.servers": "h:1"}, "/tmp/x", topic="t", guarantee="exactly_once",
                           settle_timeout_s=1.5)
    drain = lambda timeout_s: time.sleep(0.2)  # noqa: E731 - each round well within the bound, even on a busy machine
    t0 = time.monotonic()
    alive, out = _settle_in_thread(drain, None, call=lambda: settle_mod.settle(cfg, _report(), drain))
    assert not alive and "error" not in out, out
    assert time.monotonic() - t0 > 2.0 and len(reads) == 13  # 12 drain rounds of 0.2 s: past the 1.5 s bound


def test_a_unit_whose_parts_stop_coming_still_ends_at_the_bound(monkeypatch):
    from spark_recoverable_sink.delivery.exactly_once.markers import Marker
    from spark_recoverable_sink.delivery.exactly_once.subunits import Partial

    stuck = Marker(6, 0, partial=Partial(7, 2, 10, 0))
    monkeypatch.setattr(settle_mod, "lane_markers", lambda config, run, lanes, timeout_s=10.0: {3: stuck})
    t0 = time.monotonic()
    alive, out = _settle_in_thread(lambda timeout_s: time.sleep(0.2), cancel=None)
    assert not alive and isinstance(out.get("error"), SettleTimeoutError), out
    assert time.monotonic() - t0 < 5
