"""Tier 2: the native producer (:mod:`spark_recoverable_sink.native.producer`) against the real test broker.

Per-row failures come back with their exact row numbers, synchronously or in
the round's delivery reports; a full client queue is waited on for at most
``block_s`` per call; librdkafka's callbacks reach Python on the calling
thread; ids formatted in C are byte for byte those
:mod:`spark_recoverable_sink.ids` builds with Arrow kernels. Records are read
back from the broker and checked. Transactions: test_native_producer_transactions.py.
"""

from __future__ import annotations

import json
import threading
import time
import uuid

import numpy as np
import pyarrow as pa
import pytest

from spark_recoverable_sink.ids import (
    CONTENT,
    KEY,
    POSITION,
    id_fields,
    record_id_at,
    record_ids,
    scheme_for,
    with_ids,
)
from spark_recoverable_sink.native import library
from spark_recoverable_sink.native.producer import Producer
from spark_recoverable_sink.schema import HEADERS_TYPE

from ..kafka_helpers import read_topic
from .native_helpers import conf, drain, new_topic, unreachable

pytestmark = [pytest.mark.broker,
              pytest.mark.skipif(not library.available(),
                                 reason=f"native extension not built: {library.why_unavailable()}")]

UNKNOWN_PARTITION, QUEUE_FULL, MSG_SIZE_TOO_LARGE = -190, -184, 10
PURGED = {-152, -151}  # _PURGE_QUEUE, _PURGE_INFLIGHT


def test_per_row_failures_come_back_with_their_exact_rows(broker):
    ta, tb = new_topic(broker), new_topic(broker)
    n, bad = 400, {11, 250}
    topics = [tb if i % 3 == 0 else None if i % 3 == 1 else ta for i in range(n)]  # None: the default topic
    parts = [7 if i in bad else None if i % 4 == 3 else i % 3 for i in range(n)]  # partition 7 does not exist
    p = Producer(conf(broker))
    produced, sync = p.produce_chunk(
        5, ta, pa.array([b"v%d" % i for i in range(n)]), None, pa.array(topics, pa.string()),
        pa.array(parts, pa.int32()), None, None, pa.array([b"p-%d" % i for i in range(n)]), b"rks-id", None, 5.0)
    r = drain(p, produced).get(5, {"acked": 0, "reported": 0, "failures": []})
    p.close()
    # an unknown partition fails at produce (its metadata already known) or in its delivery report
    failures = sync + r["failures"]
    assert sorted(f[0] for f in failures) == sorted(bad)
    assert all(f[1] == UNKNOWN_PARTITION for f in failures)
    assert r["acked"] + len(r["failures"]) == produced == n - len(sync)
    assert r["acked"] == n - len(bad)
    got = read_topic(broker.bootstrap, [ta, tb], expected=n - len(bad))
    assert len(got.records) == n - len(bad)
    for rec in got.records:
        i = int(bytes.fromhex(rec.rid).split(b"-")[1])
        assert i not in bad and rec.value == b"v%d" % i
        assert rec.topic == (tb if i % 3 == 0 else ta)
        if parts[i] is not None:
            assert rec.partition == parts[i]


def test_any_number_of_topics_is_produced_to_and_none_is_refused_by_a_local_limit(broker):
    """More distinct topics than the producer keeps handles for (4,096): none refused at produce.

    Before the topic table released its handles when full, topic 4,097 of a
    producer failed with _INVALID_ARG (reported as Kafka refusing the record)
    for as long as the producer lived. Here 4,200 topics that do not exist
    (auto-creation off: each fails in its delivery report as Kafka's unknown
    topic) interleave with a real one; the real one's records, produced
    before, across and after the table's release, are all delivered.
    """
    real = new_topic(broker, 1)
    ghost = f"rks-ghost-{uuid.uuid4().hex[:8]}-"
    p = Producer(conf(broker, **{"allow.auto.create.topics": "false", "topic.metadata.propagation.max.ms": 2000}),
                 log_cb=lambda *_: None)
    first, sync0 = p.produce_chunk(1, real, pa.array([b"before-%d" % i for i in range(50)]), None, None, None,
                                   None, None, pa.array([b"b-%d" % i for i in range(50)]), b"rks-id", None, 5.0)
    n = 4200
    topics = [real if i % 100 == 0 else f"{ghost}{i}" for i in range(n)]
    produced, sync = p.produce_chunk(2, real, pa.array([b"v%d" % i for i in range(n)]), None,
                                     pa.array(topics, pa.string()), None, None, None,
                                     pa.array([b"g-%d" % i for i in range(n)]), b"rks-id", None, 5.0)
    assert (sync0, sync) == ([], []), sync[:3]  # no local refusal, whatever the count of topics
    assert produced == n and p.native_stats()["topic_resets"] >= 1
    # 4,200 topics' metadata on a loaded machine: reports took 3-15 s alone, over 60 s once under make test
    res = drain(p, first + produced, timeout_s=240)
    stats = p.native_stats()
    p.close()
    assert 1 in res and 2 in res, ({r: (v["acked"], v["reported"]) for r, v in res.items()}, stats)
    assert res[1]["acked"] == 50
    assert res[2]["acked"] == n // 100
    assert res[2]["reported"] == n
    assert {f[1] for f in res[2]["failures"]} <= {-188, 3}, {f[1:] for f in res[2]["failures"]}  # unknown topic
    assert sorted(f[0] for f in res[2]["failures"]) == [i for i in range(n) if i % 100]
    got = read_topic(broker.bootstrap, real, expected=50 + n // 100)
    assert len(got.records) == 50 + n // 100


def test_a_too_large_record_fails_alone_among_good_ones(broker, topic):
    n = 50
    values = [b"ok%d" % i for i in range(n)]
    values[23] = b"x" * 20_000
    p = Producer(conf(broker, **{"message.max.bytes": 10_000}))
    produced, fails = p.produce_chunk(4, topic, pa.array(values), None, None, None, None, None,
                                      pa.array([b"o-%d" % i for i in range(n)]), b"rks-id", None, 5.0)
    assert produced == n - 1
    assert [(f[0], f[1]) for f in fails] == [(23, MSG_SIZE_TOO_LARGE)]
    assert drain(p, produced) == {4: {"acked": n - 1, "reported": n - 1, "failures": []}}
    p.close()
    got = read_topic(broker.bootstrap, topic, expected=n - 1)
    assert sorted(r.value for r in got.records) == sorted(v for i, v in enumerate(values) if i != 23)


def test_a_queue_full_past_block_s_fails_the_rest_of_the_call():
    p = Producer(unreachable(**{"queue.buffering.max.messages": 10, "message.timeout.ms": 60_000}),
                 log_cb=lambda *_: None)
    n = 30
    t0 = time.monotonic()
    produced, fails = p.produce_chunk(6, "nowhere", pa.array([b"v"] * n), None, None, None, None, None,
                                      pa.array([b"q-%d" % i for i in range(n)]), b"rks-id", None, 0.5)
    took = time.monotonic() - t0
    assert produced == 10
    assert [f[0] for f in fails] == list(range(10, n))
    assert all(f[1] == QUEUE_FULL and f[2] == library.QUEUE_FULL_TEXT for f in fails)
    assert 0.5 <= took < 3.0  # one bound for the whole call, not one per row
    p.purge()
    res = drain(p, produced, timeout_s=10)
    assert res[6]["reported"] == 10 and res[6]["acked"] == 0
    assert {f[1] for f in res[6]["failures"]} <= PURGED
    p.close()


def test_error_cb_on_an_unreachable_broker():
    seen = []
    p = Producer(unreachable(), error_cb=lambda *a: seen.append(a), log_cb=lambda *_: None)
    end = time.monotonic() + 15
    while not seen and time.monotonic() < end:
        p.poll(0.1)
    p.close()
    assert seen
    code, name, text, fatal = seen[0]
    assert isinstance(code, int) and name.startswith("_") and text and fatal is False


def test_stats_cb(broker):
    seen = []
    p = Producer(conf(broker, **{"statistics.interval.ms": 100}), stats_cb=seen.append)
    end = time.monotonic() + 10
    while len(seen) < 2 and time.monotonic() < end:
        p.poll(0.1)
    p.close()
    assert len(seen) >= 2
    assert json.loads(seen[0])["type"] == "producer"


def test_log_cb_is_served_on_the_calling_thread(broker):
    seen, threads = [], set()

    def log(level, facility, text):
        seen.append((level, facility, text))
        threads.add(threading.get_ident())

    p = Producer(conf(broker, debug="broker"), log_cb=log)
    end = time.monotonic() + 10
    while len(seen) < 5 and time.monotonic() < end:
        p.poll(0.1)
    p.close()
    assert len(seen) >= 5
    assert threads == {threading.get_ident()}
    assert all(isinstance(lv, int) and isinstance(f, str) and isinstance(t, str) for lv, f, t in seen)


def test_a_callback_that_raises_or_reenters_goes_to_unraisablehook(broker, monkeypatch):
    import sys

    caught = []
    monkeypatch.setattr(sys, "unraisablehook", lambda u: caught.append(u.exc_value))
    holder = {}

    def stats(_js):
        holder["p"].poll(0)  # re-entering its own producer: refused, not raced

    p = Producer(conf(broker, **{"statistics.interval.ms": 100}), stats_cb=stats)
    holder["p"] = p
    end = time.monotonic() + 10
    while not caught and time.monotonic() < end:
        p.poll(0.1)
    p.close()
    holder.clear()
    assert caught and isinstance(caught[0], RuntimeError) and "in use" in str(caught[0])


def test_conf_errors_and_lifecycle():
    with pytest.raises(ValueError, match="No such configuration property"):
        Producer({"no.such.property": "1"})
    p = Producer(unreachable(), log_cb=lambda *_: None)
    p.close()
    p.close()  # idempotent
    assert len(p) == 0 and p.take_results() == []
    with pytest.raises(RuntimeError, match="closed"):
        p.poll(0)
    with pytest.raises(RuntimeError, match="closed"):
        p.produce_chunk(1, "t", pa.array([b"a"]), ids=pa.array([b"a"]))


def test_ids_made_in_c_are_the_ids_of_the_package(broker, topic):
    """ids=None with the prefix and the id fields of each layout: each record's id header equals ids.record_ids'."""
    n = 3000
    values = [b"v%05d-%s" % (i, b"x" * (i % 17)) for i in range(n)]
    values[3], values[5] = b"", None  # an empty value, a tombstone
    keys_in = [None if i % 5 == 0 else b"" if i % 5 == 1 else b"k%d" % i for i in range(n)]
    stamps = [None if i % 7 == 0 else 1_700_000_000_000 + i for i in range(n)]
    headers = [[None, [], [{"key": "h1", "value": b"x%d" % i}, {"key": "h2", "value": None}],
                [{"key": "e", "value": b""}]][i % 4] for i in range(n)]
    cols = {"values": pa.array(values, pa.binary()), "keys": pa.array(keys_in, pa.binary()),
            "timestamps": pa.array(stamps, pa.int64()), "headers": pa.array(headers, HEADERS_TYPE)}
    schemes = {"content": scheme_for(CONTENT, "sink", "run-1", 7, 3), "place": scheme_for(CONTENT, "sink", "run-1", 7),
               "key": scheme_for(KEY, "sink", "run-1", 7), "position": scheme_for(POSITION, "sink", "run-1", 7, 3)}
    rng = np.random.default_rng(3)
    occ = library.module().Occurrences()
    p = Producer(conf(broker))
    want: dict[str, list[bytes]] = {}
    base = pa.RecordBatch.from_arrays([cols["values"]], names=["value"])
    for rnd, (name, scheme) in enumerate(schemes.items(), start=1):
        places = rng.integers(-2**31, 2**31 - 1, n, endpoint=True).astype(np.int32) if name == "place" else None
        keys = (rng.integers(0, 2**64 - 1, n, dtype=np.uint64, endpoint=True),
                rng.integers(0, 2**64 - 1, n, dtype=np.uint64, endpoint=True)) if name == "key" else None
        chunk = with_ids(base, scheme, occ if scheme.kind == CONTENT else None, places, keys)
        want[name] = record_ids(chunk, 2**40).to_pylist()
        assert len(set(want[name])) == n and record_id_at(chunk, 2**40, 9) == want[name][9]
        id_prefix, id_cols, id_seq0 = id_fields(chunk, 2**40)
        produced, fails = p.produce_chunk(rnd, topic, cols["values"], cols["keys"], None, None, cols["timestamps"],
                                          cols["headers"], id_prefix=id_prefix, id_cols=id_cols, id_seq0=id_seq0)
        assert (produced, fails) == (n, [])
    retry = np.array([n - 1, 0, 17], np.int64)  # a retry of some rows of the last chunk: each keeps its own id
    produced2, fails2 = p.produce_chunk(9, topic, cols["values"], cols["keys"], None, None, cols["timestamps"],
                                        cols["headers"], None, b"rks-id", retry, 5.0, id_prefix=id_prefix,
                                        id_cols=id_cols, id_seq0=id_seq0)
    assert (produced2, fails2) == (3, [])
    res = drain(p, 4 * n + 3)
    p.close()
    assert [res[r]["acked"] for r in (1, 2, 3, 4, 9)] == [n, n, n, n, 3]

    got = read_topic(broker.bootstrap, topic, expected=4 * n + 3)
    assert len(got.records) == 4 * n + 3
    by_id = {r.rid: r for r in got.records}
    for name in schemes:
        for i in range(n):
            r = by_id[want[name][i].hex()]
            assert r.key == keys_in[i] and r.value == values[i]
            assert r.headers == [("rks-id", want[name][i])] + [(h["key"], h["value"]) for h in headers[i] or []]
            if stamps[i] is not None:
                assert r.timestamp == stamps[i]
            else:
                assert abs(r.timestamp - time.time() * 1000) < 600_000  # "now"
    assert sum(1 for r in got.records if r.rid in {want["position"][i].hex() for i in retry}) == 6


