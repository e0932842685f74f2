"""Tier 1: exactly-once's settle is bounded even when a drain job never returns (its tasks never scheduled)."""

from __future__ import annotations

import threading
import time

import pytest

from spark_recoverable_sink.config import SinkConfig
from spark_recoverable_sink.driver import settle as settle_mod
from spark_recoverable_sink.errors import SettleTimeoutError
from spark_recoverable_sink.report import BatchReport, PartitionReport


def _config() -> SinkConfig:
    return SinkConfig.build("s1", {"bootstrap.servers": "h:1", "transaction.timeout.ms": 30000}, "/tmp/x",
                            topic="t", guarantee="exactly_once", settle_timeout_s=1.0)


def _report() -> BatchReport:
    part = PartitionReport(partition=3, spark_attempt=0, rows=5, bytes=50, acked=0, pending=5, retried=0,
                           dead_lettered=0, replayed=0, seconds=0.1, pid=1, slot="s")
    return BatchReport.from_partitions(7, [part], 0.1, run="r1")


def _settle_in_thread(drain, cancel):
    """settle() in a thread of the test's own, so that a settle that never ends fails the test instead of hanging it."""
    out: dict = {}

    def run():
        try:
            out["value"] = settle_mod.settle(_config(), _report(), drain, cancel=cancel)
        except BaseException as exc:
            out["error"] = exc

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(20)
    return t.is_alive(), out


def test_a_drain_job_that_never_returns_ends_in_a_timeout_naming_the_lane_and_is_cancelled(monkeypatch):
    monkeypatch.setattr(settle_mod, "lane_markers", lambda config, run, lanes: {})  # no lane committed, ever
    monkeypatch.setattr(settle_mod, "_DRAIN_GRACE_S", 1.0, raising=False)
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
    assert [u["lane"] for u in err.lanes] == ["rks-eo.s1.r1.3"]
    assert "did not return" in str(err) and "batch_id=7" in str(err)


def test_a_drain_job_that_fails_fails_settle_with_its_own_error(monkeypatch):
    monkeypatch.setattr(settle_mod, "lane_markers", lambda config, run, lanes: {})

    def drain(timeout_s):
        raise ValueError("job aborted")

    alive, out = _settle_in_thread(drain, cancel=None)
    assert not alive
    assert isinstance(out.get("error"), ValueError)


def test_drain_jobs_that_return_go_on_until_the_bound(monkeypatch):
    monkeypatch.setattr(settle_mod, "lane_markers", lambda config, run, lanes: {})
    calls = []

    def drain(timeout_s):
        calls.append(timeout_s)
        time.sleep(0.3)
        return None

    alive, out = _settle_in_thread(drain, cancel=lambda: pytest.fail("a drain that returns is not cancelled"))
    assert not alive
    assert isinstance(out.get("error"), SettleTimeoutError)
    assert "did not return" not in str(out["error"])
    assert len(calls) >= 2 and all(t >= 1.0 for t in calls)
