"""The throughput section of the Spark benchmarks: a batch write of cached rows, per writer and value size.

Interleaved rounds, medians, ratios to raw and the flush-writer, CPU seconds
per million rows, and the read-back check (:func:`throughput`,
:func:`summarize_throughput`).
"""

from __future__ import annotations

import os
import time
import uuid
from typing import Any

from . import common
from .cpu import CpuMeter
from .spark_bench import ASYNC, FLUSH, LABELS, NOOP, RAW, kafka_columns, log
from .spark_target import make_target


def cached_sizes(spark: Any) -> dict[str, int]:
    """Bytes of cached data in memory and on disk (a cache that spilled to disk is partly re-read)."""
    mem = disk = 0
    for info in spark.sparkContext._jsc.sc().getRDDStorageInfo():
        mem += info.memSize()
        disk += info.diskSize()
    return {"memory_bytes": mem, "disk_bytes": disk}


def throughput(spark: Any, bootstrap: str, *, rows_by_size: dict[int, int], partitions: int, topic_partitions: int,
               rounds: int, writers: tuple[str, ...], scratch: str, verify: bool, cpu_root: int | None = None,
               tag: str = "throughput") -> dict[str, Any]:
    """Median time of a batch write of cached rows, per writer and value size.

    ``cpu_root``: the process whose tree the CPU seconds are summed over
    (default this one; a child running its own Spark passes the bench
    process, which also runs the broker).
    """
    uid = uuid.uuid4().hex[:6]
    runs: list[dict[str, Any]] = []
    engines: dict[str, Any] = {}
    sizes = list(rows_by_size)
    cache: dict[int, dict[str, int]] = {}
    for size in sizes:
        rows = rows_by_size[size]
        df = kafka_columns(spark.range(0, rows, 1, partitions), "id", size).cache()
        t = time.monotonic()
        assert df.count() == rows
        cache[size] = cached_sizes(spark)
        log(f"{tag}: {rows} rows of {size} B cached in {time.monotonic() - t:.1f}s "
            f"({df.rdd.getNumPartitions()} partitions, {cache[size]['memory_bytes'] / 2**20:.0f} MiB in memory, "
            f"{cache[size]['disk_bytes'] / 2**20:.0f} MiB on disk)")
        if cache[size]["disk_bytes"]:
            log(f"{tag}: WARNING part of the cached data spilled to disk: raise --driver-memory")
        payload = rows * size + _key_bytes(rows)
        for rnd in range(rounds):
            order = writers[rnd % len(writers):] + writers[:rnd % len(writers)]  # rotate: no writer always first
            for writer in order:
                name = f"bench-{writer}-{size}-{rnd}-{uid}"
                topic = name
                common.create_topic(bootstrap, topic, topic_partitions)
                wal_dir = os.path.join(scratch, "wal")
                tg = make_target(writer, bootstrap, topic, wal_dir, name)
                try:
                    if writer not in engines and tg.sink is not None:
                        engines[writer] = tg.engine_check(spark, partitions)
                    tw = time.monotonic()
                    tg.warm_up(spark, partitions, size)
                    t0 = time.monotonic()
                    if t0 - tw > 15:
                        log(f"{tag}: {writer} warm-up took {t0 - tw:.1f}s")
                    cpu = CpuMeter(cpu_root).start()
                    rep = tg.write(df, batch_id=1)
                    t1 = time.monotonic()
                    durable = None
                    if writer == ASYNC:
                        end = tg.wait_durable(600.0)
                        durable = None if end is None else end - t0
                    cpu_s = cpu.stop()  # the whole process tree (JVM, Python workers, broker), until durable
                    run = {"writer": writer, "value_bytes": size, "round": rnd, "rows": rows, "payload_bytes": payload,
                           "seconds": t1 - t0, "durable_seconds": durable, "report": rep, "cpu_s": cpu_s,
                           "cpu_split": cpu.split}
                    if verify and rnd == 0 and writer != NOOP:
                        warm = 10 * partitions
                        tv = time.monotonic()
                        n = common.count_topic(bootstrap, topic, rows + warm)
                        run["read_back_s"] = time.monotonic() - tv
                        run["read_back"] = n - warm
                        run["read_back_ok"] = n >= rows + warm
                        if not run["read_back_ok"]:
                            # Tell a flaky read from records really missing: count again.
                            n2 = common.count_topic(bootstrap, topic, rows + warm)
                            run["read_back_again"] = n2 - warm
                            # ... and what a reader that also sees uncommitted records finds
                            n3 = common.count_topic(bootstrap, topic, rows + warm, isolation="read_uncommitted")
                            run["read_back_uncommitted"] = n3 - warm
                            log(f"{tag}: {writer} {size} B: read back {n - warm} of {rows} rows "
                                f"(+{warm} warm-up rows); a second count found {n2 - warm}, "
                                f"read_uncommitted {n3 - warm}")
                    runs.append(run)
                    extra = f" durable {durable:.2f}s" if durable is not None else ""
                    log(f"{tag}: {writer:12s} {size:5d} B round {rnd}: {t1 - t0:.2f}s "
                        f"= {rows / (t1 - t0):,.0f} rows/s{extra}" +
                        (f" read back {run['read_back']}" if "read_back" in run else ""))
                finally:
                    common.delete_topic(bootstrap, topic)
        df.unpersist()
    return {"rows_by_size": {str(k): v for k, v in rows_by_size.items()}, "partitions": partitions,
            "topic_partitions": topic_partitions, "rounds": rounds, "sizes": sizes, "cache": cache, "runs": runs,
            "engines": engines, "summary": summarize_throughput(runs, writers, sizes)}


def _key_bytes(rows: int) -> int:
    """Bytes of the keys 0..rows-1 as decimal text."""
    total, lo, digits = 0, 0, 1
    while lo < rows:
        hi = min(rows, 10 ** digits)
        total += (hi - lo) * digits
        lo, digits = hi, digits + 1
    return total


def _cpu_per_million(rs: list[dict[str, Any]]) -> float | None:
    """Median CPU seconds (all processes) per million rows of these runs."""
    per = [r["cpu_s"] / r["rows"] * 1e6 for r in rs if r.get("cpu_s") is not None]
    return common.median(per) if per else None


def _cpu_split_per_million(rs: list[dict[str, Any]]) -> dict[str, float] | None:
    """Per kind of process (Spark's JVM, Python, broker): median CPU seconds per million rows of these runs."""
    splits = [(r["cpu_split"], r["rows"]) for r in rs if r.get("cpu_split")]
    if not splits:
        return None
    return {k: round(common.median([sp[k] / rows * 1e6 for sp, rows in splits]), 3) for k in splits[0][0]}


def summarize_throughput(runs: list[dict[str, Any]], writers: tuple[str, ...], sizes: list[int]) -> list[dict[str, Any]]:
    out = []
    for size in sizes:
        med: dict[str, float] = {}
        for w in writers:
            secs = [r["seconds"] for r in runs if r["writer"] == w and r["value_bytes"] == size]
            if secs:
                med[w] = common.median(secs)
        for w in writers:
            rs = [r for r in runs if r["writer"] == w and r["value_bytes"] == size]
            if not rs:
                continue
            rows, payload = rs[0]["rows"], rs[0]["payload_bytes"]
            m = med[w]
            row: dict[str, Any] = {
                "writer": w, "rows": rows, "label": LABELS[w], "value_bytes": size, "runs": len(rs), "median_s": m,
                "min_s": min(r["seconds"] for r in rs), "max_s": max(r["seconds"] for r in rs),
                "rows_per_s": rows / m, "mb_per_s": payload / m / 1e6,
                "vs_raw": (med[RAW] / m) if RAW in med else None,
                "vs_flush": (med[FLUSH] / m) if FLUSH in med else None,
                "cpu_s_per_million": _cpu_per_million(rs),
                "cpu_split_per_million": _cpu_split_per_million(rs),
                "tasks": rs[0]["report"].get("tasks"),
                "workers": max((r["report"].get("workers") or 0) for r in rs) or None,
            }
            flush_cpu = _cpu_per_million([r for r in runs if r["writer"] == FLUSH and r["value_bytes"] == size])
            row["cpu_vs_flush"] = (row["cpu_s_per_million"] / flush_cpu
                                   if row["cpu_s_per_million"] is not None and flush_cpu else None)
            if w == ASYNC:
                ds = [r["durable_seconds"] for r in rs if r["durable_seconds"] is not None]
                dm = common.median(ds)
                row["durable_median_s"] = dm
                row["durable_rows_per_s"] = rows / dm if dm else None
                row["durable_vs_raw"] = (med[RAW] / dm) if (RAW in med and dm) else None
                row["durable_vs_flush"] = (med[FLUSH] / dm) if (FLUSH in med and dm) else None
                acked = [r["report"]["acked"] / r["rows"] for r in rs if r["report"].get("acked") is not None]
                row["acked_at_task_end"] = common.median(acked)
            checks = [r for r in rs if "read_back" in r]
            if checks:
                row["read_back_ok"] = all(r["read_back_ok"] for r in checks)
                bad = [r for r in checks if not r["read_back_ok"]]
                if bad:
                    row["read_back_text"] = "; ".join(
                        f"{r['read_back']:,} of {r['rows']:,} read back"
                        + (f", {r['read_back_again']:,} on a second read" if "read_back_again" in r else "")
                        + (f", {r['read_back_uncommitted']:,} read_uncommitted" if "read_back_uncommitted" in r
                           else "")
                        for r in bad)
            out.append(row)
    return out
