"""The sections of ``bench/run.py`` outside Spark (wal, memory, recovery, profile), and :func:`guarded`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import traceback
import uuid
from typing import Any

from bench import common
from bench.run_children import run_task
from bench.spark_bench import log

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def section_wal(p: dict[str, Any], bootstrap: str, scratch: str, topic_partitions: int) -> dict[str, Any]:
    out_json = os.path.join(scratch, "wal_cost.json")
    env = dict(os.environ, BENCH_TMP=scratch)
    cmd = [sys.executable, os.path.join(REPO, "bench", "wal_cost.py"), "--rows", str(p["wal_rows"]),
           "--repeat", str(p["wal_repeat"]), "--sizes", ",".join(map(str, p["sizes"])), "--json", out_json]
    log("wal: " + " ".join(cmd[1:]))
    subprocess.run(cmd, check=True, env=env, cwd=REPO, stdout=subprocess.DEVNULL)
    with open(out_json) as f:
        wal = json.load(f)
    produce = []
    for size in p["sizes"]:
        name = f"bench-cost-{size}-{uuid.uuid4().hex[:6]}"
        common.create_topic(bootstrap, name, topic_partitions)
        try:
            r = run_task("produce-cost", {"bootstrap": bootstrap, "topic": name, "name": name,
                                          "wal_dir": os.path.join(scratch, "wal"), "rows": p["produce_rows"],
                                          "value_bytes": size, "repeat": p["produce_repeat"]}, 1800, scratch)
        finally:
            common.delete_topic(bootstrap, name)
        log(f"wal: {size} B produce alone {r['produce_alone_us']:.2f} us/rec, with an id header "
            f"{r['produce_header_us']:.2f}, whole sink path {r['sink_us']:.2f} us/rec (+{r['sink_overhead_us']:.2f})")
        produce.append(r)
    return {"rows": p["wal_rows"], "repeat": p["wal_repeat"], "wal_only": wal, "produce_vs_sink": produce}


def section_memory(p: dict[str, Any], bootstrap: str, scratch: str, topic_partitions: int) -> dict[str, Any]:
    runs = []
    for rows in p["mem_rows"]:
        name = f"bench-mem-{rows}-{uuid.uuid4().hex[:6]}"
        # 100 M rows are ~15 GB in Kafka: old segments go while the run writes (nothing reads them back here)
        common.create_topic(bootstrap, name, topic_partitions,
                            {"retention.bytes": str(1 << 30), "segment.bytes": str(256 << 20)})
        try:
            r = run_task("memory", {"bootstrap": bootstrap, "topic": name, "name": name, "rows": rows,
                                    "value_bytes": 100, "wal_dir": os.path.join(scratch, "wal")}, 3600, scratch)
        finally:
            common.delete_topic(bootstrap, name)
        log(f"memory: {rows} rows: peak RSS {r['peak_hwm_kib'] / 1024:.0f} MiB, "
            f"peak RssAnon {r['peak_anon_kib'] / 1024:.0f} MiB "
            f"(after warm-up {r['warm_hwm_kib'] / 1024:.0f} MiB), {r['rows_per_s']:,.0f} rows/s")
        runs.append(r)
    growth = anon_growth = None
    if len(runs) >= 2:
        growth = runs[-1]["peak_hwm_kib"] / runs[0]["peak_hwm_kib"] - 1.0
        anon_growth = runs[-1]["peak_anon_kib"] / runs[0]["peak_anon_kib"] - 1.0
    return {"value_bytes": 100, "runs": runs, "growth": growth, "anon_growth": anon_growth}


def section_recovery(p: dict[str, Any], broker: Any, scratch: str, topic_partitions: int) -> dict[str, Any]:
    rows = p["recovery_rows"]
    name = f"bench-replay-{uuid.uuid4().hex[:6]}"
    wal_dir = os.path.join(scratch, "wal")
    common.create_topic(broker.bootstrap, name, topic_partitions)
    a = {"bootstrap": broker.bootstrap, "topic": name, "name": name, "rows": rows, "value_bytes": 100,
         "wal_dir": wal_dir}
    try:
        broker.pause()
        try:
            w = run_task("orphan-write", a, 1800, scratch)
        finally:
            broker.resume()
        left = common.wal_records(wal_dir, name)
        log(f"recovery: {rows} rows written to a paused broker in {w['seconds']:.1f}s, writer died; "
            f"{left} records left in the WAL")
        time.sleep(1.0)
        r = run_task("replay", {**a, "timeout_s": 1800}, 2000, scratch)
        log(f"recovery: replayed {r['replayed']} records, all acked after {r['acked_s']:.2f}s "
            f"= {r['rows_per_s'] or 0:,.0f} records/s (WAL empty after {r['wal_empty_s']:.2f}s)")
        n = common.count_topic(broker.bootstrap, name, rows)
    finally:
        common.delete_topic(broker.bootstrap, name)
    return {"rows": rows, "value_bytes": 100, "orphan_write": w, "orphaned_in_wal": left, "replay": r,
            "read_back": n, "read_back_ok": n >= rows}


def section_profile(p: dict[str, Any], bootstrap: str, scratch: str, topic_partitions: int) -> dict[str, Any]:
    name = f"bench-prof-{uuid.uuid4().hex[:6]}"
    common.create_topic(bootstrap, name, topic_partitions)
    try:
        r = run_task("profile", {"bootstrap": bootstrap, "topic": name, "name": name, "rows": p["profile_rows"],
                                 "value_bytes": 100, "wal_dir": os.path.join(scratch, "wal"), "top": 15}, 1800, scratch)
    finally:
        common.delete_topic(bootstrap, name)
    top = r["threads"]["task"]["self"][:3]
    log("profile: task thread top self time: " + "; ".join(f"{x['function']} {x['tottime_s']}s" for x in top))
    return r


def guarded(fn: Any) -> dict[str, Any]:
    """Run a section; a failure is recorded in the results (and fails the run), never hidden."""
    try:
        return fn()
    except Exception as exc:  # noqa: BLE001
        traceback.print_exc()
        return {"error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()}
