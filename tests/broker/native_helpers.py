"""Helpers the native producer's broker tests share (test_native_producer.py, test_native_producer_transactions.py).

A producer conf for the test broker, a fresh topic, a conf naming a port
nothing listens on, and polling until a count of delivery reports is in.
"""

from __future__ import annotations

import time
import uuid

from devtools.kafka_broker import free_port
from spark_recoverable_sink.native.producer import Producer

from ..kafka_helpers import create_topic


def conf(broker, **extra):
    return {"bootstrap.servers": broker.bootstrap, "enable.idempotence": True, "acks": "all", "linger.ms": 5,
            **extra}


def new_topic(broker, partitions: int = 3) -> str:
    name = f"native-{uuid.uuid4().hex[:10]}"
    create_topic(broker.bootstrap, name, partitions)
    return name


def unreachable(**extra) -> dict:
    return {"bootstrap.servers": f"127.0.0.1:{free_port()}", **extra}  # nothing listens there


def drain(p: Producer, produced: int, timeout_s: float = 30.0) -> dict[int, dict]:
    """Poll until ``produced`` delivery reports are in; per round: acked, reported, failures."""
    out: dict[int, dict] = {}
    total, end = 0, time.monotonic() + timeout_s
    while total < produced and time.monotonic() < end:
        p.poll(0.05)
        for rid, acked, reported, fails in p.take_results():
            r = out.setdefault(rid, {"acked": 0, "reported": 0, "failures": []})
            r["acked"] += acked
            r["reported"] += reported
            r["failures"] += fails
            total += reported
    return out
