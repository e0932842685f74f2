"""The performance targets, evaluated on a results document.

Four groups: at-least-once at Spark's pace (:data:`PACE`, the issue of that
name: at its goals, against Spark's sink at its defaults and the raw produce loop),
against Spark's own Kafka sink (:data:`VERSUS_SPARK`), the native delivery
engine's targets (:data:`NATIVE`) and the earlier ones (issue "The WAL for free"
and before, :data:`EARLIER`), kept.
Each target is one measured figure, a goal and met / missed / not measured.
Ratios compare writers measured side by side in the same run. A throughput
ratio is taken round by round (bench/rounds.py): the figure is the median of
the rounds' ratios, the target is met only if the goal holds at that median,
and the text gives the rounds' range and how many of them meet the goal
(``rounds`` in the target: median, min, max, n, agree, straddles).
"""

from __future__ import annotations

from typing import Any, Callable

from bench.analysis_ks import ks_targets
from bench.rounds import CPU, DURABLE, SPEED, paired, verdict

__all__ = ["evaluate_targets", "tp_row", "lat_row", "scale_row", "PACE", "PACE_PREFIX", "VERSUS_SPARK", "NATIVE",
           "EARLIER", "SCALE_WIDE",
           "SPARK_KAFKA", "SPARK_KAFKA_ALIKE", "EXACTLY_NO_RESPLIT", "SYNC_PART", "rounds_text"]

NOOP, RAW, FLUSH, SYNC, ASYNC, EXACTLY = ("noop", "raw", "flush-writer", "sink-sync", "sink-async",
                                          "sink-exactly-once")
FLUSH_ID, SYNC_PY, SPARK_KAFKA = "flush-writer-id", "sink-sync-python", "spark-kafka"
SYNC_PART = "sink-sync-partition-ids"  # record_ids="partition" (bench/spark_bench.py)
SPARK_KAFKA_ALIKE = "spark-kafka-alike"
EXACTLY_NO_RESPLIT = "sink-exactly-once-no-resplit"  # exactly_once_lanes=0 (bench/spark_bench.py EXACTLY_SPARK)
PACE = "at-least-once at Spark's pace"
PACE_PREFIX = "at Spark's pace: "  # every target of PACE is named so (bench/against_spark.py explains them)
VERSUS_SPARK = "against Spark's own Kafka sink"
NATIVE = "native delivery engine"
EARLIER = "earlier targets"
#: The scaling target compares these two partition counts.
SCALE_LO, SCALE_HI = 4, 64
#: Spark's default shuffle width: the sink must keep up there wherever Spark's own sink does.
SCALE_WIDE = 200


def _ok(section: Any) -> bool:
    return isinstance(section, dict) and "error" not in section


def tp_row(results: dict[str, Any], writer: str, size: int) -> dict[str, Any] | None:
    """The throughput summary row of ``writer`` at ``size`` bytes, if measured."""
    tp = results.get("throughput")
    if not _ok(tp):
        return None
    return next((r for r in tp["summary"] if r["writer"] == writer and r["value_bytes"] == size), None)


def lat_row(results: dict[str, Any], writer: str, size: int = 100) -> dict[str, Any] | None:
    """The latency result of ``writer`` at ``size`` bytes, if measured."""
    lat = results.get("latency")
    if not _ok(lat):
        return None
    return next((r for r in lat["results"] if r["writer"] == writer and r["value_bytes"] == size), None)


def scale_row(results: dict[str, Any], writer: str, partitions: int | None = None,
              cluster: bool = False) -> dict[str, Any] | None:
    """The scaling summary row of ``writer`` at ``partitions`` in local mode, or of the local-cluster run."""
    sc = results.get("scaling")
    if not _ok(sc):
        return None
    cl = sc.get("cluster") if _ok(sc.get("cluster")) else None
    master = cl.get("master") if cl else None
    for r in sc.get("summary") or []:
        if r["writer"] != writer:
            continue
        if cluster and master is not None and r["setting"] == master:
            return r
        if not cluster and r["setting"] != master and r["partitions"] == partitions:
            return r
    return None


def _r(v: float, goal: float) -> str:
    """A ratio with 2 decimals, or 3 where 2 would print the goal itself (0.897 is not "0.90")."""
    return f"{v:.3f}" if f"{v:.2f}" == f"{goal:.2f}" and v != goal else f"{v:.2f}"


def _ms(v: float | None) -> str:
    """Milliseconds for a text, "–" where nothing was measured (a writer with no batch in time)."""
    return "–" if v is None else f"{v:.0f} ms"


def _p50(row: dict[str, Any] | None) -> float | None:
    return row["add_batch_ms"]["p50"] if row and row["add_batch_ms"]["p50"] is not None else None


def _keeps_up_wide(results: dict[str, Any], writer: str, label: str) -> tuple[float | None, str, bool | None]:
    """(measured, text, met) of "``writer`` keeps up at SCALE_WIDE wherever Spark's Kafka sink does"."""
    w, k = scale_row(results, writer, SCALE_WIDE), scale_row(results, SPARK_KAFKA, SCALE_WIDE)
    kw, kk = (w or {}).get("kept_up"), (k or {}).get("kept_up")
    if w is None or k is None or kw is None or kk is None:
        return None, "n/a", None
    text = (f"{label} {'kept up' if kw else 'did not keep up'} (p50 {_ms(w.get('p50_ms'))}, p95 "
            f"{_ms(w.get('p95_ms'))}); Spark's Kafka sink {'kept up' if kk else 'did not keep up'} (p50 "
            f"{_ms(k.get('p50_ms'))}, p95 {_ms(k.get('p95_ms'))})")
    return float(bool(kw)), text, bool(kw) or not kk


def _goal(goal: str) -> tuple[float, Callable[[float], bool]]:
    """``">= 1.10"`` -> (1.1, the test)."""
    op, x = goal.split()
    g = float(x)
    return g, ((lambda v: v >= g) if op == ">=" else (lambda v: v <= g))


def _figure_text(row: dict[str, Any], kind: str) -> str:
    """A summary row's median figure with its unit."""
    if kind == CPU:
        v = row.get("cpu_s_per_million")
        return "–" if v is None else f"{v:.2f} s per million records"
    if kind == DURABLE:
        return f"{row['durable_rows_per_s']:,.0f} rows/s to durable" if row.get("durable_rows_per_s") else "–"
    return f"{row['rows_per_s']:,.0f} rows/s"


def rounds_text(v: dict[str, Any], goal: float) -> str:
    """``rounds 1.02–1.31, 4 of 5 meet the goal`` (one round: ``1 round``)."""
    if v["n"] < 2:
        return "1 round"
    return f"rounds {_r(v['min'], goal)}–{_r(v['max'], goal)}, {v['agree']} of {v['n']} meet the goal"


def _paired_target(results: dict[str, Any], goal_text: str, a: str, b: str, size: int, kind: str,
                   kind_b: str | None) -> tuple[float | None, str, bool | None, dict[str, Any] | None]:
    """(measured, text, met, rounds) of ``a`` ÷ ``b``: the median of the per-round ratios, and their spread."""
    goal, holds = _goal(goal_text)
    ra, rb = tp_row(results, a, size), tp_row(results, b, size)
    tp = results.get("throughput")
    v = verdict(paired(tp["runs"], a, b, size, kind, kind_b), holds) if ra and rb and _ok(tp) else None
    if v is None:
        return None, "n/a", None, None
    text = (f"{_r(v['median'], goal)} ({rounds_text(v, goal)}; medians {_figure_text(ra, kind)} vs "
            f"{_figure_text(rb, kind_b or kind)})")
    return v["median"], text, v["met"], v


def evaluate_targets(results: dict[str, Any]) -> list[dict[str, Any]]:
    """The targets, each with the measured figure and met / missed / not measured."""
    out: list[dict[str, Any]] = []
    group = [PACE]

    def add(name: str, goal: str, measured: float | None, text: str, ok: bool | None, note: str = "",
            rounds: dict[str, Any] | None = None) -> None:
        status = "not measured" if measured is None or ok is None else ("met" if ok else "missed")
        out.append({"name": name, "goal": goal, "measured": measured, "measured_text": text, "status": status,
                    "note": note, "group": group[0], **({"rounds": rounds} if rounds else {})})

    def ratio(name: str, goal: str, a: str, b: str, size: int, kind: str = SPEED, note: str = "",
              kind_b: str | None = None) -> None:
        """A throughput target ``a`` ÷ ``b`` (goal ``>= x`` or ``<= x``), taken round by round."""
        measured, text, ok, rounds = _paired_target(results, goal, a, b, size, kind, kind_b)
        add(name, goal, measured, text, ok, note, rounds)

    # -- at-least-once at Spark's pace: the goals of the issue of that name --------------------------
    group[0] = PACE
    for size, goal in ((100, ">= 1.00"), (1024, ">= 1.10")):
        ratio(f"{PACE_PREFIX}sink sync ÷ Spark's Kafka sink at its defaults, throughput ({size} B)", goal, SYNC,
              SPARK_KAFKA, size)
    ratio(f"{PACE_PREFIX}CPU seconds per record, sink sync ÷ Spark's Kafka sink at its defaults (100 B, all "
          "processes)", "<= 1.00", SYNC, SPARK_KAFKA, 100, CPU)
    ratio(f"{PACE_PREFIX}sink sync ÷ the raw confluent-kafka produce loop (no WAL, no header), throughput (100 B)",
          ">= 0.90", SYNC, RAW, 100)

    # -- against Spark's own Kafka sink (the writer users pick instead) ------------------------------
    group[0] = VERSUS_SPARK
    for size in (100, 1024):
        for ref, how in ((SPARK_KAFKA, "each client's defaults"), (SPARK_KAFKA_ALIKE, "batching set alike")):
            ratio(f"sink sync (WAL, id header) ÷ Spark's Kafka sink, throughput ({size} B, {how})", ">= 1.10", SYNC,
                  ref, size)
    for size in (100, 1024):
        ratio(f"CPU seconds per record, sink sync ÷ Spark's Kafka sink ({size} B, all processes)", "<= 0.90", SYNC,
              SPARK_KAFKA, size, CPU)
    la, lk = _p50(lat_row(results, ASYNC)), _p50(lat_row(results, SPARK_KAFKA))
    v = la / lk if la is not None and lk else None
    add("sink async micro-batch p50 ÷ Spark's Kafka sink p50", "<= 1.00", v,
        f"{_r(v, 1.0)} ({la:.0f} ms vs {lk:.0f} ms, addBatch p50)" if v is not None else "n/a",
        None if v is None else v <= 1.0)
    ss, sk = scale_row(results, SYNC, SCALE_HI), scale_row(results, SPARK_KAFKA, SCALE_HI)
    ps, pk = (ss or {}).get("p50_ms"), (sk or {}).get("p50_ms")
    v = ps / pk if ps is not None and pk else None
    add(f"at-least-once micro-batch p50 ÷ Spark's Kafka sink, both at {SCALE_HI} Spark partitions", "<= 1.00", v,
        f"{_r(v, 1.0)} ({ps:.0f} ms vs {pk:.0f} ms, addBatch p50)" if v is not None else "n/a",
        None if v is None else v <= 1.0)
    add(f"at {SCALE_WIDE} Spark partitions: keeps up with the input rate wherever Spark's Kafka sink does",
        "keeps up", *_keeps_up_wide(results, SYNC, "at-least-once sync"))
    mem = results.get("memory")
    v = mem.get("anon_growth") if _ok(mem) else None
    note = ""
    if _ok(mem) and len(mem["runs"]) >= 2 and v is not None:
        r0, r1 = mem["runs"][0], mem["runs"][-1]
        sizes = f"{r0['rows']:,} -> {r1['rows']:,} rows"
        if (r0["rows"], r1["rows"]) != (1_000_000, 100_000_000):
            note = f"quick mode measured {sizes}, not 1M -> 100M"
        text = (f"{v * 100:+.1f} % ({r0['peak_anon_kib'] / 1024:.0f} -> {r1['peak_anon_kib'] / 1024:.0f} MiB "
                f"RssAnon; peak RSS with file-backed pages {r0['peak_hwm_kib'] / 1024:.0f} -> "
                f"{r1['peak_hwm_kib'] / 1024:.0f} MiB, {sizes})")
    else:
        text = "n/a"
    add("Python worker anonymous memory (RssAnon) from 1M to 100M rows in one partition (100 B)", "flat within 10 %",
        v, text, None if v is None else abs(v) <= 0.10, note)

    # -- the native delivery engine's targets ---------------------------------------------------------
    group[0] = NATIVE
    for size in (100, 1024):
        ratio(f"sink sync (native engine, id header on) ÷ flush-writer without any header, throughput ({size} B)",
              ">= 1.00", SYNC, FLUSH, size)
    for size in (100, 1024):
        ratio(f"CPU seconds per record, sink sync (native engine) ÷ flush-writer ({size} B, all processes)", "<= 1.00",
              SYNC, FLUSH, size, CPU)
    for size in (100, 1024):
        ratio(f"exactly-once ÷ sink sync throughput ({size} B, both native engine)", ">= 0.90", EXACTLY, SYNC, size)
    for size in (100, 1024):
        ratio(f"exactly-once without the re-split (exactly_once_lanes=0) ÷ sink sync throughput ({size} B)", ">= 0.90",
              EXACTLY_NO_RESPLIT, SYNC, size,
              note="a lane per Spark partition, named by its input where it has one (Kafka ranges, files)")
    ratio("sink sync throughput, native ÷ Python delivery engine (100 B)", ">= 1.60", SYNC, SYNC_PY, 100)
    lo, hi = scale_row(results, EXACTLY, SCALE_LO), scale_row(results, EXACTLY, SCALE_HI)
    plo, phi = (lo or {}).get("p50_ms"), (hi or {}).get("p50_ms")
    v = phi / plo if plo and phi is not None else None
    note = ""
    if hi is not None and hi.get("kept_up") is False:
        note = (f"at {SCALE_HI} partitions exactly-once's batches took longer than the 1 s trigger (they ran back to "
                "back, with the same rows each)")
    add(f"exactly-once micro-batch p50 at {SCALE_HI} Spark partitions ÷ at {SCALE_LO} (same rows per batch)",
        "<= 2.00", v, f"{_r(v, 2.0)} ({phi:.0f} ms vs {plo:.0f} ms, addBatch p50)" if v is not None else "n/a",
        None if v is None else v <= 2.0, note)

    ex, sk = scale_row(results, EXACTLY, SCALE_HI), scale_row(results, SPARK_KAFKA, SCALE_HI)
    pe, ps = (ex or {}).get("p50_ms"), (sk or {}).get("p50_ms")
    v = pe / ps if pe is not None and ps else None
    note = ""
    if ex is not None and sk is not None:
        note = (f"kept up with the 1 s trigger: exactly-once {'yes' if ex.get('kept_up') else 'no'}, "
                f"Spark's Kafka sink {'yes' if sk.get('kept_up') else 'no'}")
    add(f"exactly-once micro-batch p50 ÷ Spark's own Kafka sink, both at {SCALE_HI} Spark partitions", "<= 1.50", v,
        f"{_r(v, 1.5)} ({pe:.0f} ms vs {ps:.0f} ms, addBatch p50)" if v is not None else "n/a",
        None if v is None else v <= 1.5, note)

    add(f"exactly-once at {SCALE_WIDE} Spark partitions: keeps up with the input rate wherever Spark's Kafka sink does",
        "keeps up", *_keeps_up_wide(results, EXACTLY, "exactly-once"))
    for target in ks_targets(results.get("kafka_source")):  # a Kafka → Kafka copy (bench/kafka_source.py)
        add(*target)

    # -- earlier targets (kept) -----------------------------------------------------------------------
    group[0] = EARLIER

    for size, goal in ((100, 0.90), (1024, 0.95)):
        ratio(f"sink sync ÷ flush-writer throughput ({size} B, id header on)", f">= {goal:.2f}", SYNC, FLUSH, size)
    ratio("sink async time-to-durable ÷ sink sync throughput (100 B)", ">= 0.95", ASYNC, SYNC, 100, DURABLE,
          kind_b=SPEED)
    la, lf, ln = _p50(lat_row(results, ASYNC)), _p50(lat_row(results, FLUSH)), _p50(lat_row(results, NOOP))
    v = la / lf if la is not None and lf else None
    floor_ok = None if la is None or ln is None else la - ln <= 20.0
    text = "n/a"
    if v is not None:
        text = f"{v:.2f} ({la:.0f} ms vs {lf:.0f} ms, addBatch p50)"
        if ln is not None:
            text += f"; {la - ln:+.0f} ms over the no-op writer's {ln:.0f} ms"
    add("sink async p50 micro-batch latency ÷ flush-writer", "<= 0.5, and within 20 ms of a no-op writer", v,
        text, None if v is None else (v <= 0.5 and bool(floor_ok)),
        "" if ln is not None or v is None else "no-op writer not measured in this run")

    ratio("CPU seconds per million records, sink sync ÷ flush-writer (100 B, all processes)", "<= 1.15", SYNC, FLUSH,
          100, CPU)
    for size in (100, 1024):
        ratio(f"exactly-once ÷ sink sync throughput ({size} B)", ">= 0.85", EXACTLY, SYNC, size)

    wal = results.get("wal")
    w = None
    if _ok(wal):
        w = next((r for r in wal["wal_only"] if r["design"] == "chunked" and r["value_bytes"] == 100 and r["fsync"]),
                 None)
    v = w and w.get("total_with_ack_us")
    add("WAL cost per record, write + ack + prune (100 B, fsync per WAL transaction)", "<= 0.5 us/record", v,
        f"{v:.3f} us/record (write {w['write_us']:.3f} + ack {w['ack_us']:.3f} + prune {w['prune_us']:.3f}"
        + (f"; ack on the Python engine {w['ack_python_us']:.3f})" if w.get("ack_python_us") is not None else ")")
        if v else "n/a", None if v is None else v <= 0.5)

    rec = results.get("recovery")
    v = rec["replay"].get("rows_per_s") if _ok(rec) else None
    add("replay of orphaned records", ">= 300k records/s", v,
        f"{v:,.0f} records/s ({rec['replay']['replayed']:,} records in {rec['replay']['acked_s']:.2f} s)"
        if v else "n/a", None if v is None else v >= 300_000)
    return out
