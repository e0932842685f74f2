"""Benchmarks that run outside Spark, each in a fresh child process of ``bench/run.py``.

Usage: python bench/tasks.py TASK '<json arguments>'; prints one line ``RESULT <json>``.

Tasks:

* ``memory``       -- peak RSS (VmHWM) of a process running ``write_partition``
                      for one partition of N rows (the Python worker's job).
* ``orphan-write`` -- write N rows with ``ack_timeout_s=0`` (to a paused broker),
                      then ``os._exit``: every record is left unacked in the WAL.
* ``replay``       -- a fresh runtime adopts that slot; time until every
                      replayed record is acked (and until the WAL is empty).
* ``produce-cost`` -- µs per record of a plain produce loop with a delivery
                      callback per record (without and with an ``rks-id``-like
                      header) vs ``write_partition`` (WAL write + produce +
                      ack + prune) on the native and on the Python delivery
                      engine, same records, same broker.

Every sink here runs with an explicit ``delivery_engine`` (``engine`` in the
arguments, default ``"native"``, the sink's default where the extension
loads), recorded in the result.
* ``profile``      -- cProfile of ``write_partition`` for one partition: the
                      task thread and the publisher's poller thread.
"""

from __future__ import annotations

import cProfile
import io
import json
import os
import pstats
import sys
import threading
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench import common  # noqa: E402

SYNC_ACK_TIMEOUT_S = 900.0


def _config(a: dict[str, Any], ack_timeout_s: float, extra_conf: dict[str, str] | None = None,
            engine: str | None = None, name: str | None = None) -> Any:
    from spark_recoverable_sink.config import SinkConfig

    conf = common.producer_conf(a["bootstrap"])
    conf.update(extra_conf or {})
    return SinkConfig.build(name or a["name"], conf, a["wal_dir"], topic=a["topic"], ack_timeout_s=ack_timeout_s,
                            delivery_engine=engine or a.get("engine", "native"))


def _engine(cfg: Any) -> str:
    """The delivery engine ``cfg`` gets in this process (raises if ``native`` cannot load)."""
    from spark_recoverable_sink.delivery.engine import choose

    return choose(cfg)[0]


def _report_dict(r: Any) -> dict[str, Any]:
    return {k: getattr(r, k) for k in ("rows", "bytes", "acked", "pending", "retried", "dead_lettered", "replayed",
                                       "seconds")}


# -- memory ---------------------------------------------------------------------------------


def task_memory(a: dict[str, Any]) -> dict[str, Any]:
    from spark_recoverable_sink.task.runtime import get_runtime, reset_runtimes
    from spark_recoverable_sink.task.writer import write_partition

    cfg = _config(a, SYNC_ACK_TIMEOUT_S)
    base = common.proc_status()
    # Warm-up (10k rows): the runtime, the producer and the WAL slot exist before the measured partition.
    write_partition(cfg, 0, 0, 0, common.arrow_batches(10_000, a["value_bytes"]))
    warm = common.proc_status()
    t0 = time.monotonic()
    with common.PeakSampler() as anon:
        rep = write_partition(cfg, 1, 0, 0, common.arrow_batches(a["rows"], a["value_bytes"], start=10_000))
    secs = time.monotonic() - t0
    end = common.proc_status()
    with open("/proc/self/status") as f:
        rss_parts = {ln.split(":")[0]: int(ln.split()[1]) for ln in f if ln.startswith("Rss")}
    env = get_runtime(cfg).wal.env  # how much of the WAL's map has ever been used (its file-backed pages)
    map_used_kib = (env.info()["last_pgno"] + 1) * env.stat()["psize"] // 1024
    reset_runtimes()
    return {"rows": a["rows"], "value_bytes": a["value_bytes"], "engine": _engine(cfg), "seconds": secs,
            "rows_per_s": a["rows"] / secs,
            "baseline_rss_kib": base["VmRSS"], "warm_hwm_kib": warm["VmHWM"], "peak_hwm_kib": end["VmHWM"],
            "warm_anon_kib": warm.get("RssAnon", 0), "peak_anon_kib": anon.peak_anon_kib,
            "end_rss_kib": end["VmRSS"], "end_rss_parts_kib": rss_parts, "wal_map_used_kib": map_used_kib,
            "report": _report_dict(rep)}


# -- recovery -------------------------------------------------------------------------------


def task_orphan_write(a: dict[str, Any]) -> None:
    """Leave ``rows`` committed, unacked records in a WAL slot, then die without cleanup."""
    from spark_recoverable_sink.task.writer import write_partition

    # The broker is paused, so nothing is acked: the producer's local queue must
    # hold the whole partition (only for this writer; the replay uses the defaults).
    extra = {"queue.buffering.max.messages": str(a["rows"] + 100_000), "queue.buffering.max.kbytes": "2097151"}
    cfg = _config(a, 0.0, extra)
    t0 = time.monotonic()
    rep = write_partition(cfg, 1, 0, 0, common.arrow_batches(a["rows"], a["value_bytes"]))
    out = {"rows": a["rows"], "seconds": time.monotonic() - t0, "report": _report_dict(rep), "pid": os.getpid()}
    print("RESULT " + json.dumps(out), flush=True)
    os._exit(0)  # like a killed worker: no flush, no close, the slot lock goes with the process


def task_replay(a: dict[str, Any]) -> dict[str, Any]:
    from spark_recoverable_sink.task.runtime import get_runtime, reset_runtimes

    cfg = _config(a, SYNC_ACK_TIMEOUT_S)
    t0 = time.monotonic()
    rt = get_runtime(cfg)  # takes the free slot, recovers it: replays committed, unacked chunks
    replayed = rt.take_replayed()
    t_started = time.monotonic()
    deadline = t0 + a.get("timeout_s", 600.0)
    pub = rt.publisher
    while pub.in_flight() > 0 and time.monotonic() < deadline:
        time.sleep(0.005)
    t_acked = time.monotonic()
    while not rt.wal.is_empty() and time.monotonic() < deadline:
        time.sleep(0.01)
    t_empty = time.monotonic()
    stats = rt.wal.stats().as_dict()
    reset_runtimes()
    acked_s = t_acked - t0
    return {"replayed": replayed, "recover_and_produce_s": t_started - t0, "acked_s": acked_s,
            "wal_empty_s": t_empty - t0, "rows_per_s": replayed / acked_s if acked_s > 0 else None,
            "engine": _engine(cfg),
            "wal_after": stats, "timed_out": time.monotonic() >= deadline}


# -- produce cost ---------------------------------------------------------------------------


def _produce_alone(producer: Any, topic: str, batches: list[Any], id_header: bool = False,
                   callback: bool = True) -> float:
    """A plain produce loop with a delivery callback per record; seconds until every record is acked.

    With ``id_header`` each record also gets a header shaped like the sink's
    ``rks-id`` (``<prefix><16 hex digits>-<occurrence>``, built per record as
    confluent-kafka takes it: a one-entry dict), to tell the header's cost
    from the WAL's. Without ``callback`` no delivery report reaches Python (the cost of
    per-record reports; only ``flush()`` says whether all went).
    """
    failed: list[Any] = []
    acked = [0]

    def cb(err: Any, _msg: Any) -> None:
        if err is None:
            acked[0] += 1
        elif not failed:
            failed.append(err)

    produce, poll = producer.produce, producer.poll
    prefix, seq = b"bench-produce:0123456789abcdef:1:0:", 0
    t0 = time.perf_counter()
    for b in batches:
        keys = b.column("key").to_pylist()
        values = b.column("value").to_pylist()
        for k, v in zip(keys, values):
            while True:
                try:
                    if id_header:
                        produce(topic, v, k, on_delivery=cb, headers={"rks-id": b"%b%016x-0" % (prefix, seq)})
                    elif callback:
                        produce(topic, v, k, on_delivery=cb)
                    else:
                        produce(topic, v, k)
                    break
                except BufferError:
                    poll(0.05)
            seq += 1
        poll(0)
    left = producer.flush(600)
    secs = time.perf_counter() - t0
    if failed or left:
        raise RuntimeError(f"produce loop: {len(failed)} failed, {left} unflushed")
    return secs


def task_produce_cost(a: dict[str, Any]) -> dict[str, Any]:
    from confluent_kafka import Producer

    from spark_recoverable_sink.task.runtime import reset_runtimes
    from spark_recoverable_sink.task.writer import write_partition

    rows, size = a["rows"], a["value_bytes"]
    batches = list(common.arrow_batches(rows, size))
    producer = Producer(common.producer_conf(a["bootstrap"]))
    cfg = _config(a, SYNC_ACK_TIMEOUT_S, engine="native")
    cfg_py = _config(a, SYNC_ACK_TIMEOUT_S, engine="python", name=a["name"] + "-py")
    engines = {"sink": _engine(cfg), "sink_python": _engine(cfg_py)}
    # an untimed warm-up of every loop, a quarter of the rows: the broker's and the clients' first seconds are slow
    warm = list(common.arrow_batches(max(10_000, rows // 4), size))
    _produce_alone(producer, a["topic"], warm, callback=False)
    _produce_alone(producer, a["topic"], warm)
    _produce_alone(producer, a["topic"], warm, id_header=True)
    write_partition(cfg, 0, 0, 0, iter(warm))
    write_partition(cfg_py, 0, 0, 0, iter(warm))
    alone, header, sink, sink_py, no_dr = [], [], [], [], []
    for i in range(a["repeat"]):  # interleaved
        no_dr.append(_produce_alone(producer, a["topic"], batches, callback=False))
        alone.append(_produce_alone(producer, a["topic"], batches))
        header.append(_produce_alone(producer, a["topic"], batches, id_header=True))
        for c, out in ((cfg, sink), (cfg_py, sink_py)):
            t0 = time.perf_counter()
            rep = write_partition(c, i + 1, 0, 0, iter(batches))
            out.append(time.perf_counter() - t0)
            if rep.acked != rows:
                raise RuntimeError(f"write_partition ({c.delivery_engine} engine) acked {rep.acked} of {rows}")
    reset_runtimes()
    ma, mh, ms, mn = common.median(alone), common.median(header), common.median(sink), common.median(no_dr)
    mp = common.median(sink_py)
    # the sink against the loop beside it, round by round (both ran in the same round): its median and spread
    each = [x / y for x, y in zip(alone, sink)]
    return {"rows": rows, "value_bytes": size, "repeat": a["repeat"], "engines": engines, "produce_alone_s": alone,
            "produce_header_s": header, "sink_s": sink, "sink_python_s": sink_py, "produce_no_report_s": no_dr,
            "produce_no_report_us": mn / rows * 1e6,
            "produce_alone_us": ma / rows * 1e6, "produce_header_us": mh / rows * 1e6, "sink_us": ms / rows * 1e6,
            "sink_python_us": mp / rows * 1e6,
            "sink_overhead_us": (ms - ma) / rows * 1e6, "sink_vs_alone": common.median(each),
            "sink_vs_alone_each": each}


# -- profile --------------------------------------------------------------------------------


_THREAD_PROFILES: dict[str, cProfile.Profile] = {}


def _profile_new_threads() -> None:
    """Profile every thread started from now on (the publisher's poller thread among them)."""
    orig_run = threading.Thread.run

    def run(self: threading.Thread) -> None:
        # CPU time of this thread: wall time would count the time it sits blocked
        # on the publisher's lock or in poll() waiting for broker responses.
        prof = cProfile.Profile(time.thread_time)
        _THREAD_PROFILES[self.name] = prof
        prof.enable()
        try:
            orig_run(self)
        finally:
            prof.disable()

    threading.Thread.run = run  # type: ignore[method-assign]


def _short(path: str) -> str:
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + "/"
    if path.startswith(repo):
        return path[len(repo):]
    for marker in ("site-packages/", f"lib/python{sys.version_info[0]}.{sys.version_info[1]}/"):
        if marker in path:
            return path.split(marker, 1)[1]
    return path


def _top(prof: cProfile.Profile, key: str, n: int, rows: int) -> list[dict[str, Any]]:
    st = pstats.Stats(prof, stream=io.StringIO())
    out = []
    items = sorted(st.stats.items(), key=lambda kv: kv[1][3 if key == "cumulative" else 2], reverse=True)  # type: ignore[attr-defined]
    for (file, line, func), (cc, nc, tt, ct, _callers) in items[:n]:
        where = func if file == "~" else f"{_short(file)}:{line}({func})"
        out.append({"function": where, "ncalls": nc, "tottime_s": round(tt, 4), "cumtime_s": round(ct, 4),
                    "self_us_per_record": round(tt / rows * 1e6, 4), "cum_us_per_record": round(ct / rows * 1e6, 4)})
    return out


def task_profile(a: dict[str, Any]) -> dict[str, Any]:
    from spark_recoverable_sink.task.runtime import reset_runtimes
    from spark_recoverable_sink.task.writer import write_partition

    rows, size, top = a["rows"], a["value_bytes"], a.get("top", 15)
    warm_rows = 10_000
    _profile_new_threads()
    cfg = _config(a, SYNC_ACK_TIMEOUT_S)
    batches = list(common.arrow_batches(rows, size))
    write_partition(cfg, 0, 0, 0, common.arrow_batches(warm_rows, size))  # warm-up: runtime, producer, slot
    main = cProfile.Profile()
    t0 = time.perf_counter()
    main.enable()
    rep = write_partition(cfg, 1, 0, 0, iter(batches))
    main.disable()
    prof_s = time.perf_counter() - t0
    reset_runtimes()  # stops the poller thread, which ends its profile
    out: dict[str, Any] = {
        "rows": rows, "value_bytes": size, "engine": _engine(cfg), "profiled_s": prof_s, "acked": rep.acked,
        "threads": {"task": {"cumulative": _top(main, "cumulative", top, rows), "self": _top(main, "self", top, rows),
                             "note": f"The task thread during write_partition of {rows} rows; wall time"}},
    }
    for name, prof in _THREAD_PROFILES.items():
        if name.startswith("rks-poller"):
            n = rows + warm_rows
            out["threads"]["poller"] = {"cumulative": _top(prof, "cumulative", top, n),
                                        "self": _top(prof, "self", top, n),
                                        "note": f"The poller thread's whole life: {warm_rows} warm-up rows + "
                                                f"{rows} rows; per-record figures divide by {n}; times are this thread's CPU "
                                                "time (time.thread_time), not wall time"}
    return out


TASKS = {"memory": task_memory, "orphan-write": task_orphan_write, "replay": task_replay,
         "produce-cost": task_produce_cost, "profile": task_profile}


def main() -> None:
    import logging

    logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    task, args = sys.argv[1], json.loads(sys.argv[2])
    res = TASKS[task](args)
    print("RESULT " + json.dumps(res), flush=True)


if __name__ == "__main__":
    main()
