"""Section 3 of docs/PERFORMANCE.md: how cost grows with Spark partitions (local mode and local-cluster)."""

from __future__ import annotations

from typing import Any

from bench.render_md import EXACTLY, LABELS, _err, _f, _ok, _table
from bench.targets import SCALE_HI, SCALE_LO


def _scaling_section_md(w: Any, results: dict[str, Any]) -> None:
    """Section 3: its heading, then the scaling figures or the section's failure."""
    w("## 3. How cost grows with Spark partitions\n")
    sc = results.get("scaling")
    if _ok(sc):
        w(_scaling_md(results, sc))
    else:
        w(_err(sc))


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
