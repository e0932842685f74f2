"""Instructions per record, counted by valgrind's callgrind: CPU work that steal time and other tenants do not move.

On a shared machine the wall-clock rounds of one loop can spread by a third from one
round to the next; an instruction count does not. It is the measure for a change that
removes work per record (an allocation, a copy, a lock): run it before and after.

Usage::

    python bench/instructions.py                      # sink and alone, 100,000 records of 100 B
    python bench/instructions.py --modes sink,sink-position,alone --rows 100000 --size 100 --json out.json
    python bench/instructions.py --conf linger.ms=50 --env GLIBC_TUNABLES=glibc.malloc.tcache_count=1000

Steps (one broker of its own, devtools/kafka_broker.py):

1. For each mode, a child process runs under callgrind twice: once with no timed write, once
   with two writes of ``--rows`` records, after the same warm-up (10,000 records) and with the
   same input built first.
2. The difference of the two runs' totals, over the two writes' records, is the mode's
   instructions per record: every thread of the process (the caller, librdkafka's threads,
   the WAL's writes), split by shared object and by function.

What it does not count: the kernel's work (the WAL's ``write`` and ``fsync`` system calls,
page faults, the network), the broker, time spent waiting. Modes:

* ``sink``: ``write_partition`` in sync mode on the native engine (WAL write, produce with the
  ``rks-id`` header, ack tracking, prune), what a Python worker runs for a partition, its ids by content
  (fingerprint and occurrence: a partition after a shuffle);
* ``sink-position``: the same with ids by position, as a partition reading a Kafka range gets them;
* ``alone``: a plain confluent-kafka produce loop with a delivery callback per record.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import uuid
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench import common  # noqa: E402

MODES = ("sink", "sink-position", "alone")
CHILD_BOUND_S = 1800.0  # one child under callgrind: about 50 times its speed, plus Python's start


def _produce_alone(producer: Any, topic: str, batches: list[Any]) -> None:
    """A plain produce loop with a delivery callback per record, ``poll(0)`` per batch, ``flush()`` at the end.

    Raises:
        RuntimeError: a delivery failed or records were left unflushed.
    """
    failed: list[Any] = []

    def cb(err: Any, _msg: Any) -> None:
        if err is not None and not failed:
            failed.append(err)

    produce, poll = producer.produce, producer.poll
    for b in batches:
        for k, v in zip(b.column("key").to_pylist(), b.column("value").to_pylist()):
            while True:
                try:
                    produce(topic, v, k, on_delivery=cb)
                    break
                except BufferError:
                    poll(0.05)
        poll(0)
    left = producer.flush(600)
    if failed or left:
        raise RuntimeError(f"produce loop: {len(failed)} failed, {left} unflushed")


def _child(mode: str, repeat: int, rows: int, size: int, bootstrap: str, topic: str, wal_dir: str,
           conf: dict[str, str]) -> None:
    """What runs under callgrind: the input, a warm-up, then ``repeat`` writes of ``rows`` records."""
    batches = list(common.arrow_batches(rows, size))
    warm = list(common.arrow_batches(10_000, size))
    if mode in ("sink", "sink-position"):
        from spark_recoverable_sink.driver.split import BY_CONTENT, BY_POSITION, IdPlan
        from spark_recoverable_sink.task.writer import write_partitions

        def write_partition(cfg: Any, batch: int, p: int, attempt: int, rows: Any) -> Any:
            pos = mode == "sink-position"
            ids = IdPlan(BY_POSITION if pos else BY_CONTENT, (7,) if pos else ())
            return write_partitions(cfg, batch, p, attempt, rows, ids=ids)[0]

        from spark_recoverable_sink.config import SinkConfig

        cfg = SinkConfig.build(f"{topic}-{uuid.uuid4().hex[:4]}", {**common.producer_conf(bootstrap), **conf}, wal_dir,
                               topic=topic, ack_timeout_s=900.0, delivery_engine="native")
        write_partition(cfg, 0, 0, 0, iter(warm))
        for i in range(repeat):
            rep = write_partition(cfg, i + 1, 0, 0, iter(batches))
            if rep.acked != rows:
                raise RuntimeError(f"write_partition acked {rep.acked} of {rows}")
        return
    from confluent_kafka import Producer

    producer = Producer({**common.producer_conf(bootstrap), **conf})
    _produce_alone(producer, topic, warm)
    for _ in range(repeat):
        _produce_alone(producer, topic, batches)


def _annotate(path: str) -> tuple[int, collections.Counter, collections.Counter]:
    """A callgrind output's total, and its self cost by shared object and by function."""
    return parse_annotate(subprocess.run(["callgrind_annotate", "--threshold=100", path], capture_output=True,
                                         text=True, check=True, timeout=600).stdout)


def parse_annotate(out: str) -> tuple[int, collections.Counter, collections.Counter]:
    """``callgrind_annotate``'s text: the program's total, and the function list's self costs summed by shared object
    (its version hash dropped: ``librdkafka-1a2b3c4d.so.1`` is ``librdkafka.so.1``) and by function.

    Raises:
        ValueError: the text has no total or no function list.
    """
    m = re.search(r"([\d,]+) \(100.0%\)\s+PROGRAM TOTALS", out)
    if not m or not re.search(r"^Ir\s+file:function", out, re.M):
        raise ValueError("not callgrind_annotate's output: no program total or no function list")
    total = int(m.group(1).replace(",", ""))
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if re.match(r"Ir\s+file:function", line)) + 2
    objs: collections.Counter = collections.Counter()
    fns: collections.Counter = collections.Counter()
    for line in lines[start:]:
        if not line.strip():
            break
        row = re.match(r"\s*([\d,]+) \(\s*[\d.]+%\)\s+(.*)", line)
        if not row:
            continue
        n, rest = int(row.group(1).replace(",", "")), row.group(2)
        om = re.search(r"\[(.*?)\]\s*$", rest)
        obj = re.sub(r"-[0-9a-f]{8}(?=\.)", "", om.group(1).rsplit("/", 1)[-1]) if om else "?"
        objs[obj] += n
        fns[f"{rest.split(' [')[0].rsplit(':', 1)[-1]} ({obj})"] += n
    return total, objs, fns


def measure(mode: str, rows: int, size: int, bootstrap: str, topic: str, scratch: str, conf: dict[str, str],
            env: dict[str, str], top: int = 15) -> dict[str, Any]:
    """Step 1 and 2 for one mode: instructions per record, by object and by function (the ``top`` largest)."""
    runs = {}
    for repeat in (0, 2):
        out = os.path.join(scratch, f"callgrind.{mode}.{repeat}.out")
        cmd = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", sys.executable,
               os.path.abspath(__file__), "--child", json.dumps([mode, repeat, rows, size, bootstrap, topic,
                                                                os.path.join(scratch, f"wal-{mode}-{repeat}"), conf])]
        r = subprocess.run(cmd, env={**os.environ, **env}, capture_output=True, text=True, timeout=CHILD_BOUND_S)
        if r.returncode != 0:
            raise RuntimeError(f"{mode} (repeat {repeat}) exited {r.returncode}: {r.stderr[-2000:]}")
        runs[repeat] = _annotate(out)
    n = 2 * rows
    (t0, o0, f0), (t2, o2, f2) = runs[0], runs[2]
    by_obj = {k: round((v - o0.get(k, 0)) / n) for k, v in o2.items()}
    by_fn = {k: round((v - f0.get(k, 0)) / n) for k, v in f2.items()}
    return {"mode": mode, "rows": rows, "value_bytes": size, "conf": conf, "env": env,
            "per_record": round((t2 - t0) / n),
            "by_object": dict(sorted(by_obj.items(), key=lambda kv: -kv[1])[:top]),
            "by_function": dict(sorted(by_fn.items(), key=lambda kv: -kv[1])[:top])}


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--modes", default="sink,alone")
    ap.add_argument("--rows", type=int, default=100_000)
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--conf", action="append", default=[], help="producer option k=v, for every mode")
    ap.add_argument("--env", action="append", default=[], help="environment K=V of the measured processes")
    ap.add_argument("--json", help="write the results here")
    a = ap.parse_args()
    if a.child:
        _child(*json.loads(a.child))
        return
    from devtools.kafka_broker import KafkaBroker

    modes = [m for m in a.modes.split(",") if m]
    if unknown := set(modes) - set(MODES):
        ap.error(f"unknown modes {sorted(unknown)}; known: {', '.join(MODES)}")
    if not shutil.which("valgrind"):
        ap.error("valgrind is not installed")
    conf = dict(kv.split("=", 1) for kv in a.conf)
    env = dict(kv.split("=", 1) for kv in a.env)
    scratch = tempfile.mkdtemp(prefix="rks-instructions-")
    broker = KafkaBroker(os.path.join(scratch, "kafka")).start()
    try:
        topic = f"bench-instructions-{uuid.uuid4().hex[:6]}"
        common.create_topic(broker.bootstrap, topic, 4)
        results = []
        for mode in modes:
            r = measure(mode, a.rows, a.size, broker.bootstrap, topic, scratch, conf, env)
            results.append(r)
            print(f"{mode}: {r['per_record']:,} instructions per record ({a.size} B)", flush=True)
            for k, v in r["by_object"].items():
                print(f"    {v:7,}  {k}")
    finally:
        broker.stop()
        shutil.rmtree(scratch, ignore_errors=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
