"""The throughput section of the Spark benchmarks: a batch write of cached rows, per writer and value size.

Per value size: an untimed warm-up round (every writer writes ``warm_rows``
cached rows once: the broker's first writes, each writer's first job and
connections), then ``rounds`` timed rounds, interleaved (round k of every
writer before round k+1), the writers' order rotated by ``k × writers ÷
rounds`` places each round so that every writer takes early and late places.
Around each timed write, outside its window: the broker's produce counters
(bench/broker_watch.py), the topic deleted and its files waited for. In
it: CPU seconds of the process tree and of the whole machine (bench/cpu.py).
Medians with their spread, ratios to raw and the flush-writer, the
read-back check (:func:`throughput`; the summary: bench/tp_summary.py).
"""

from __future__ import annotations

import os
import time
import uuid
from typing import Any

from . import common
from .broker_watch import JMX_ENV, RequestCounters, request_figures
from .cpu import CpuMeter
from .spark_bench import ASYNC, NOOP, kafka_columns, log
from .spark_target import make_target
from .tp_summary import summarize_throughput


def cached_sizes(spark: Any) -> dict[str, int]:
    """Bytes of cached data in memory and on disk (a cache that spilled to disk is partly re-read)."""
    mem = disk = 0
    for info in spark.sparkContext._jsc.sc().getRDDStorageInfo():
        mem += info.memSize()
        disk += info.diskSize()
    return {"memory_bytes": mem, "disk_bytes": disk}


def rotated(writers: tuple[str, ...], rnd: int, rounds: int) -> tuple[str, ...]:
    """The writers' order of round ``rnd``: rotated by ``rnd × len ÷ rounds`` places (spread over the rounds)."""
    k = (rnd * len(writers)) // max(1, rounds) % max(1, len(writers))
    return writers[k:] + writers[:k]


def _cache(spark: Any, rows: int, size: int, partitions: int, tag: str) -> tuple[Any, dict[str, int]]:
    df = kafka_columns(spark.range(0, rows, 1, partitions), "id", size).cache()
    t = time.monotonic()
    assert df.count() == rows
    sizes = cached_sizes(spark)
    log(f"{tag}: {rows} rows of {size} B cached in {time.monotonic() - t:.1f}s "
        f"({df.rdd.getNumPartitions()} partitions, {sizes['memory_bytes'] / 2**20:.0f} MiB in memory, "
        f"{sizes['disk_bytes'] / 2**20:.0f} MiB on disk)")
    if sizes["disk_bytes"]:
        log(f"{tag}: WARNING part of the cached data spilled to disk: raise --driver-memory")
    return df, sizes


def throughput(spark: Any, bootstrap: str, *, rows_by_size: dict[int, int], partitions: int, topic_partitions: int,
               rounds: int, writers: tuple[str, ...], scratch: str, verify: bool, cpu_root: int | None = None,
               tag: str = "throughput", warm_rows: int | None = None, jmx_url: str | None = None) -> dict[str, Any]:
    """Per writer and value size: ``rounds`` timed batch writes of cached rows, after an untimed warm-up round.

    ``cpu_root``: the process whose tree the CPU seconds are summed over
    (default this one; a child running its own Spark passes the bench
    process, which also runs the broker). ``warm_rows``: rows of the warm-up
    round (default a quarter of the timed rows, at least 10,000; 0: none).
    ``jmx_url``: the broker's JMX (default the section broker's, from the environment).
    """
    uid = uuid.uuid4().hex[:6]
    runs: list[dict[str, Any]] = []
    warmups: list[dict[str, Any]] = []
    engines: dict[str, Any] = {}
    sizes = list(rows_by_size)
    cache: dict[int, dict[str, int]] = {}
    counters = RequestCounters(spark._jvm, jmx_url or os.environ.get(JMX_ENV))
    ctx = {"spark": spark, "bootstrap": bootstrap, "partitions": partitions, "topic_partitions": topic_partitions,
           "wal_dir": os.path.join(scratch, "wal"), "engines": engines, "cpu_root": cpu_root, "counters": counters,
           "tag": tag, "verify": verify}
    for size in sizes:
        rows = rows_by_size[size]
        wr = max(10_000, rows // 4) if warm_rows is None else min(warm_rows, rows)
        if wr:
            wdf, _ = _cache(spark, wr, size, partitions, f"{tag} warm-up")
            for writer in writers:
                tw = time.monotonic()
                _one(ctx, writer, size, "w", wdf, wr, timed=False, name=f"bench-{writer}-{size}-w-{uid}")
                warmups.append({"writer": writer, "value_bytes": size, "rows": wr, "seconds": time.monotonic() - tw})
            wdf.unpersist()
            log(f"{tag}: {size} B warm-up round done ({wr} rows per writer, untimed)")
        df, cache[size] = _cache(spark, rows, size, partitions, tag)
        payload = rows * size + _key_bytes(rows)
        for rnd in range(rounds):
            for writer in rotated(writers, rnd, rounds):
                run = _one(ctx, writer, size, rnd, df, rows, timed=True, name=f"bench-{writer}-{size}-{rnd}-{uid}")
                run["payload_bytes"] = payload
                runs.append(run)
        df.unpersist()
    return {"rows_by_size": {str(k): v for k, v in rows_by_size.items()}, "partitions": partitions,
            "topic_partitions": topic_partitions, "rounds": rounds, "sizes": sizes, "cache": cache, "runs": runs,
            "warmup": warmups, "order": "rotated by round × writers ÷ rounds places",
            "broker_counters": None if counters.error is None else {"error": counters.error},
            "engines": engines, "summary": summarize_throughput(runs, writers, sizes)}


def _one(ctx: dict[str, Any], writer: str, size: int, rnd: Any, df: Any, rows: int, *, timed: bool,
         name: str) -> dict[str, Any]:
    """One write of ``df`` by ``writer`` to a fresh topic (deleted after, its files waited for); timed or not."""
    spark, bootstrap, partitions, tag = ctx["spark"], ctx["bootstrap"], ctx["partitions"], ctx["tag"]
    common.create_topic(bootstrap, name, ctx["topic_partitions"])
    tg = make_target(writer, bootstrap, name, ctx["wal_dir"], name)
    run: dict[str, Any] = {"writer": writer, "value_bytes": size, "round": rnd, "rows": rows}
    try:
        if writer not in ctx["engines"] and tg.sink is not None:
            ctx["engines"][writer] = tg.engine_check(spark, partitions)
        tw = time.monotonic()
        tg.warm_up(spark, partitions, size)
        if time.monotonic() - tw > 15:
            log(f"{tag}: {writer} warm-up took {time.monotonic() - tw:.1f}s")
        before = ctx["counters"].read(name) if timed else None
        cpu = CpuMeter(ctx["cpu_root"]).start()
        t0 = time.monotonic()
        rep = tg.write(df, batch_id=1)
        t1 = time.monotonic()
        durable = None
        if writer == ASYNC:
            end = tg.wait_durable(600.0)
            durable = None if end is None else end - t0
        cpu_s = cpu.stop()  # the whole process tree (JVM, Python workers, broker), until durable
        if not timed:
            return run
        after = ctx["counters"].read(name)
        run.update(seconds=t1 - t0, durable_seconds=durable, report=rep, cpu_s=cpu_s, cpu_split=cpu.split,
                   machine_cpu=cpu.machine, requests=request_figures(before, after, t1 - t0))
        if ctx["verify"] and rnd == 0 and writer != NOOP:
            _read_back(ctx, run, name, rows)
        extra = f" durable {durable:.2f}s" if durable is not None else ""
        log(f"{tag}: {writer:12s} {size:5d} B round {rnd}: {t1 - t0:.2f}s = {rows / (t1 - t0):,.0f} rows/s{extra}"
            + (f" read back {run['read_back']}" if "read_back" in run else ""))
        return run
    finally:
        run["files_gone_s"] = common.delete_topic(bootstrap, name)


def _read_back(ctx: dict[str, Any], run: dict[str, Any], topic: str, rows: int) -> None:
    """Count the topic (the timed rows + the warm-up task's): ``read_back`` and ``read_back_ok`` in ``run``."""
    bootstrap, warm = ctx["bootstrap"], 10 * ctx["partitions"]
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
        log(f"{ctx['tag']}: {run['writer']} {run['value_bytes']} B: read back {n - warm} of {rows} rows "
            f"(+{warm} warm-up rows); a second count found {n2 - warm}, read_uncommitted {n3 - warm}")


def _key_bytes(rows: int) -> int:
    """Bytes of the keys 0..rows-1 as decimal text."""
    total, lo, digits = 0, 0, 1
    while lo < rows:
        hi = min(rows, 10 ** digits)
        total += (hi - lo) * digits
        lo, digits = hi, digits + 1
    return total
