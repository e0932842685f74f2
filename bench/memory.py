"""The memory section: peak memory of a process writing one partition through the sink, as a Python worker does.

Usage (bench/run.py runs it, one fresh child process per size):
``python bench/memory.py '{"bootstrap": ..., "topic": ..., "rows": N, "wal_dir": ...}'``;
prints one line ``RESULT <json>``. The process runs ``write_partition``
(sync, native engine, 100 B values) for 10,000 warm-up rows, then for
``rows`` rows, sampling its anonymous memory (``RssAnon``, which the kernel
keeps no peak of) every 50 ms; its peak resident set (``VmHWM``) also counts
the WAL's file-backed pages.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench import common  # noqa: E402


def measure(a: dict[str, Any]) -> dict[str, Any]:
    """One partition of ``a["rows"]`` rows after a warm-up; the process's memory and the rate.

    Raises:
        RuntimeError: the sink acked fewer records than it was given.
    """
    from spark_recoverable_sink.config import SinkConfig
    from spark_recoverable_sink.task.runtime import reset_runtimes
    from spark_recoverable_sink.task.writer import write_partition

    cfg = SinkConfig.build(a["topic"], common.producer_conf(a["bootstrap"]), a["wal_dir"], topic=a["topic"],
                           ack_timeout_s=900.0, delivery_engine="native")
    write_partition(cfg, 0, 0, 0, common.arrow_batches(10_000, 100))
    warm = common.proc_status()
    peak, done = [warm.get("RssAnon", 0)], threading.Event()

    def sample() -> None:
        while not done.wait(0.05):
            peak[0] = max(peak[0], common.proc_status().get("RssAnon", 0))

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    t0 = time.monotonic()
    rep = write_partition(cfg, 1, 0, 0, common.arrow_batches(a["rows"], 100, start=10_000))
    secs = time.monotonic() - t0
    done.set()
    sampler.join()
    end = common.proc_status()
    reset_runtimes()
    if rep.acked != a["rows"]:
        raise RuntimeError(f"acked {rep.acked} of {a['rows']} records")
    return {"rows": a["rows"], "value_bytes": 100, "seconds": secs, "rows_per_s": a["rows"] / secs,
            "warm_hwm_kib": warm["VmHWM"], "peak_hwm_kib": end["VmHWM"], "warm_anon_kib": warm.get("RssAnon", 0),
            "peak_anon_kib": max(peak[0], end.get("RssAnon", 0)), "end_rss_kib": end["VmRSS"]}


if __name__ == "__main__":
    print("RESULT " + json.dumps(measure(json.loads(sys.argv[1]))), flush=True)
