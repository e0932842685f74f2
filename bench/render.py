"""Render benchmark results into docs/PERFORMANCE.md and docs/performance.png.

Usage: python bench/render.py [results.json]   (default: bench/results/latest.json)
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOC = os.path.join(REPO, "docs", "PERFORMANCE.md")
PNG = os.path.join(REPO, "docs", "performance.png")

RAW, FLUSH, SYNC, ASYNC, EXACTLY = "raw", "flush-writer", "sink-sync", "sink-async", "sink-exactly-once"
LABELS = {RAW: "raw (ceiling)", FLUSH: "flush-writer", SYNC: "sink sync", ASYNC: "sink async",
          EXACTLY: "sink exactly-once"}


# -- targets -----------------------------------------------------------------------------------


def _ok(section: Any) -> bool:
    return isinstance(section, dict) and "error" not in section


def _tp(results: dict[str, Any], writer: str, size: int) -> dict[str, Any] | None:
    tp = results.get("throughput")
    if not _ok(tp):
        return None
    return next((r for r in tp["summary"] if r["writer"] == writer and r["value_bytes"] == size), None)


def _lat(results: dict[str, Any], writer: str, size: int = 100) -> dict[str, Any] | None:
    lat = results.get("latency")
    if not _ok(lat):
        return None
    return next((r for r in lat["results"] if r["writer"] == writer and r["value_bytes"] == size), None)


def evaluate_targets(results: dict[str, Any]) -> list[dict[str, Any]]:
    """The targets, each with the measured figure and met / missed / not measured."""
    out = []

    def add(name: str, goal: str, measured: float | None, text: str, ok: bool | None, note: str = "") -> None:
        status = "not measured" if measured is None or ok is None else ("met" if ok else "missed")
        out.append({"name": name, "goal": goal, "measured": measured, "measured_text": text, "status": status,
                    "note": note})

    s = _tp(results, SYNC, 100)
    v = s and s.get("vs_flush")
    add("sink sync throughput vs flush-writer (100 B)", ">= 0.95 x flush-writer", v,
        f"{v:.2f} x ({s['rows_per_s']:,.0f} rows/s)" if v else "n/a", None if v is None else v >= 0.95)
    v = s and s.get("vs_raw")
    add("sink sync throughput vs raw (100 B)", ">= 0.85 x raw", v,
        f"{v:.2f} x ({s['rows_per_s']:,.0f} rows/s)" if v else "n/a", None if v is None else v >= 0.85)

    wal = results.get("wal")
    w = None
    if _ok(wal):
        w = next((r for r in wal["wal_only"] if r["design"] == "chunked" and r["value_bytes"] == 100 and r["fsync"]),
                 None)
    v = w and w.get("total_with_ack_us")
    add("WAL cost per record, write + ack + prune (100 B, fsync per WAL transaction)", "<= 0.5 us/record", v,
        f"{v:.3f} us/record (write {w['write_us']:.3f} + ack {w['ack_us']:.3f} + prune {w['prune_us']:.3f})"
        if v else "n/a", None if v is None else v <= 0.5)

    e = _tp(results, EXACTLY, 100)
    v = (e["rows_per_s"] / s["rows_per_s"]) if e and s and s.get("rows_per_s") else None
    add("exactly-once throughput vs sink sync (100 B)", ">= 0.85 x sink sync", v,
        f"{v:.2f} x ({e['rows_per_s']:,.0f} rows/s)" if v else "n/a", None if v is None else v >= 0.85)

    a, f = _lat(results, ASYNC), _lat(results, FLUSH)
    v = None
    if a and f and a["add_batch_ms"]["p50"] and f["add_batch_ms"]["p50"]:
        v = a["add_batch_ms"]["p50"] / f["add_batch_ms"]["p50"]
    add("sink async p50 micro-batch latency vs flush-writer (same load)", "<= 0.5 x flush-writer", v,
        f"{v:.2f} x ({a['add_batch_ms']['p50']:.0f} ms vs {f['add_batch_ms']['p50']:.0f} ms, addBatch p50)"
        if v is not None else "n/a", None if v is None else v <= 0.5)

    mem = results.get("memory")
    v = mem.get("growth") if _ok(mem) else None
    note = ""
    if _ok(mem) and len(mem["runs"]) >= 2:
        r0, r1 = mem["runs"][0], mem["runs"][-1]
        sizes = f"{r0['rows']:,} -> {r1['rows']:,} rows"
        if (r0["rows"], r1["rows"]) != (1_000_000, 10_000_000):
            note = f"quick mode measured {sizes}, not 1M -> 10M"
        text = f"{v * 100:+.1f} % ({r0['peak_hwm_kib'] / 1024:.0f} -> {r1['peak_hwm_kib'] / 1024:.0f} MiB, {sizes})"
    else:
        text = "n/a"
    add("worker peak memory from 1M to 10M rows in one partition", "flat within 10 %", v, text,
        None if v is None else v <= 0.10, note)

    rec = results.get("recovery")
    v = rec["replay"].get("rows_per_s") if _ok(rec) else None
    add("replay of orphaned records", ">= 300k records/s", v,
        f"{v:,.0f} records/s ({rec['replay']['replayed']:,} records in {rec['replay']['acked_s']:.2f} s)"
        if v else "n/a", None if v is None else v >= 300_000)
    return out


# -- markdown ---------------------------------------------------------------------------------------


def _f(x: Any, fmt: str = "{:,.0f}", none: str = "–") -> str:
    if x is None:
        return none
    try:
        return fmt.format(x)
    except (TypeError, ValueError):
        return str(x)


def _table(head: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def _err(section: Any) -> str:
    return f"**This section failed:** `{section.get('error')}`\n" if isinstance(section, dict) else "*Not run.*\n"


def markdown(results: dict[str, Any]) -> str:
    meta, st = results["meta"], results.get("settings", {})
    m = meta["machine"]
    mode = meta["mode"]
    p = meta.get("params", {})
    out: list[str] = []
    w = out.append
    w("# Performance\n")
    w("<!-- Generated by bench/render.py from bench/results/latest.json: do not edit by hand. -->\n")
    busy = max(m.get("loadavg_start") or [0])
    w(f"Results of `bench/run.py{' --quick' if mode == 'quick' else ''}` ({mode} mode) at {meta['timestamp']}, "
      f"commit `{meta.get('commit')}`, {meta.get('elapsed_s')} s in all.\n")
    if mode == "quick":
        w("**Quick mode: small sizes and 2 runs each, a smoke test of the suite, not a measurement.** "
          "The figures below only show the suite works; run `make bench` on a quiet machine for numbers.\n")
    la0, la1 = m.get("loadavg_start"), meta.get("loadavg_end")
    cores = m.get("cores") or 1
    # Only the load before the run tells whether other work shared the machine: at
    # the end, the benchmark's own Spark job has kept every core busy.
    if la0 and la0[0] > 0.5 * cores:
        w(f"> **The machine was busy** when this run started (1-minute load average {la0[0]:.1f} on {cores} "
          "cores): other work shared the CPUs, so absolute figures are low and noisy; the ratios between "
          "writers are more telling because runs were interleaved.\n")
    elif la0:
        w(f"The machine was otherwise idle when the run started (1-minute load average {la0[0]:.1f} on "
          f"{cores} cores{f'; {la1[0]:.1f} at the end, the benchmark itself' if la1 else ''}).\n")
    del busy
    w("![throughput and latency per writer](performance.png)\n")

    # targets
    w("## Targets\n")
    w("Benchmarks, not timed tests: a missed target is reported, never hidden or tuned away.\n")
    rows = []
    for t in results.get("targets", []):
        mark = {"met": "✅ met", "missed": "❌ missed", "not measured": "– not measured"}[t["status"]]
        rows.append([t["name"], t["goal"], t["measured_text"] + (f" — {t['note']}" if t.get("note") else ""), mark])
    w(_table(["target", "goal", "measured", "status"], rows) + "\n")

    # machine / method
    w("## Machine and settings\n")
    prod = st.get("producer_conf", {})
    sp = st.get("spark", {})
    facts = [
        ["cores / CPU", f"{m.get('cores')} × {m.get('cpu')}"], ["memory", f"{m.get('mem_gib')} GiB"],
        ["OS", str(m.get("os"))], ["Python", str(m.get("python"))], ["Java", str(m.get("java"))],
        ["Spark", str(m.get("spark"))], ["pyarrow", str(m.get("pyarrow"))],
        ["confluent-kafka / librdkafka", f"{m.get('confluent_kafka')} / {m.get('librdkafka')}"],
        ["lmdb (py-lmdb)", str(m.get("lmdb"))],
        ["broker", f"{m.get('broker')} (embedded, memory storage, loopback; same process for every writer)"],
        ["Spark master / partitions", f"{sp.get('spark.master')} / {st.get('partitions')} for every writer"],
        ["Arrow batch size", f"{sp.get('spark.sql.execution.arrow.maxRecordsPerBatch')} rows "
                             "(spark.sql.execution.arrow.maxRecordsPerBatch, default)"],
        ["topic partitions", str(st.get("topic_partitions"))],
        ["producer settings (every writer)", ", ".join(f"`{k}={v}`" for k, v in prod.items())
         + " + librdkafka defaults (`linger.ms`, `batch.size`, `compression.type=none`, ...)"],
    ]
    w(_table(["", ""], facts) + "\n")
    w("""**Fairness.** Every writer gets the same cached DataFrame (or the same rate source), the same number of
Spark partitions, the same Spark session and settings, the same broker process and the same producer
settings: librdkafka's defaults plus the sink's safe defaults `enable.idempotence=true` and `acks=all`,
which `bench/run.py` checks are exactly what the sink hands to confluent-kafka. The writers:

* **raw** (the ceiling): a `mapInArrow` function producing every row with confluent-kafka
  (`produce(topic, value, key)`), no delivery callback, `poll(0)` once per Arrow batch, `flush()` at the
  end of the partition.
* **flush-writer**: the same plus a delivery callback per record that keeps the first error, a check
  for it before each send and after `flush()`, failing on the first error: what Spark's built-in Kafka
  sink does, written in Python. It stands in for the built-in sink, whose jar cannot be installed here.
* **sink sync**: `RecoverableKafkaSink(..., ack_timeout_s=900)`: every task waits for all its acks.
* **sink async**: `ack_timeout_s=0`: tasks return once their records are committed to the WAL; the
  worker's background thread produces them after the task. Its *time to durable in Kafka* is measured separately, from the start of
  the write until the WAL is empty (all acked *and pruned*; pruning runs at least every
  `checkpoint_interval_s` = 1 s, so this overstates the time to the last ack by up to about a second).
* **sink exactly-once**: not available yet (see below); nothing is reported for it.

Differences that are part of what is measured, not of the setup: the sink writes each Arrow batch to
the WAL (fsync per transaction) before producing, and adds a header `rks-id` (~30 bytes) to every
record, which the baselines do not send. Producers are created once per Python worker and run for
every writer (the sink keeps one per worker process), and every timed run is preceded by an untimed
warm-up task that closes what earlier runs left in the workers and connects the producer. Runs are
interleaved (round 1 of every writer, then round 2, ..., the order rotated each round). Every run
writes to a fresh topic, deleted afterwards. MB/s counts key + value bytes.
""")

    # throughput
    w("## 1. Batch-write throughput\n")
    tp = results.get("throughput")
    if _ok(tp):
        w("`spark.range(N)` → `key` (the number as text), `value` (the number left-padded to the value size), "
          f"binary, cached and counted before timing; {tp['partitions']} partitions; median of {tp['rounds']} runs "
          "per writer. Time = the Spark job, driver to driver.\n")
        for size in tp["sizes"]:
            n = tp["rows_by_size"][str(size)]
            c = tp.get("cache", {}).get(str(size)) or tp.get("cache", {}).get(size) or {}
            spill = (f" **{c['disk_bytes'] / 2**20:.0f} MiB of the cached data spilled to disk.**"
                     if c.get("disk_bytes") else "")
            w(f"### {size} B values, {n:,} rows\n")
            if spill:
                w(spill + "\n")
            rows = []
            for r in [x for x in tp["summary"] if x["value_bytes"] == size]:
                rows.append([LABELS.get(r["writer"], r["writer"]), _f(r["median_s"], "{:.2f}"),
                             f"{_f(r['min_s'], '{:.2f}')}–{_f(r['max_s'], '{:.2f}')}", _f(r["rows_per_s"]),
                             _f(r["mb_per_s"], "{:.1f}"), _f(r["vs_raw"], "{:.2f}"), _f(r["vs_flush"], "{:.2f}"),
                             {True: "yes", False: f"**NO: {r.get('read_back_text') or 'fewer read back than written'}**"}.get(
                                 r.get("read_back_ok"), "–")])
                if r["writer"] == ASYNC and r.get("acked_at_task_end") is not None:
                    rows[-1][0] += f" ({r['acked_at_task_end'] * 100:.0f} % acked when the write returned)"
                if r["writer"] == ASYNC and r.get("durable_median_s"):
                    rows.append(["↳ sink async, time to durable in Kafka", _f(r["durable_median_s"], "{:.2f}"), "",
                                 _f(r["durable_rows_per_s"]), _f(r["durable_rows_per_s"] * r["mb_per_s"] /
                                                                 r["rows_per_s"], "{:.1f}"),
                                 _f(r.get("durable_vs_raw"), "{:.2f}"), _f(r.get("durable_vs_flush"), "{:.2f}"), ""])
            rows.append(["sink exactly-once", "", "", "", "", "", "", "not available yet"])
            w(_table(["writer", "median s", "range s", "rows/s", "MB/s", "× raw", "× flush-writer",
                      "all rows read back"], rows) + "\n")
        w("\"All rows read back\": the first run of each writer was counted by consuming the topic from the "
          "beginning (at-least-once writers may add duplicates, never fewer rows). Every writer checks its own "
          "delivery (raw: `flush()` left nothing; flush-writer: no delivery error; sink: every record acked), so a "
          "shortfall with a clean writer points at the embedded development broker or the read, and is shown "
          "as it is, with a second count.\n")
    else:
        w(_err(tp))

    # latency
    w("## 2. Micro-batch latency\n")
    lat = results.get("latency")
    if _ok(lat):
        w(f"A streaming query per writer: `rate` source at {lat['rows_per_s']:,} rows/s, "
          f"{lat['partitions']} partitions, trigger every {lat['trigger_s']:.0f} s, for about "
          f"{lat['duration_s']} batches after {lat['warmup_batches']} warm-up batches (not counted). Batch "
          "duration from `query.recentProgress`: `durationMs.addBatch` (the `foreachBatch` call, i.e. the "
          "write) and `triggerExecution` (the whole trigger).\n")
        rows = []
        for r in lat["results"]:
            ab, tr = r["add_batch_ms"], r["trigger_ms"]
            rows.append([LABELS.get(r["writer"], r["writer"]), f"{r['value_bytes']}", str(r["batches"]),
                         _f(r["rows_per_batch_mean"]), _f(ab["p50"]), _f(ab["p95"]), _f(ab["p99"]), _f(tr["p50"]),
                         _f(tr["p95"]), _f(tr["p99"]), "yes" if r["kept_up"] else "**no**"])
        rows.append(["sink exactly-once", "", "", "", "", "", "", "", "", "", "not available yet"])
        w(_table(["writer", "value B", "batches", "rows/batch", "addBatch p50 ms", "p95", "p99",
                  "trigger p50 ms", "p95", "p99", "kept up"], rows) + "\n")
        w("\"Kept up\": p95 trigger ≤ 1 s and batches no larger than 1.2 × the offered rows per second. "
          "The async sink's batches end before their records are acked; after the query stopped, its WAL was "
          "empty after " + ", ".join(f"{_f(r.get('drain_after_stop_s'), '{:.2f}')} s" for r in lat["results"]
                                     if r["writer"] == ASYNC) + ".\n")
    else:
        w(_err(lat))

    # WAL
    w("## 3. The WAL's own cost per record\n")
    wal = results.get("wal")
    if _ok(wal):
        w(f"`bench/wal_cost.py`, outside Spark and Kafka, {wal['rows']:,} records, 10,000 per chunk (Arrow "
          f"batch), median of {wal['repeat']}: write = normalise + Arrow IPC + CRC + one LMDB transaction per "
          "chunk; ack = the sink's in-memory ack tracking per record; prune = one delete per chunk, 16 chunks per "
          "transaction. Values are random bytes.\n")
        rows = []
        for r in wal["wal_only"]:
            rows.append(["chunk per Arrow batch (sink)" if r["design"] == "chunked" else "entry per record",
                         str(r["value_bytes"]), "yes" if r["fsync"] else "no", _f(r["write_us"], "{:.3f}"),
                         _f(r.get("ack_us"), "{:.3f}"), _f(r["prune_us"], "{:.3f}"),
                         _f(r.get("total_with_ack_us", r["total_us"]), "**{:.3f}**" if r["design"] == "chunked"
                            and r["fsync"] else "{:.3f}")])
        w(_table(["design", "value B", "fsync", "write µs", "ack µs", "prune µs", "total µs/record"], rows) + "\n")
        w("The whole path against the broker, outside Spark, one partition, same records: a plain produce loop "
          "with a delivery callback per record, `flush()` at the end, vs `write_partition` with the sink in "
          "sync mode (WAL write + produce with the id header + ack tracking + prune), interleaved, medians:\n")
        rows = []
        for r in wal["produce_vs_sink"]:
            rows.append([str(r["value_bytes"]), _f(r["rows"]), _f(r["produce_alone_us"], "{:.2f}"),
                         _f(r.get("produce_header_us"), "{:.2f}"), _f(r["sink_us"], "{:.2f}"),
                         _f(r["sink_overhead_us"], "{:+.2f}"), _f(r["sink_vs_alone"], "{:.2f}")])
        w(_table(["value B", "records", "produce alone µs/rec", "… + rks-id header µs/rec", "sink path µs/rec",
                  "sink − produce alone µs/rec", "sink ÷ produce-alone speed"], rows) + "\n")
        w("The middle column is the plain loop plus a header built like the sink's `rks-id`, to separate "
          "the cost of the header from the cost of the WAL and the ack tracking.\n")
    else:
        w(_err(wal))

    # memory
    w("## 4. Python worker peak memory\n")
    mem = results.get("memory")
    if _ok(mem):
        w("`write_partition` for one partition in a child process outside Spark (what a Python worker runs), "
          "sync mode, 100 B values, input generated lazily in 10,000-row Arrow batches; after a 10,000-row "
          "warm-up. Peak = `VmHWM` from `/proc/<pid>/status` at the end.\n")
        rows = []
        for r in mem["runs"]:
            rows.append([_f(r["rows"]), _f(r["baseline_rss_kib"] / 1024, "{:.0f}"),
                         _f(r["warm_hwm_kib"] / 1024, "{:.0f}"), f"**{r['peak_hwm_kib'] / 1024:.0f}**",
                         _f(r["rows_per_s"]), _f(r["report"]["acked"])])
        w(_table(["rows in the partition", "RSS after imports MiB", "peak after warm-up MiB", "peak MiB",
                  "rows/s", "acked"], rows) + "\n")
        if mem.get("growth") is not None:
            w(f"Growth of the peak from the smallest to the largest partition: {mem['growth'] * 100:+.1f} %.\n")
    else:
        w(_err(mem))

    # recovery
    w("## 5. Recovery: replay of orphaned records\n")
    rec = results.get("recovery")
    if _ok(rec):
        r = rec["replay"]
        w(f"A child process wrote {rec['rows']:,} records of 100 B with `ack_timeout_s=0` while the broker was "
          f"paused (SIGSTOP), then died with `os._exit` ({rec['orphaned_in_wal']:,} records left in its WAL slot). "
          "With the broker resumed, a fresh process built a runtime for the same sink, which took the dead "
          "process's slot and replayed it; timed from `get_runtime` until every replayed record was acked.\n")
        w(_table(["replayed", "recover + produce s", "all acked s", "records/s", "WAL empty s", "read back"], [[
            _f(r["replayed"]), _f(r["recover_and_produce_s"], "{:.2f}"), _f(r["acked_s"], "{:.2f}"),
            f"**{_f(r['rows_per_s'])}**", _f(r["wal_empty_s"], "{:.2f}"),
            f"{rec['read_back']:,} ({'ok' if rec['read_back_ok'] else 'MISSING'})"]]) + "\n")
    else:
        w(_err(rec))

    # profile
    w("## 6. Where the sink's time goes\n")
    prof = results.get("profile")
    if _ok(prof):
        w(f"cProfile of `write_partition` for one partition of {prof['rows']:,} records of "
          f"{prof['value_bytes']} B, sync mode, outside Spark ({prof['profiled_s']:.2f} s under the profiler, "
          "which inflates Python-level calls). The publisher's poller thread is profiled separately. "
          "µs/record = time ÷ records.\n")
        for thread, th in prof["threads"].items():
            w(f"### {thread} thread — top by self time\n")
            if th.get("note"):
                w(f"{th['note']}.\n")
            w(_table(["function", "calls", "self s", "self µs/rec", "cum s"],
                     [[f"`{x['function']}`", _f(x["ncalls"]), _f(x["tottime_s"], "{:.3f}"),
                       _f(x["self_us_per_record"], "{:.3f}"), _f(x["cumtime_s"], "{:.3f}")]
                      for x in th["self"][:12]]) + "\n")
            w(f"### {thread} thread — top by cumulative time\n")
            w(_table(["function", "calls", "cum s", "cum µs/rec", "self s"],
                     [[f"`{x['function']}`", _f(x["ncalls"]), _f(x["cumtime_s"], "{:.3f}"),
                       _f(x["cum_us_per_record"], "{:.3f}"), _f(x["tottime_s"], "{:.3f}")]
                      for x in th["cumulative"][:12]]) + "\n")
    else:
        w(_err(prof))

    w("## Sink exactly-once\n")
    rows = []
    for size in ((results.get("throughput") or {}).get("sizes") or []):
        e, y = _tp(results, EXACTLY, size), _tp(results, SYNC, size)
        if e and y and y.get("rows_per_s"):
            rows.append([f"{size} B", f"{e['rows_per_s']:,.0f}", f"{y['rows_per_s']:,.0f}",
                         f"{e['rows_per_s'] / y['rows_per_s']:.2f} x"])
    if rows:
        w("One Kafka transaction per task, committed before the task returns: when `write()` returns, "
          "every record is visible to read_committed consumers (time to visible = batch time).\n")
        w(_table(["values", "exactly-once rows/s", "at-least-once sync rows/s", "ratio"], rows) + "\n")
    else:
        w("**Not measured in this run.**\n")

    w("## Running it\n")
    w("""```sh
make bench-quick   # .venv/bin/python bench/run.py --quick   (about two minutes; checks the suite works)
make bench         # .venv/bin/python bench/run.py           (the measured run; use a quiet machine)
python bench/render.py [bench/results/<timestamp>.json]      # re-render this page and the chart
python bench/wal_cost.py --rows 1000000                      # the WAL cost alone
```

`bench/run.py --only throughput,latency,wal,memory,recovery,profile` runs a subset; `--rows`, `--rounds`,
`--partitions`, `--cores` override sizes. Each run writes `bench/results/<timestamp>.json` and
`bench/results/latest.json`, which this page is rendered from.
""")
    w(f"Parameters of this run ({mode}): " + ", ".join(f"`{k}={v}`" for k, v in p.items()) + ".\n")
    return "\n".join(out)


# -- chart -------------------------------------------------------------------------------------------


def chart(results: dict[str, Any], path: str = PNG) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.ticker import FuncFormatter
    except ImportError:
        print("[render] matplotlib not installed: no chart", file=sys.stderr)
        return False
    tp, lat = results.get("throughput"), results.get("latency")
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(13, 4.8))
    writers = [RAW, FLUSH, SYNC, ASYNC, EXACTLY]
    colors = {RAW: "#888888", FLUSH: "#4c72b0", SYNC: "#dd8452", ASYNC: "#55a868", EXACTLY: "#c44e52"}
    if _ok(tp):
        sizes = tp["sizes"]
        width = 0.8 / (len(writers) + 1)
        for i, wr in enumerate(writers + ["durable"]):
            xs, ys = [], []
            for j, size in enumerate(sizes):
                r = _tp(results, ASYNC if wr == "durable" else wr, size)
                if r is None:
                    continue
                xs.append(j + (i - len(writers) / 2) * width)
                ys.append((r.get("durable_rows_per_s") if wr == "durable" else r["rows_per_s"]) or 0)
            if wr == "durable":
                ax1.bar(xs, ys, width, label="sink async, to durable", color="white", edgecolor=colors[ASYNC],
                        hatch="//")
            else:
                ax1.bar(xs, ys, width, label=LABELS[wr], color=colors[wr])
        ax1.set_xticks(range(len(sizes)), [f"{s} B values" for s in sizes])
        ax1.set_ylabel("rows/s (median)")
        ax1.yaxis.set_major_formatter(FuncFormatter(lambda x, _pos: f"{x:,.0f}"))
        ax1.set_title(f"Batch write, {tp['partitions']} partitions, "
                      + ", ".join(f"{int(n):,} rows of {s} B" for s, n in tp["rows_by_size"].items()), fontsize=10)
        ax1.legend(fontsize=8)
        ax1.grid(axis="y", alpha=0.3)
    else:
        ax1.text(0.5, 0.5, "throughput not measured", ha="center")
    if _ok(lat):
        rs = [r for r in lat["results"] if r["value_bytes"] == lat["sizes"][0]]
        qs = ["p50", "p95", "p99"]
        width = 0.8 / len(qs)
        for k, q in enumerate(qs):
            ax2.bar([i + (k - 1) * width for i in range(len(rs))], [r["add_batch_ms"][q] or 0 for r in rs], width,
                    label=f"addBatch {q}", alpha=[1.0, 0.65, 0.35][k],
                    color=[colors.get(r["writer"], "#4c72b0") for r in rs], edgecolor="black", linewidth=0.4)
        ax2.set_xticks(range(len(rs)), [LABELS.get(r["writer"], r["writer"]) for r in rs], fontsize=8)
        ax2.set_ylabel("batch duration, ms")
        ax2.set_title(f"Micro-batch duration at {lat['rows_per_s']:,} rows/s, 1 s trigger")
        ax2.set_xlabel("bars per writer: addBatch p50, p95, p99 (lighter)", fontsize=8)
        ax2.grid(axis="y", alpha=0.3)
    else:
        ax2.text(0.5, 0.5, "latency not measured", ha="center")
    meta = results["meta"]
    fig.suptitle(f"spark_recoverable_sink benchmarks — {meta['mode']} mode, {meta['timestamp']}"
                 + (" (quick: not a measurement)" if meta["mode"] == "quick" else ""), fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def render(results: dict[str, Any], doc: str = DOC, png: str = PNG) -> None:
    if "targets" not in results:
        results["targets"] = evaluate_targets(results)
    with open(doc, "w") as f:
        f.write(markdown(results))
    chart(results, png)
    print(f"[render] wrote {os.path.relpath(doc, REPO)} and {os.path.relpath(png, REPO)}", file=sys.stderr)


def main() -> None:
    path = sys.argv[1] if len(sys.argv) > 1 else os.path.join(REPO, "bench", "results", "latest.json")
    with open(path) as f:
        results = json.load(f)
    results["targets"] = evaluate_targets(results)
    render(results)


if __name__ == "__main__":
    main()
