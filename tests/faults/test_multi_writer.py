"""Scenario 11: four writer processes on one wal_dir, crashing at random points, restarted until done.

No Spark: each writer is ``python -m tests.programs.writer_cli writer`` calling
``write_partition`` directly for its own (batch, partition) units. Each launch
either arms a timer that calls ``os._exit`` or is SIGKILLed by this test at a
random moment (seeded). At the end a drain process adopts whatever orphans
are left. Checked: every row arrives; no slot was ever held by two live
processes (from the runtime's own log lines, with timestamps, against the
times each process died); every slot opens and decodes cleanly and is empty.
"""

from __future__ import annotations

import json
import os
import random
import re
import subprocess
import sys
import time
from collections import defaultdict

import pytest

from spark_recoverable_sink.wal.format import decode_chunk
from spark_recoverable_sink.wal.log import Wal, map_size_for

from .conftest import ENGINES, engine_suffix, new_topic, sink_name
from .procs import REPO, alive, kill9, run_cli
from .readback import LiveReader, keys_of, read_back
from .slots import slot_holders

SEED = int(os.environ.get("RKS_FAULT_SEED", "11"))
WRITERS, UNITS, ROWS = 4, 8, 2500
MAX_CRASHES = 3

_LINE = re.compile(r"^(?P<t>\d+\.\d+) pid=(?P<pid>\d+) (?P<logger>\S+) (?P<level>\w+) (?P<msg>.*)$")


def _parse_logs(log_dir: str) -> list[tuple[float, int, str]]:
    out = []
    for name in sorted(os.listdir(log_dir)):
        if not name.endswith(".log"):
            continue
        with open(os.path.join(log_dir, name), errors="replace") as f:
            for line in f:
                m = _LINE.match(line.strip())
                if m:
                    out.append((float(m["t"]), int(m["pid"]), m["msg"]))
    return sorted(out)


def ownership_violations(events: list[tuple[float, int, str]], deaths: dict[int, float],
                         slack_s: float = 0.2) -> tuple[list[str], int]:
    """Acquisitions of a slot while its previous holder was alive and had not released it."""
    acquire = re.compile(r"pid=\d+ slot=(\S+) opened|adopting orphan slot=(\S+)")
    # an adopter lets a drained orphan go: released (its dead letters kept) or removed (nothing kept: the next
    # writer may create a new slot of that number while the adopter still runs)
    release = re.compile(r"(?:released|removed) \w+ orphan slot=(\S+)")
    holder: dict[str, tuple[int, float]] = {}
    released: dict[tuple[str, int], float] = {}
    problems, handoffs = [], 0
    for t, pid, msg in events:
        m = acquire.search(msg)
        if m:
            slot = m.group(1) or m.group(2)
            prev = holder.get(slot)
            if prev is not None and prev[0] != pid:
                handoffs += 1
                a_pid, a_t = prev
                gone = deaths.get(a_pid)
                rel = released.get((slot, a_pid))
                ok = (gone is not None and gone <= t + slack_s) or (rel is not None and a_t <= rel <= t + slack_s)
                if not ok:
                    problems.append(f"{os.path.basename(slot)}: pid {pid} took it at {t:.3f} while pid {a_pid} "
                                    f"(since {a_t:.3f}, died {gone}) still held it")
            holder[slot] = (pid, t)
            continue
        m = release.search(msg)
        if m:
            released[(m.group(1), pid)] = t
    return problems, handoffs


def test_the_ownership_check_counts_a_removed_orphan_slot_as_let_go():
    """From a run where the check failed: pid 5237 adopted slot-00002, drained and removed it, and kept writing
    to its own slot; pid 5246 then created a new slot-00002. A slot removed is let go, as a slot released is."""
    slot = "/w/f11/slot-00002"
    events = [(53.0355, 5237, f"sink=f11 pid=5237 adopting orphan slot={slot}"),
              (53.2250, 5237, f"sink=f11 removed drained orphan slot={slot}"),
              (53.3570, 5246, f"sink=f11 pid=5246 slot={slot} opened live_bytes=0 replayed=0")]
    assert ownership_violations(events, {5237: 53.5578}) == ([], 1)
    # still held (neither let go nor dead) when the other took it: a violation
    assert len(ownership_violations([events[0], events[2]], {5237: 53.5578})[0]) == 1
    released = [events[0], (53.2250, 5237, f"sink=f11 released drained orphan slot={slot}"), events[2]]
    assert ownership_violations(released, {5237: 53.5578}) == ([], 1)


@pytest.mark.parametrize("engine", ENGINES)
def test_11_four_crashing_writers_share_one_wal_dir(broker, tmp_path, scenario, engine):
    scenario.scenario = "11_multi_writer_crashes" + engine_suffix(engine)
    scenario.title = f"Four crashing writer processes on one wal_dir ({engine} engine)"
    scenario.fault = (f"{WRITERS} writers x {UNITS} units x {ROWS} rows; up to {MAX_CRASHES} crashes each "
                      "(os._exit timer or kill -9 from the parent at a random time), restarted until done")
    rng = random.Random(SEED)
    topic = new_topic(broker.bootstrap)
    name = sink_name("f11")
    wal_dir, log_dir = str(tmp_path / "wal"), str(tmp_path / "logs")
    os.makedirs(log_dir)
    n = WRITERS * UNITS * ROWS
    units = {w: [[1000 + w * 10 + k, w, (w * UNITS + k) * ROWS, ROWS] for k in range(UNITS)] for w in range(WRITERS)}
    base = {"name": name, "kafka_conf": {"bootstrap.servers": broker.bootstrap}, "wal_dir": wal_dir,
            "topic": topic, "opts": {"ack_timeout_s": 5.0, "delivery_engine": engine}, "value_size": 500, "linger_s": 10}
    env = {**os.environ, "PYTHONPATH": REPO}
    launches = defaultdict(int)
    crashes = defaultdict(int)
    deaths: dict[int, float] = {}
    procs: dict[int, tuple[subprocess.Popen, float | None]] = {}
    finished: set[int] = set()
    stats = {"timer_crashes": 0, "kills": 0, "launches": 0}

    def launch(w: int) -> None:
        a = {**base, "units": units[w], "progress": str(tmp_path / f"progress-{w}"), "attempt": launches[w],
             "log": os.path.join(log_dir, f"w{w}-{launches[w]}.log")}
        kill_at = None
        if crashes[w] < MAX_CRASHES:
            if rng.random() < 0.5:
                a["crash_after_s"] = rng.uniform(0.05, 1.5)  # from the writer's start, after its imports
            else:
                kill_at = time.time() + rng.uniform(0.6, 2.5)  # from the launch, imports included
        launches[w] += 1
        stats["launches"] += 1
        p = subprocess.Popen([sys.executable, "-m", "tests.programs.writer_cli", "writer", json.dumps(a)],
                             env=env, cwd=REPO, stdout=subprocess.DEVNULL,
                             stderr=open(os.path.join(log_dir, f"w{w}-{launches[w] - 1}.err"), "wb"))
        procs[w] = (p, kill_at)

    reader = LiveReader(broker.bootstrap, topic).start()
    first_fault = None
    try:
        t0 = time.time()
        for w in range(WRITERS):
            launch(w)
        while len(finished) < WRITERS:
            assert time.time() - t0 < 300, f"writers not done after 300 s: finished={sorted(finished)}"
            for w, (p, kill_at) in list(procs.items()):
                if w in finished:
                    continue
                rc = p.poll()
                if rc is None:
                    if kill_at is not None and time.time() >= kill_at and alive(p.pid):
                        deaths[p.pid] = kill9(p.pid)
                        first_fault = first_fault or deaths[p.pid]
                        crashes[w] += 1
                        stats["kills"] += 1
                        procs[w] = (p, None)
                    continue
                if rc == 0:
                    finished.add(w)
                    continue
                if rc == 137:  # its own timer
                    crashes[w] += 1
                    stats["timer_crashes"] += 1
                launch(w)
            time.sleep(0.02)
        writers_s = time.time() - t0
        rc, out, err = run_cli("drain", {**base, "log": os.path.join(log_dir, "drain.log"), "timeout_s": 60},
                               timeout=120)
        assert rc == 0 and out, f"drain failed: rc={rc} {err[-1500:]}"
        full_at = reader.wait_for(keys_of(range(n)), 90)
        t = read_back(broker.bootstrap, topic, range(n), reader)
    finally:
        reader.stop()
        for p, _k in procs.values():
            if p.poll() is None:
                p.kill()
    # Deaths: kills noted above; timer crashes and normal exits from the writers' own last log line.
    events = _parse_logs(log_dir)
    for ts, pid, msg in events:
        if "event=crash" in msg or "event=exit" in msg:
            deaths[pid] = min(deaths.get(pid, ts), ts)
            if "event=crash" in msg:
                first_fault = min(first_fault or ts, ts)
    violations, handoffs = ownership_violations(events, deaths)
    # Every slot: free, opens cleanly, every chunk decodes, nothing left.
    sdir = os.path.join(wal_dir, name)
    holders = slot_holders(wal_dir, name)
    slot_problems, leftover = [], 0
    for idx in sorted(holders):
        path = os.path.join(sdir, f"slot-{idx:05d}")
        if holders[idx] is not None:
            slot_problems.append(f"slot {idx} still locked by pid {holders[idx]}")
        if not os.path.exists(os.path.join(path, "data.mdb")):
            continue
        try:
            wal = Wal(path, sink_name=name, map_size=map_size_for(20 * 1024**3), sync=False)
            try:
                for ck, _size in wal.chunk_keys():
                    decode_chunk(wal.read_chunk(ck))
                    leftover += 1
                wal.stats()
            finally:
                wal.close()
        except Exception as exc:  # noqa: BLE001 -- collected for the assertion
            slot_problems.append(f"slot {idx}: {type(exc).__name__}: {exc}")
    scenario.apply(t)
    scenario.recovery(first_fault, full_at)
    scenario.figures.update(seed=SEED, writers_seconds=round(writers_s, 1), slots=len(holders), handoffs=handoffs,
                            leftover_chunks=leftover, drain=out[0], ownership_violations=violations[:5],
                            slot_problems=slot_problems[:5], **stats)
    assert stats["timer_crashes"] + stats["kills"] >= WRITERS, "too few crashes happened to mean anything"
    assert t.lost == 0, f"lost {t.lost} rows, e.g. {t.lost_sample}"
    assert not violations, violations
    assert not slot_problems, slot_problems
    assert leftover == 0, f"{leftover} chunks still in the WAL after the drain"
