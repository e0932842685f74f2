"""Render benchmark results into docs/PERFORMANCE.md, docs/performance.png and docs/performance-scaling.png.

Usage: python bench/render.py [results.json] [--docs-dir DIR]
(default: bench/results/latest.json into docs/; ``--docs-dir`` writes the three files elsewhere)
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOCS = os.path.join(REPO, "docs")
DOC_NAME, PNG_NAME, SCALING_PNG_NAME = "PERFORMANCE.md", "performance.png", "performance-scaling.png"
DOC = os.path.join(DOCS, DOC_NAME)
PNG = os.path.join(DOCS, PNG_NAME)

NOOP, RAW, FLUSH, SYNC, ASYNC, EXACTLY = ("noop", "raw", "flush-writer", "sink-sync", "sink-async",
                                          "sink-exactly-once")
SYNC_PY = "sink-sync-python"
LABELS = {NOOP: "no-op (Spark's floor)", RAW: "raw (ceiling)", FLUSH: "flush-writer", SYNC: "sink sync (native)",
          SYNC_PY: "sink sync (Python engine)", ASYNC: "sink async (native)", EXACTLY: "sink exactly-once (native)",
          "flush-writer-id": "flush-writer + rks-id header", "spark-kafka": "Spark's Kafka sink",
          "spark-kafka-alike": "Spark's Kafka sink, batching as librdkafka's",
          "sink-exactly-once-no-resplit": "sink exactly-once, no re-split"}


# -- targets: bench/targets.py ------------------------------------------------------------------

if REPO not in sys.path:  # also run as a script: python bench/render.py
    sys.path.insert(0, REPO)
from bench.analysis import cores_busy, why_missed  # noqa: E402
from bench.targets import EARLIER, NATIVE, SCALE_HI, SCALE_LO, VERSUS_SPARK, evaluate_targets  # noqa: E402
from bench.targets import lat_row as _lat
from bench.targets import tp_row as _tp


def _ok(section: Any) -> bool:
    return isinstance(section, dict) and "error" not in section


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


def _engines_text(engines: Any) -> str:
    """Which delivery engine each sink writer ran with, as its worker processes reported it."""
    if not engines:
        return ""
    parts = [f"{LABELS.get(wr, wr)}: {', '.join(e['engines'])} in {e['workers']} worker process"
             f"{'es' if e['workers'] != 1 else ''}" for wr, e in engines.items() if e]
    return ("Delivery engine of each sink writer, asked in the worker processes before its first timed run: "
            + "; ".join(parts) + ".")


def _scaling_md(results: dict[str, Any], sc: dict[str, Any]) -> str:
    from bench.targets import scale_row

    out: list[str] = []
    w = out.append
    loc = sc.get("local") or {}
    cl = sc.get("cluster")
    cores = loc.get("cores") or results.get("settings", {}).get("cores")
    parts = sc.get("partitions") or []
    pts = [pt for pt in loc.get("points", [])] if _ok(loc) else []
    lat0 = next((pt["latency"] for pt in pts if _ok(pt.get("latency"))), None)
    tp0 = next((pt["throughput"] for pt in pts if _ok(pt.get("throughput"))), None)
    present = list(dict.fromkeys(r["writer"] for r in sc.get("summary") or []))
    w(f"Writers: {', '.join(LABELS.get(x, x) for x in present) or 'none measured'} (the no-op writer in latency "
      f"only), at {', '.join(map(str, parts))} Spark partitions on `{loc.get('master')}` "
      f"({cores} cores), then once in a Spark app of its own on `{(cl or {}).get('master', 'local-cluster')}` "
      "(a standalone master, two worker and two executor JVMs of one core and 1 GiB each, on this machine; "
      "bench/cluster.py). Batch write: the same "
      f"{sc.get('rows', 0):,} cached rows of {sc.get('value_bytes')} B at every partition count"
      + (f", median of {tp0['rounds']} interleaved runs" if tp0 else "") + ". Micro-batches: a `rate-micro-batch` "
      f"source, exactly {sc.get('rows_per_batch', sc.get('rows_per_s', 0)):,} rows in every batch whatever the "
      "partitions and however long a batch takes, 1 s trigger"
      + (f"; {lat0['duration_s']} batches measured after {lat0['warmup_batches']} warm-up batches (fewer where "
         f"{lat0.get('max_s')} s did not leave time for them: see \"batches\")" if lat0 else "")
      + ". A writer whose batches take longer than the trigger runs them back to back (not kept up), with the "
      "same rows each.\n")
    for pt in pts:
        for half in ("throughput", "latency"):
            if not _ok(pt.get(half)):
                w(f"**{pt['partitions']} partitions, {half} failed:** `{(pt.get(half) or {}).get('error')}`\n")
    if cl is None:
        w("The local-cluster run was skipped (`--no-cluster`).\n")
    elif not _ok(cl):
        w(f"**The local-cluster run failed:** `{cl.get('error')}`\n")
    else:
        ctp = cl.get("throughput") if _ok(cl.get("throughput")) else None
        w(f"local-cluster: {cl.get('executors')} executors registered, the app was up in "
          f"{_f(cl.get('startup_s'), '{:.0f}')} s; {cl['partitions']} partitions"
          + (f", {int(next(iter(ctp['rows_by_size'].values()))):,} cached rows (executors of 1 GiB)" if ctp else "")
          + ".\n")
        for half in ("throughput", "latency"):
            if not _ok(cl.get(half)):
                w(f"**local-cluster {half} failed:** `{(cl.get(half) or {}).get('error')}`\n")
    rows = []
    for r in sc.get("summary") or []:
        is_cluster = _ok(cl) and r["setting"] == cl.get("master")
        base = scale_row(results, r["writer"], SCALE_LO)
        tp_g = (r["rows_per_s"] / base["rows_per_s"]) if base and base.get("rows_per_s") and r.get("rows_per_s") \
            else None
        p50_g = (r["p50_ms"] / base["p50_ms"]) if base and base.get("p50_ms") and r.get("p50_ms") is not None \
            else None
        mark = "**{:.2f}**" if r["writer"] == EXACTLY and r["partitions"] == SCALE_HI and not is_cluster else "{:.2f}"
        rows.append([
            "local-cluster" if is_cluster else r["setting"], str(r["partitions"]), LABELS.get(r["writer"], r["writer"]),
            _f(r.get("rows_per_s")), _f(tp_g, "{:.2f}"), _f(r.get("tp_vs_flush"), "{:.2f}"),
            _f(r.get("cpu_s_per_million"), "{:.2f}"), _f(r.get("p50_ms")), _f(p50_g, mark), _f(r.get("p95_ms")),
            _f(None if r.get("task_s_p50") is None else r["task_s_p50"] * 1000),
            _f(None if r.get("task_s_sum_p50") is None else r["task_s_sum_p50"] * 1000),
            _f(r.get("batches"), "{}"), _f(r.get("lat_workers") or r.get("tp_workers"), "{}"),
            {True: "yes", False: "**no**"}.get(r.get("kept_up"), "–"),
            {True: "yes", False: f"**NO: {_scaling_read_back_text(sc, r, is_cluster) or 'fewer read back'}**"}.get(
                r.get("read_back_ok"), "–"),
        ])
    if rows:
        w(_table(["master", "partitions", "writer", "rows/s", f"rows/s ÷ at {SCALE_LO} p.", "× flush-writer",
                  "CPU s / M rows", "addBatch p50 ms", f"p50 ÷ at {SCALE_LO} p.", "p95 ms", "task p50 ms",
                  "tasks' ms per batch", "batches", "Python workers", "kept up", "all rows read back"], rows) + "\n")
        w(f"\"÷ at {SCALE_LO} p.\": against the same writer at {SCALE_LO} partitions in `{loc.get('master')}` "
          "(for the local-cluster rows too). \"task p50\" and \"tasks' ms per batch\" come from the sink's own "
          "batch reports (`write_partition` per task; the sum over a batch's tasks, which run "
          f"{cores} at a time in local mode). \"Python workers\": distinct worker processes that ran the sink's "
          "tasks. \"Kept up\": p95 trigger ≤ 1 s. \"All rows read back\": the throughput run of round 0 counted by "
          "consuming its topic (read_committed) from offset 0.\n")
    return "\n".join(out)


def _scaling_read_back_text(sc: dict[str, Any], r: dict[str, Any], is_cluster: bool) -> str | None:
    """The read-back text of a scaling row's throughput run (kept in its point's own summary)."""
    pts = [sc.get("cluster") or {}] if is_cluster else (sc.get("local") or {}).get("points") or []
    for pt in pts:
        if not is_cluster and pt.get("partitions") != r["partitions"]:
            continue
        tp = pt.get("throughput") or {}
        warm = 10 * int(tp.get("partitions") or pt.get("partitions") or 0)  # spark_bench's warm-up rows
        for x in tp.get("runs") or []:
            if x.get("writer") != r["writer"] or x.get("read_back_ok") is not False:
                continue
            # read_back* are counts minus the warm-up rows: a count of 0 shows as -warm
            seen = [max(0, x[k] + warm) for k in ("read_back", "read_back_again", "read_back_uncommitted") if k in x]
            text = f"{seen[0]:,} of {x['rows'] + warm:,} rows (with the {warm} warm-up rows) read back read_committed"
            if len(seen) > 1:
                text += f", {seen[1]:,} on a second read"
            if len(seen) > 2:
                text += f", {seen[2]:,} read_uncommitted"
            return text
    return None


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
    for mg in meta.get("merged") or []:
        many = len(mg["sections"]) > 1
        w(f"{'Sections' if many else 'Section'} {', '.join(mg['sections'])}: from a later run of "
          f"{'them' if many else 'it'} alone (`{mg.get('file')}`, commit `{mg.get('commit')}`, "
          f"{mg.get('elapsed_s')} s), which replaced {'them' if many else 'it'} in this file.\n")
    broker = str(m.get("broker") or "unknown")
    w(f"Broker: **{broker}**.\n")
    if "apache kafka" not in broker.lower():
        w("> **Not Apache Kafka.** These figures were measured on a Kafka-compatible stand-in broker (memory "
          "storage) that the project used before it moved its tests and benchmark to Apache Kafka; they have not "
          "been measured again on Apache Kafka yet, and Apache Kafka's own cost (its log on disk, its JVM) will "
          "move them.\n")
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
    used = {k: v for k, v in (meta.get("brokers") or {}).items() if k != "settings" and "cpu_s" in v}
    if used:
        w(("Each section ran on a fresh Apache Kafka broker of its own (single node, its log on the local disk). "
           if "apache kafka" in str(m.get("broker")).lower() else
           "Each section ran on a fresh stand-in broker of its own (memory storage). ") + "What each section's broker used, CPU "
          "seconds / peak resident set: " + ", ".join(
              f"{k} {v['cpu_s']:.0f} s / {(v.get('hwm_kib') or 0) / 1024:.0f} MiB" for k, v in used.items()) + ".\n")
    w(f"![throughput and latency per writer]({PNG_NAME})\n")
    if _ok(results.get("scaling")):
        w(f"![how cost grows with Spark partitions]({SCALING_PNG_NAME})\n")

    # targets
    w("## Targets\n")
    w("Benchmarks, not timed tests: a missed target is reported, never hidden or tuned away. Every ratio compares "
      "writers measured side by side in this run.\n")
    for group, title in ((VERSUS_SPARK, "Against Spark's own Kafka sink"), (NATIVE, "The native delivery engine"),
                         (EARLIER, "Earlier targets (kept)")):
        rows = []
        for t in results.get("targets", []):
            if t.get("group", EARLIER) != group:
                continue
            mark = {"met": "✅ met", "missed": "❌ missed", "not measured": "– not measured"}[t["status"]]
            rows.append([t["name"], t["goal"], t["measured_text"] + (f" — {t['note']}" if t.get("note") else ""),
                         mark])
        if rows:
            w(f"### {title}\n")
            w(_table(["target", "goal", "measured", "status"], rows) + "\n")
    reasons = why_missed(results)
    if reasons:
        w("### Why the missed targets are missed\n")
        w("Computed from this run's figures (bench/analysis.py); the WAL's own cost is in section 4, the profile in "
          "section 7.\n")
        for name, text in reasons:
            w(f"* **{name}.** {text}")
        w("")

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
        ["broker", f"{m.get('broker')}, "
                   + ("log on the local disk" if "apache kafka" in str(m.get("broker")).lower() else "memory storage")
                   + ", loopback; same process for every writer"
                   + "".join(f", `{k}={v}`" for k, v in (st.get("broker_properties") or {}).items())],
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
which `bench/run.py` checks are exactly what the sink hands to confluent-kafka (Spark's own Kafka sink, a
Java client, gets the same `acks` and idempotence, and its own defaults otherwise, or, in a second
configuration, its batching set as librdkafka's). The writers:

* **raw** (the ceiling): a `mapInArrow` function producing every row with confluent-kafka
  (`produce(topic, value, key)`), no delivery callback, `poll(0)` once per Arrow batch, `flush()` at the
  end of the partition.
* **flush-writer**: the same plus a delivery callback per record that keeps the first error, a check
  for it before each send and after `flush()`, failing on the first error: what Spark's built-in Kafka
  sink does, written in Python.
* **Spark's Kafka sink**: `df.write.format("kafka")` / `writeStream.format("kafka")` (connector 4.2.0,
  kafka-clients 3.9.2) on the same topic and partitions, `kafka.acks=all`, `kafka.enable.idempotence=true`,
  the Java client's defaults otherwise (`linger.ms=0`, `batch.size=16384`, no compression): the writer
  users pick instead of this sink. It writes from the executor's JVM; no Python runs.
* **Spark's Kafka sink, batching set alike**: the same with `kafka.linger.ms=5` and
  `kafka.batch.size=1000000`, librdkafka's defaults, which every other writer here runs with: neither
  client wins by a default.
* **flush-writer + rks-id header**: the flush-writer sending a header shaped like the sink's record id
  (`<sink>:<run>:<batch>:<partition>:<16 hex digits>-<occurrence>`), built per record in Python as
  confluent-kafka takes it: the header's cost on its own.
* **sink sync**: `RecoverableKafkaSink(..., ack_timeout_s=900, delivery_engine="native")`: every task waits
  for all its acks. The native engine produces each chunk from its Arrow buffers in C (ids formatted in C
  from the chunk's content fingerprints, delivery reports counted per chunk), no Python object per record.
* **sink sync (Python engine)**: the same with `delivery_engine="python"`: confluent-kafka's `produce` per
  record, a delivery callback per record.
* **sink async**: `ack_timeout_s=0` (native engine): tasks return once their records are committed to the WAL; the
  worker's background thread produces them after the task. Its *time to durable in Kafka* is measured separately, from the start of
  the write until the WAL is empty (all acked *and pruned*; pruning runs at least every
  `checkpoint_interval_s` = 1 s, so this overstates the time to the last ack by up to about a second).
* **sink exactly-once**: `guarantee="exactly_once"`, sync, native engine: each task's records in one Kafka
  transaction with its lane's marker, committed before the task returns (visible to read_committed
  consumers then).
* **no-op**: reads its rows and writes nothing: the part of a write's (or micro-batch's) time that
  Spark itself sets; every writer's latency is also shown above this floor.

Each sink writer names its delivery engine explicitly; before its first timed run the benchmark asks the
worker processes which engine that configuration gets there and stops if it is not the one asked for.

CPU = user + system seconds of every process of the run (the Spark driver JVM, the Python daemon and
workers, the broker, the bench process), from `/proc`, from the start of the write until it returned
(async: until durable), per million rows; median of the runs.

Differences that are part of what is measured, not of the setup: the sink writes each Arrow batch to
the WAL (fsync per transaction; with each record's content fingerprint and occurrence, the columns
`rks_fp` and `rks_occ`) before producing, and adds a header `rks-id` (~70 bytes) to every record,
which the baselines other than "flush-writer + rks-id header" do not send. Producers are created once per Python worker and run for
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
                             _f(r.get("cpu_s_per_million"), "{:.2f}"), _f(r.get("cpu_vs_flush"), "{:.2f}"),
                             _f(cores_busy(r), "{:.2f}"),
                             {True: "yes", False: f"**NO: {r.get('read_back_text') or 'fewer read back than written'}**"}.get(
                                 r.get("read_back_ok"), "–")])
                if r["writer"] == ASYNC and r.get("acked_at_task_end") is not None:
                    rows[-1][0] += f" ({r['acked_at_task_end'] * 100:.0f} % acked when the write returned)"
                if r["writer"] == ASYNC and r.get("durable_median_s"):
                    rows.append(["↳ sink async, time to durable in Kafka", _f(r["durable_median_s"], "{:.2f}"), "",
                                 _f(r["durable_rows_per_s"]), _f(r["durable_rows_per_s"] * r["mb_per_s"] /
                                                                 r["rows_per_s"], "{:.1f}"),
                                 _f(r.get("durable_vs_raw"), "{:.2f}"), _f(r.get("durable_vs_flush"), "{:.2f}"),
                                 "", "", "", ""])
            w(_table(["writer", "median s", "range s", "rows/s", "MB/s", "× raw", "× flush-writer",
                      "CPU s / M rows", "CPU × flush-writer", "cores busy", "all rows read back"], rows) + "\n")
        eng = _engines_text(tp.get("engines"))
        if eng:
            w(eng + "\n")
        w("\"Cores busy\" = CPU seconds of every process ÷ the write's wall time: near the machine's core count "
          "the write is CPU-bound, and throughput follows CPU per record. \"flush-writer + rks-id header\" is the "
          "flush-writer sending the sink's id header, built the same way: the header's cost on its own.\n")
        w("\"All rows read back\": the first run of each writer was counted by consuming the topic from the "
          "beginning (at-least-once writers may add duplicates, never fewer rows). Every writer checks its own "
          "delivery (raw: `flush()` left nothing; flush-writer: no delivery error; sink: every record acked), so a "
          "shortfall with a clean writer points at the broker or the read, and is shown "
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
            floor = _lat(results, NOOP, r["value_bytes"])
            above = (ab["p50"] - floor["add_batch_ms"]["p50"]
                     if floor and ab["p50"] is not None and floor["add_batch_ms"]["p50"] is not None else None)
            rows.append([LABELS.get(r["writer"], r["writer"]), f"{r['value_bytes']}", str(r["batches"]),
                         _f(r["rows_per_batch_mean"]), _f(ab["p50"]), _f(above, "{:+.0f}"), _f(ab["p95"]),
                         _f(ab["p99"]), _f(tr["p50"]), _f(tr["p95"]), _f(tr["p99"]),
                         "yes" if r["kept_up"] else "**no**"])
        w(_table(["writer", "value B", "batches", "rows/batch", "addBatch p50 ms", "over no-op ms", "p95", "p99",
                  "trigger p50 ms", "p95", "p99", "kept up"], rows) + "\n")
        eng = _engines_text(lat.get("engines"))
        if eng:
            w(eng + "\n")
        w("\"Kept up\": p95 trigger ≤ 1 s and batches no larger than 1.2 × the offered rows per second. "
          "The async sink's batches end before their records are acked; after the query stopped, its WAL was "
          "empty after " + ", ".join(f"{_f(r.get('drain_after_stop_s'), '{:.2f}')} s" for r in lat["results"]
                                     if r["writer"] == ASYNC) + ".\n")
    else:
        w(_err(lat))

    # scaling
    w("## 3. How cost grows with Spark partitions\n")
    sc = results.get("scaling")
    if _ok(sc):
        w(_scaling_md(results, sc))
    else:
        w(_err(sc))

    # WAL
    w("## 4. The WAL's own cost per record\n")
    wal = results.get("wal")
    if _ok(wal):
        w(f"`bench/wal_cost.py`, outside Spark and Kafka, {wal['rows']:,} records, 10,000 per chunk (Arrow "
          f"batch), median of {wal['repeat']}: write = normalise + the records' ids (content fingerprints and "
          "occurrences, stored as two columns) + Arrow IPC + CRC + one LMDB transaction per chunk (\"ids\" is "
          "the ids' part of it); ack = the sink's in-memory ack tracking as the native engine does it (a chunk "
          "round's counts, once) and as the Python engine does it (a callback per record); prune = one delete per "
          "chunk, 16 chunks per transaction. Total = write + ack (native) + prune. Values are random bytes.\n")
        rows = []
        for r in wal["wal_only"]:
            rows.append(["chunk per Arrow batch (sink)" if r["design"] == "chunked" else "entry per record",
                         str(r["value_bytes"]), "yes" if r["fsync"] else "no", _f(r["write_us"], "{:.3f}"),
                         _f(r.get("ids_us"), "{:.3f}"), _f(r.get("ack_us"), "{:.3f}"),
                         _f(r.get("ack_python_us"), "{:.3f}"), _f(r["prune_us"], "{:.3f}"),
                         _f(r.get("total_with_ack_us", r["total_us"]), "**{:.3f}**" if r["design"] == "chunked"
                            and r["fsync"] else "{:.3f}")])
        w(_table(["design", "value B", "fsync", "write µs", "… of it ids µs", "ack (native) µs", "ack (Python) µs",
                  "prune µs", "total µs/record"], rows) + "\n")
        w("The whole path against the broker, outside Spark, one partition, same records: a plain produce loop "
          "with a delivery callback per record, `flush()` at the end, vs `write_partition` with the sink in "
          "sync mode (WAL write + produce with the id header + ack tracking + prune) on the native engine and on "
          "the Python engine, interleaved, medians:\n")
        rows = []
        for r in wal["produce_vs_sink"]:
            rows.append([str(r["value_bytes"]), _f(r["rows"]), _f(r.get("produce_no_report_us"), "{:.2f}"),
                         _f(r["produce_alone_us"], "{:.2f}"),
                         _f(r.get("produce_header_us"), "{:.2f}"), _f(r["sink_us"], "{:.2f}"),
                         _f(r.get("sink_python_us"), "{:.2f}"),
                         _f(r["sink_overhead_us"], "{:+.2f}"), _f(r["sink_vs_alone"], "{:.2f}")])
        w(_table(["value B", "records", "produce, no reports µs/rec", "produce alone µs/rec",
                  "… + rks-id header µs/rec", "sink path, native µs/rec", "sink path, Python engine µs/rec",
                  "sink (native) − produce alone µs/rec", "sink (native) ÷ produce-alone speed"], rows) + "\n")
        w("\"No reports\" is the same loop without a delivery callback (what a delivery report per record costs); "
          "the header column is the plain loop plus a header built like the sink's `rks-id`, to separate "
          "the cost of the header from the cost of the WAL and the ack tracking.\n")
    else:
        w(_err(wal))

    # memory
    w("## 5. Python worker peak memory\n")
    mem = results.get("memory")
    if _ok(mem):
        w("`write_partition` for one partition in a child process outside Spark (what a Python worker runs), "
          "sync mode, 100 B values, input generated lazily in 10,000-row Arrow batches; after a 10,000-row "
          "warm-up. Peak = `VmHWM` from `/proc/<pid>/status` at the end (file-backed pages included: the "
          "WAL's map, a large partition's occurrence table); peak `RssAnon` (anonymous memory, what gets a "
          "container killed) sampled every 50 ms while it writes.\n")
        rows = []
        for r in mem["runs"]:
            anon = r.get("peak_anon_kib")
            rows.append([_f(r["rows"]), _f(r["baseline_rss_kib"] / 1024, "{:.0f}"),
                         _f(r["warm_hwm_kib"] / 1024, "{:.0f}"), f"{r['peak_hwm_kib'] / 1024:.0f}",
                         f"**{anon / 1024:.0f}**" if anon else "–", _f(r["rows_per_s"]), _f(r["report"]["acked"])])
        w(_table(["rows in the partition", "RSS after imports MiB", "peak after warm-up MiB", "peak RSS MiB",
                  "peak RssAnon MiB", "rows/s", "acked"], rows) + "\n")
        if mem.get("growth") is not None:
            w(f"Growth from the smallest to the largest partition: peak RSS {mem['growth'] * 100:+.1f} %"
              + (f", peak RssAnon {mem['anon_growth'] * 100:+.1f} %" if mem.get("anon_growth") is not None else "")
              + ".\n")
    else:
        w(_err(mem))

    # recovery
    w("## 6. Recovery: replay of orphaned records\n")
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
    w("## 7. Where the sink's time goes\n")
    prof = results.get("profile")
    if _ok(prof):
        w(f"cProfile of `write_partition` for one partition of {prof['rows']:,} records of "
          f"{prof['value_bytes']} B, sync mode, {prof.get('engine', 'native')} engine, outside Spark ({prof['profiled_s']:.2f} s under the profiler, "
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

    _formats_md(w, results.get("formats"))

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

    _versions_md(w)

    w("## Running it\n")
    w("""```sh
make bench-quick   # .venv/bin/python bench/run.py --quick   (a few minutes; checks every section works)
make bench         # .venv/bin/python bench/run.py           (the measured run, about 50 minutes; a quiet machine)
python bench/render.py [bench/results/<timestamp>.json] [--docs-dir DIR]   # re-render this page and the charts
python bench/wal_cost.py --rows 1000000                      # the WAL cost alone
python bench/commits.py --version a=<commit> --version b=installed   # versions of the package side by side
```

`bench/run.py --only throughput,latency,scaling,wal,memory,recovery,profile` runs a subset; `--rows`,
`--rounds`, `--partitions`, `--cores` override sizes; `--scaling-partitions 4,64` and `--no-cluster`
shape the scaling section; `--docs-dir DIR` renders somewhere else than docs/. Each run writes
`bench/results/<timestamp>.json` and `bench/results/latest.json`, which this page is rendered from.
""")
    w(f"Parameters of this run ({mode}): " + ", ".join(f"`{k}={v}`" for k, v in p.items()) + ".\n")
    return "\n".join(out)


def _formats_md(w: Any, fm: Any) -> None:
    if fm is None:
        return
    w("## 8. Schema Registry formats (Avro)\n")
    if not _ok(fm):
        w(_err(fm))
        return
    w(f"`bench/formats.py`: {fm['rows']:,} cached rows (a struct of four fields; Avro values of "
      f"{fm['value_bytes']:.0f} B with the 5-byte header), local[{fm['partitions']}], median of {fm['rounds']} "
      "interleaved rounds after a warm-up one, every writer waiting for all acks. `sink-plain` is the sink given "
      "the very bytes `sink-avro` sends, encoded beforehand; `row-by-row` is the route users write by hand "
      "(`foreachPartition`, confluent-kafka's `AvroSerializer` and `produce` per row, no WAL).\n")
    rows = [[name, _f(x["rows_per_s"])] for name, x in fm["writers"].items()]
    w(_table(["writer", "rows/s"], rows) + "\n")
    w(f"`sink-avro` ÷ `sink-plain`: {fm['avro_vs_plain']:.2f}; `sink-avro` ÷ `row-by-row`: "
      f"{fm['avro_vs_row_by_row']:.1f} ×.\n")


def _versions_md(w: Any) -> None:
    """The newest ``bench/results/*-commits.json`` (bench/commits.py), if any: versions of the package side by side."""
    import glob

    found = sorted(glob.glob(os.path.join(REPO, "bench", "results", "*-commits.json")))
    if not found:
        return
    with open(found[-1]) as f:
        c = json.load(f)
    w("## Versions of the package side by side\n")
    w(f"From `bench/commits.py` ({os.path.basename(found[-1])}, its own run: {c['rounds']} interleaved rounds, "
      f"local[{c['machine'].get('cores', '?')}], {c['partitions']} partitions, a fresh Spark app per version and "
      "round, one broker): sink at-least-once sync, `sink.write` of cached rows, each version's median. "
      "Versions: " + ", ".join(f"`{v}`" for v in c["versions"]) +
      f" (`installed`: the package of the checkout at `{str(c.get('checkout'))[:12]}`, on the engine named).\n")
    rows = [[r["label"], f"{r['value_bytes']} B", f"{r['median_rows_per_s']:,.0f}",
             f"{r['min']:,.0f} – {r['max']:,.0f}", f"{r['ratio_to_first']:.3f}"] for r in c["summary"]]
    w(_table(["version", "values", "median rows/s", "range over rounds", "÷ first version"], rows) + "\n")


from bench.chart import chart, scaling_chart  # noqa: E402  (the figures: bench/chart.py)


def render(results: dict[str, Any], doc: str | None = None, png: str | None = None,
           docs_dir: str | None = None, versus: str | None = None) -> None:
    """Write the page and both charts (into ``docs_dir``, default docs/; ``doc``/``png`` override single paths)."""
    d = docs_dir or DOCS
    doc, png = doc or os.path.join(d, DOC_NAME), png or os.path.join(d, PNG_NAME)
    spng = os.path.join(os.path.dirname(png), SCALING_PNG_NAME)
    if "targets" not in results:
        results["targets"] = evaluate_targets(results)
    text = markdown(results)
    if versus:  # an earlier run beside this one (bench/versus.py)
        from bench.versus import versus_md

        with open(versus) as f:
            old = json.load(f)
        old["targets"] = evaluate_targets(old)
        text += "\n" + versus_md(results, old, versus)
    with open(doc, "w") as f:
        f.write(text)
    chart(results, png)
    written = [doc, png]
    if _ok(results.get("scaling")) and scaling_chart(results, spng):
        written.append(spng)
    print("[render] wrote " + ", ".join(os.path.relpath(p, REPO) for p in written), file=sys.stderr)


def main() -> None:
    import argparse

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("results", nargs="?", default=os.path.join(REPO, "bench", "results", "latest.json"))
    ap.add_argument("--docs-dir", default=None, help="write PERFORMANCE.md and the charts here instead of docs/")
    ap.add_argument("--versus", default=None, help="an earlier results JSON to set beside this run (bench/versus.py)")
    args = ap.parse_args()
    with open(args.results) as f:
        results = json.load(f)
    results["targets"] = evaluate_targets(results)
    if args.docs_dir:
        os.makedirs(args.docs_dir, exist_ok=True)
    render(results, docs_dir=args.docs_dir, versus=args.versus)


if __name__ == "__main__":
    main()
