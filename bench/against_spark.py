"""Why a target against Spark's own Kafka sink is missed, computed from the run's own figures.

Spark's sink writes from the executor's JVM; this sink's tasks run in Python
workers, so every row first crosses to Python as Arrow. The no-op writer (it
reads its rows in Python and writes nothing) measures Spark's floor under a
Python writer, that crossing included; the raw writer (confluent-kafka's
produce loop, no WAL, no id header) the cheapest Python route to Kafka. Each
paragraph sets the sink and Spark's sink against those two, and says where
each one's CPU goes by kind of process (``cpu_split`` of the throughput runs:
Spark's JVM, Python processes, the broker).
"""

from __future__ import annotations

from typing import Any

from bench.analysis_threads import threads_sentence
from bench.rounds import paired, spread, spread_text
from bench.targets import (
    ASYNC,
    NOOP,
    PACE_PREFIX,
    RAW,
    SCALE_HI,
    SCALE_WIDE,
    SPARK_KAFKA,
    SPARK_KAFKA_ALIKE,
    SYNC,
    SYNC_PART,
    lat_row,
    scale_row,
    tp_row,
)

__all__ = ["explain", "requests_sentence"]

RAW_POLL = "raw-poll"

NAMES = {SPARK_KAFKA: "Spark's Kafka sink", SPARK_KAFKA_ALIKE: "Spark's Kafka sink (batching set alike)"}


def _us(row: dict[str, Any]) -> float:
    """Wall µs per record of a throughput row (median run)."""
    return row["median_s"] / row["rows"] * 1e6


def _cpu(row: dict[str, Any] | None) -> float | None:
    """CPU µs per record (= CPU s per million records) of a throughput row, all processes."""
    return None if row is None else row.get("cpu_s_per_million")


def _cores(results: dict[str, Any]) -> int:
    return int((results.get("settings") or {}).get("cores") or results["meta"]["machine"].get("cores") or 1)


def _busy(row: dict[str, Any]) -> float | None:
    c = _cpu(row)
    return None if c is None or not row.get("median_s") else c * row["rows"] / 1e6 / row["median_s"]


def _median_run_split(results: dict[str, Any], writer: str, size: int) -> dict[str, float] | None:
    """µs per record by kind of process, of the run whose total CPU per record is the median (parts add up)."""
    tp = results.get("throughput") or {}
    runs = [r for r in tp.get("runs") or [] if r.get("writer") == writer and r.get("value_bytes") == size
            and r.get("cpu_split") and r.get("cpu_s") is not None]
    if not runs:
        return None
    runs.sort(key=lambda r: r["cpu_s"] / r["rows"])
    mid = runs[(len(runs) - 1) // 2]
    return {k: v / mid["rows"] * 1e6 for k, v in mid["cpu_split"].items()}


def _split_text(sp: dict[str, float]) -> str:
    return (f"Spark's JVM {sp.get('spark_jvm', 0):.2f}, Python processes {sp.get('python', 0):.2f}, the broker "
            f"{sp.get('broker', 0):.2f} (sum {sum(sp.values()):.2f})")


def _throughput(results: dict[str, Any], size: int, ref: str, cpu_goal: float | None = None,
                speed_goal: float = 1.1) -> str:
    """Sink sync against Spark's sink (``ref``) for a throughput goal of ``speed_goal`` × its rows/s, or with
    ``cpu_goal`` the CPU ratio target instead."""
    s, k, n, r = (tp_row(results, w, size) for w in (SYNC, ref, NOOP, RAW))
    if not (s and k):
        return ""
    them = NAMES[ref]
    text = f"Wall time per record: {them} {_us(k):.2f} µs, sink sync {_us(s):.2f} µs. "
    bs, bk = _busy(s), _busy(k)
    cores = _cores(results)
    if bs is not None and bk is not None:
        text += f"Cores busy of {cores} (CPU seconds of every process ÷ wall time): sink {bs:.2f}, {them} {bk:.2f}. "
    cs, ck = _cpu(s), _cpu(k)
    if cs is not None and ck:
        text += f"CPU per record, all processes: {them} {ck:.2f} µs, sink {cs:.2f} µs. "
        mk, ms = k.get("machine_cpu_s_per_million"), s.get("machine_cpu_s_per_million")
        if mk is not None and ms is not None:
            text += (f"The whole machine's busy time per record (the kernel's work outside those processes, the WAL's "
                     f"writeback among it, and anything else running): {them} {mk:.2f} µs, sink {ms:.2f} µs. ")
    ss, sk = _median_run_split(results, SYNC, size), _median_run_split(results, ref, size)
    if ss and sk:
        text += (f"Where it goes, µs per record (the median run of each): {them}: {_split_text(sk)}, its Kafka "
                 f"producer in Spark's JVM; the sink: {_split_text(ss)}, its producer (librdkafka) and WAL in the "
                 "Python workers. ")
    sn = _median_run_split(results, NOOP, size)
    if n and sn:
        text += (f"A Python writer that writes nothing spends {sn.get('python', 0):.2f} µs per record in Python "
                 f"processes ({_cpu(n):.2f} µs in all, {_us(n):.2f} µs wall): the rows' trip to a Python worker as "
                 "Arrow, which Spark's sink, writing from the JVM, does not make. ")
    if r and _cpu(r) is not None and ck:
        text += (f"The raw confluent-kafka produce loop (no WAL, no id header) spends {_cpu(r):.2f} µs CPU "
                 f"({_us(r):.2f} µs wall): {_cpu(r) / ck:.2f} × {them} before any of the sink's own work. ")  # type: ignore[operator]
    if ck and cs is not None and bk is not None:
        limit = _limit(results, k, cpu_goal, speed_goal)
        if limit is None:
            text += (f"{them} kept {bk:.2f} of {cores} cores busy: it was not CPU-bound, so the gap is not a CPU "
                     "figure alone. ")
        else:
            text += _limit_text(limit[0], f"{limit[1]} {them}'s {limit[2]}", cs)
            if r and _cpu(r) is not None:
                text += f"; the raw loop alone is {_cpu(r) - limit[0]:+.2f} µs from that"  # type: ignore[operator]
            text += ". "
    if size == 100 and ref == SPARK_KAFKA:  # section 10 measures 100 B against Spark's sink at its defaults
        text += threads_sentence(results, SYNC, SPARK_KAFKA) + " "
    if ref == SPARK_KAFKA_ALIKE:
        text += requests_sentence(results, size) + " " + _tail(results, size)
    if ref == SPARK_KAFKA and cpu_goal is None:
        a = tp_row(results, SPARK_KAFKA_ALIKE, size)
        if a:
            text += (f"With its batching set as librdkafka's (linger.ms 5, batch.size 1,000,000), Spark's sink made "
                     f"{a['rows_per_s']:,.0f} rows/s (against {k['rows_per_s']:,.0f} with its defaults).")
    return text.strip()


def requests_sentence(results: dict[str, Any], size: int) -> str:
    """How Spark's sink (batching set alike) and the sink talk to the broker, from the broker's counters ('' if not)."""
    k, s = tp_row(results, SPARK_KAFKA_ALIKE, size), tp_row(results, SYNC, size)
    qk, qs = (k or {}).get("requests"), (s or {}).get("requests")
    if not (qk and qs):
        return ""
    return (f"What the broker received ({size} B, medians over the rounds): Spark's sink with its batching set as "
            f"librdkafka's sent {qk['requests_per_s']:,.0f} ProduceRequests/s, each carrying "
            f"{qk['partitions_per_request']:.2f} partitions and {qk['records_per_request']:,.0f} records "
            f"({qk['records_per_entry']:,.0f} per partition); the sink sent {qs['requests_per_s']:,.0f}/s, each "
            f"carrying {qs['partitions_per_request']:.2f} partitions and {qs['records_per_request']:,.0f} records: "
            f"{qs['requests'] / qk['requests']:.2f} × the requests for the same records."
            + (" The Java producer (one per executor, shared by its tasks) puts every partition's batch it has "
               "ready into one request; the librdkafka producers send one partition per request."
               if qk["partitions_per_request"] > 1.2 and qs["partitions_per_request"] < 1.05 else ""))


def _tail(results: dict[str, Any], size: int) -> str:
    """What ending a task by polling (as the sink does) instead of flush() cost the raw loop ('' if not measured)."""
    tp = results.get("throughput") or {}
    ratios = paired(tp.get("runs") or [], RAW_POLL, RAW, size)
    if not ratios:
        return ""
    return (f"The sink ends a task by polling for its last acks, where Spark's sink calls flush(): the raw loop "
            f"ending the sink's way made {spread_text(spread(ratios))} × the rows/s of the raw loop ending with "
            "flush() (section 1, \"The end of a task\"). ")


def _async_p50(results: dict[str, Any]) -> str:
    a, k, n = (lat_row(results, w) for w in (ASYNC, SPARK_KAFKA, NOOP))
    if not (a and k) or a["add_batch_ms"]["p50"] is None or k["add_batch_ms"]["p50"] is None:
        return ""
    pa, pk = a["add_batch_ms"]["p50"], k["add_batch_ms"]["p50"]
    text = f"addBatch p50: sink async {pa:.0f} ms, Spark's Kafka sink {pk:.0f} ms. "
    if n and n["add_batch_ms"]["p50"] is not None:
        pn = n["add_batch_ms"]["p50"]
        text += (f"A Python writer that writes nothing takes {pn:.0f} ms: Spark's part of a batch with a Python "
                 f"writer (the job, a task per partition sent to a Python worker, the rows as Arrow), of which "
                 f"Spark's sink pays all but the Python part; above it the sink adds {pa - pn:+.0f} ms (WAL write, "
                 "produce; the acks come after the batch).")
    return text.strip()


def _ms(v: float | None) -> str:
    return "–" if v is None else f"{v:.0f}"


def _scale_p50(results: dict[str, Any], partitions: int) -> str:
    s, k, n = (scale_row(results, w, partitions) for w in (SYNC, SPARK_KAFKA, NOOP))
    if not (s and k):
        return ""
    text = (f"At {partitions} Spark partitions, addBatch p50 / p95: sink sync {_ms(s.get('p50_ms'))} / "
            f"{_ms(s.get('p95_ms'))} ms, Spark's Kafka sink {_ms(k.get('p50_ms'))} / {_ms(k.get('p95_ms'))} ms")
    if n:
        text += (f", a Python writer that writes nothing {_ms(n.get('p50_ms'))} / {_ms(n.get('p95_ms'))} ms (Spark "
                 "runs one Python task per partition for it; the sink writes the batch in one task per core, re-split by "
                 "key with its default record ids)")
    text += ". "
    if s.get("task_s_p50") is not None:
        text += f"The sink's tasks: p50 {s['task_s_p50'] * 1000:.0f} ms each. "
    return text.strip()


def _memory(results: dict[str, Any]) -> str:
    runs = (results.get("memory") or {}).get("runs") or []
    if len(runs) < 2:
        return ""
    text = ("Peak RssAnon of the Python worker per run: " + ", ".join(
        f"{r['rows']:,} rows {r['peak_anon_kib'] / 1024:.0f} MiB" for r in runs) + ". The native occurrence table "
        "moves to a file-backed mapping past 32 MiB only on ext4, XFS and tmpfs (elsewhere it stays in memory).")
    a0, a1 = runs[0]["peak_anon_kib"], runs[-1]["peak_anon_kib"]
    if a1 < a0:
        text += (f" The larger run's anonymous memory is {(a0 - a1) / 1024:.0f} MiB lower, not higher: the smaller "
                 "run's table (up to 32 MiB) is counted in anonymous memory, the larger run's lives in the file-backed "
                 "mapping (its pages in the peak RSS with file-backed pages, which the kernel can evict). Nothing "
                 "grows with the partition's rows in anonymous memory; the target reads a fall as a miss too.")
    return text


def _limit(results: dict[str, Any], k: dict[str, Any], cpu_goal: float | None,
           speed_goal: float | None) -> tuple[float, str, str] | None:
    """The most CPU per record the sink may spend to meet a goal against Spark's sink's row ``k``: ``cpu_goal`` ×
    its CPU, or its CPU ÷ ``speed_goal`` when it was CPU-bound (None otherwise); with the goal's words."""
    ck, bk = _cpu(k), _busy(k)
    if not ck:
        return None
    if cpu_goal is not None:
        return ck * cpu_goal, f"{cpu_goal:.2f} ×", "CPU"
    if speed_goal is not None and bk is not None and bk >= 0.9 * _cores(results):
        return ck / speed_goal, f"{speed_goal:.2f} ×", "throughput, both CPU-bound"
    return None


def _limit_text(limit: float, what: str, cs: float) -> str:
    return (f"At {what}, the sink would have to spend at most {limit:.2f} µs per record"
            + (f": {cs - limit:.2f} µs less than it does" if cs > limit else
               f", which it does ({cs:.2f} µs): what is missing is wall time, not CPU"))


def _same_as_pace(results: dict[str, Any], size: int, pace_name: str, speed_goal: float | None = None,
                  cpu_goal: float | None = None) -> str:
    """A target of the group against Spark's sink whose figures are those of a target at Spark's pace."""
    s, k = tp_row(results, SYNC, size), tp_row(results, SPARK_KAFKA, size)
    text = f"The figures of \"{PACE_PREFIX}{pace_name}\" above, against another goal."
    cs = _cpu(s)
    limit = None if cs is None or k is None else _limit(results, k, cpu_goal, speed_goal)
    if limit is None:
        return text
    what = f"{limit[1]} {NAMES[SPARK_KAFKA]}'s {limit[2]}"
    return f"{text} {_limit_text(limit[0], what, cs)}."  # type: ignore[arg-type]


def _versus_raw(results: dict[str, Any]) -> str:
    """Sink sync against the raw produce loop (100 B): what the sink adds, part by part, from the run's writers."""
    s, r, p, f, fi = (tp_row(results, w, 100) for w in (SYNC, RAW, SYNC_PART, "flush-writer", "flush-writer-id"))
    if not (s and r) or _cpu(s) is None or _cpu(r) is None:
        return ""
    text = (f"Per record: the raw loop {_us(r):.2f} µs wall, {_cpu(r):.2f} µs CPU; sink sync {_us(s):.2f} µs wall, "
            f"{_cpu(s):.2f} µs CPU (+{_cpu(s) - _cpu(r):.2f}).")  # type: ignore[operator]
    if p and _cpu(p) is not None:
        text += (f" The default ids (by position in this write) against `record_ids=\"partition\"` (a content "
                 f"fingerprint and an occurrence count per record): {_cpu(s) - _cpu(p):+.2f} µs "  # type: ignore[operator]
                 f"({_cpu(p):.2f} µs with `record_ids=\"partition\"`).")
    if f and fi and _cpu(f) is not None and _cpu(fi) is not None:
        text += (f" The `rks-id` header, sent by the flush-writer, costs it {_cpu(fi) - _cpu(f):+.2f} µs "  # type: ignore[operator]
                 "(built in Python there, in C in the sink; its bytes go through librdkafka and the broker either way).")
    return text


def explain(results: dict[str, Any], name: str) -> str:
    """The paragraph for the missed target ``name`` of the group against Spark's sink ('' if not one of them)."""
    size = 1024 if "1024 B" in name else 100
    if name.startswith(PACE_PREFIX):  # the same figures as the group against Spark's sink, at other goals
        if "raw confluent-kafka produce loop" in name:
            return _versus_raw(results)
        if name.startswith(f"{PACE_PREFIX}CPU"):
            return _throughput(results, size, SPARK_KAFKA, cpu_goal=1.0)
        return _throughput(results, size, SPARK_KAFKA, speed_goal=1.0 if size == 100 else 1.1)
    if name.startswith("sink sync (WAL, id header) ÷ Spark's Kafka sink"):
        if "alike" not in name and size == 1024:  # a target at Spark's pace has the same goal: said there once
            return (f"The same comparison and goal as \"{PACE_PREFIX}sink sync ÷ Spark's Kafka sink at its defaults, "
                    "throughput (1024 B)\" above.")
        if "alike" not in name:  # the same comparison as a target at Spark's pace: said there once
            return _same_as_pace(results, size, f"sink sync ÷ Spark's Kafka sink at its defaults, throughput "
                                                f"({size} B)", speed_goal=1.1)
        return _throughput(results, size, SPARK_KAFKA_ALIKE)
    if name.startswith("CPU seconds per record, sink sync ÷ Spark's Kafka sink"):
        if size == 100:
            return _same_as_pace(results, size, "CPU seconds per record, sink sync ÷ Spark's Kafka sink at its "
                                                "defaults (100 B, all processes)", cpu_goal=0.9)
        return _throughput(results, size, SPARK_KAFKA, cpu_goal=0.9)
    if name.startswith("sink async micro-batch p50 ÷ Spark's Kafka sink"):
        return _async_p50(results)
    if name.startswith("at-least-once micro-batch p50 ÷ Spark's Kafka sink"):
        return _scale_p50(results, SCALE_HI)
    if name.startswith(f"at {SCALE_WIDE} Spark partitions"):
        return _scale_p50(results, SCALE_WIDE)
    if name.startswith("Python worker anonymous memory"):
        return _memory(results)
    return ""
