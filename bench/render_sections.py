"""The measured sections of docs/PERFORMANCE.md (but 1 and 3: bench/render_throughput.py, bench/render_scaling.py).

Latency, the WAL's cost, worker memory, recovery, the profile, Schema Registry formats,
exactly-once, versions side by side, how to run it. Each builder appends its lines through ``w``.
"""

from __future__ import annotations

import json
import os
from typing import Any

from bench.render_md import ASYNC, EXACTLY, LABELS, NOOP, SYNC, _engines_text, _err, _f, _ok, _table
from bench.rounds import paired, spread, spread_text
from bench.targets import lat_row as _lat
from bench.targets import tp_row as _tp

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _latency_md(w: Any, results: dict[str, Any]) -> None:
    """Section 2: micro-batch latency per writer."""
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


def _wal_md(w: Any, results: dict[str, Any]) -> None:
    """Section 4: the WAL's own cost per record, and the whole path against the broker outside Spark."""
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
          "the Python engine; an untimed warm-up of each (a quarter of the rows), then interleaved rounds, medians; "
          "the last column is the ratio within each round, its median and spread:\n")
        rows = []
        for r in wal["produce_vs_sink"]:
            rows.append([str(r["value_bytes"]), _f(r["rows"]), _f(r.get("produce_no_report_us"), "{:.2f}"),
                         _f(r["produce_alone_us"], "{:.2f}"),
                         _f(r.get("produce_header_us"), "{:.2f}"), _f(r["sink_us"], "{:.2f}"),
                         _f(r.get("sink_python_us"), "{:.2f}"),
                         _f(r["sink_overhead_us"], "{:+.2f}"), _ratio_spread(r)])
        w(_table(["value B", "records", "produce, no reports µs/rec", "produce alone µs/rec",
                  "… + rks-id header µs/rec", "sink path, native µs/rec", "sink path, Python engine µs/rec",
                  "sink (native) − produce alone µs/rec", "sink (native) ÷ produce-alone speed"], rows) + "\n")
        w("\"No reports\" is the same loop without a delivery callback (what a delivery report per record costs); "
          "the header column is the plain loop plus a header built like the sink's `rks-id`, to separate "
          "the cost of the header from the cost of the WAL and the ack tracking.\n")
    else:
        w(_err(wal))


def _ratio_spread(r: dict[str, Any]) -> str:
    """The sink ÷ produce-alone speed: the median of the rounds' ratios and their spread (a run before the rounds
    were kept: the ratio of the medians)."""
    each = r.get("sink_vs_alone_each")
    return spread_text(spread(each)) if each else _f(r["sink_vs_alone"], "{:.2f}")


def _memory_md(w: Any, results: dict[str, Any]) -> None:
    """Section 5: Python worker peak memory."""
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


def _recovery_md(w: Any, results: dict[str, Any]) -> None:
    """Section 6: replay of orphaned records."""
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


def _profile_md(w: Any, results: dict[str, Any]) -> None:
    """Section 7: where the sink's time goes (cProfile)."""
    w("## 7. Where the sink's time goes\n")
    prof = results.get("profile")
    if _ok(prof):
        w(f"cProfile of `write_partition` for one partition of {prof['rows']:,} records of "
          f"{prof['value_bytes']} B, sync mode, {prof.get('engine', 'native')} engine, outside Spark ({prof['profiled_s']:.2f} s under the profiler, "
          "which inflates Python-level calls). The publisher's poller thread is profiled separately. "
          "µs/record = time ÷ records.\n")
        for thread, th in prof["threads"].items():
            busy = max((x["cumtime_s"] for x in th["cumulative"]), default=0.0)
            if busy < 0.01 * prof["profiled_s"]:  # in sync mode the task thread polls: the poller has nothing to do
                w(f"The {thread} thread used {busy:.3f} s in all (under 1 % of the task thread's time: in sync "
                  "mode the task thread polls the producer itself); its profile is left out.\n")
                continue
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


def _exactly_once_md(w: Any, results: dict[str, Any]) -> None:
    """Sink exactly-once against sync, per value size."""
    w("## Sink exactly-once\n")
    rows = []
    for size in ((results.get("throughput") or {}).get("sizes") or []):
        e, y = _tp(results, EXACTLY, size), _tp(results, SYNC, size)
        if e and y and y.get("rows_per_s"):
            ratios = paired((results.get("throughput") or {}).get("runs") or [], EXACTLY, SYNC, size)
            rows.append([f"{size} B", spread_text(e.get("rows_per_s_spread"), "{:,.0f}", rounds=False)
                         if e.get("rows_per_s_spread") else f"{e['rows_per_s']:,.0f}",
                         spread_text(y.get("rows_per_s_spread"), "{:,.0f}", rounds=False)
                         if y.get("rows_per_s_spread") else f"{y['rows_per_s']:,.0f}",
                         spread_text(spread(ratios), "{:.2f}", rounds=False) + " ×"])
    if rows:
        w("One Kafka transaction per batch and lane (`exactly_once_lanes`), each committed before its lane's "
          "task returns, and a batch ends once every lane has: when `write()` returns, every record is visible "
          "to read_committed consumers (time to visible = batch time). Medians with the rounds' range; the "
          "ratio is taken round by round.\n")
        w(_table(["values", "exactly-once rows/s", "at-least-once sync rows/s", "ratio"], rows) + "\n")
    else:
        w("**Not measured in this run.**\n")


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


def _running_md(w: Any, results: dict[str, Any]) -> None:
    """How to run the benchmark, and this run's parameters."""
    meta = results["meta"]
    mode = meta["mode"]
    p = meta.get("params", {})
    w("## Running it\n")
    w("""```sh
make bench-quick   # .venv/bin/python bench/run.py --quick   (a few minutes; checks every section works)
make bench         # .venv/bin/python bench/run.py           (the measured run, about 80 minutes; a quiet machine)
python bench/render.py [bench/results/<timestamp>.json] [--docs-dir DIR]   # re-render this page and the charts
python bench/wal_cost.py --rows 1000000                      # the WAL cost alone
python bench/commits.py --version a=<commit> --version b=installed   # versions of the package side by side
python bench/instructions.py --modes sink,alone                    # instructions per record (callgrind): CPU work steal time does not move
python bench/threads.py --rows 2000000 --rounds 5 --jfr            # both sinks thread by thread (section 10 alone)
```

`bench/run.py --only throughput,latency,scaling,wal,memory,recovery,profile` runs a subset; `--rows`,
`--rounds`, `--partitions`, `--cores` override sizes; `--scaling-partitions 4,64` and `--no-cluster`
shape the scaling section; `--docs-dir DIR` renders somewhere else than docs/. Each run writes
`bench/results/<timestamp>.json` and `bench/results/latest.json`, which this page is rendered from.
""")
    w(f"Parameters of this run ({mode}): " + ", ".join(f"`{k}={v}`" for k, v in p.items()) + ".\n")
