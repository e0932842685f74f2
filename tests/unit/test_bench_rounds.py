"""Tier 1: the benchmark's verdicts read rounds, not one lucky or unlucky run (bench/rounds.py, bench/targets.py).

A throughput ratio is taken round by round, the target reads the median of
those ratios and says how many rounds agree; the writers' order is spread
over the rounds; a deleted topic's files are waited for; the broker's
counters become request-level figures. Pure: synthetic results documents,
a scratch directory, this process's own CPU.
"""

from __future__ import annotations

import os

import pytest

from bench.broker_watch import request_figures, wait_files_gone
from bench.cpu import CpuMeter
from bench.rounds import CPU, paired, spread_text, verdict
from bench.spark_throughput import rotated
from bench.targets import evaluate_targets
from bench.tp_summary import summarize_throughput

NAME = "sink sync (native engine, id header on) ÷ flush-writer without any header, throughput (100 B)"


def _runs(seconds: dict[str, list[float]], rows: int = 1000) -> list[dict]:
    out = []
    for writer, secs in seconds.items():
        for rnd, s in enumerate(secs):
            out.append({"writer": writer, "value_bytes": 100, "round": rnd, "rows": rows, "payload_bytes": rows * 110,
                        "seconds": s, "durable_seconds": None, "cpu_s": s * 1.5, "report": {"tasks": 2},
                        "machine_cpu": {"busy": s * 1.8, "kernel": 0.1, "iowait": 0.0}})
    return out


def _target(seconds: dict[str, list[float]]) -> dict:
    runs = _runs(seconds)
    tp = {"runs": runs, "summary": summarize_throughput(runs, tuple(seconds), [100])}
    return next(t for t in evaluate_targets({"throughput": tp}) if t["name"] == NAME)


def test_one_slow_round_moves_the_range_not_the_verdict():
    # the sink is faster in every round but the third, where a neighbour slowed it down
    t = _target({"flush-writer": [1.0, 1.0, 1.0, 1.0, 1.0], "sink-sync": [0.9, 0.95, 2.0, 0.9, 0.92]})
    assert t["status"] == "met"
    r = t["rounds"]
    assert (r["n"], r["agree"], r["straddles"]) == (5, 4, True)
    assert r["median"] == pytest.approx(1 / 0.92)
    assert r["min"] == pytest.approx(0.5)
    assert "4 of 5 meet the goal" in t["measured_text"]


def test_a_target_is_missed_when_its_median_misses_it():
    t = _target({"flush-writer": [1.0, 1.0, 1.0, 1.0, 1.0], "sink-sync": [0.9, 1.2, 1.3, 1.1, 0.95]})
    assert t["status"] == "missed"
    assert (t["rounds"]["agree"], t["rounds"]["n"]) == (2, 5)


def test_ratios_pair_each_round_with_the_same_round():
    runs = _runs({"a": [1.0, 4.0], "b": [2.0, 4.0]})
    assert paired(runs, "a", "b", 100) == pytest.approx([2.0, 1.0])  # rows/s of a ÷ rows/s of b, round by round
    assert paired(runs, "a", "b", 100, CPU) == pytest.approx([0.5, 1.0])


def test_the_summary_keeps_every_figures_spread():
    runs = _runs({"raw": [1.0, 2.0, 1.0], "flush-writer": [2.0, 2.0, 3.0]})
    row = next(r for r in summarize_throughput(runs, ("raw", "flush-writer"), [100]) if r["writer"] == "flush-writer")
    assert row["vs_raw_spread"] == pytest.approx({"median": 0.5, "min": 1 / 3, "max": 1.0, "n": 3})
    assert row["cpu_spread"]["n"] == 3 and row["machine_cpu_spread"]["median"] == pytest.approx(3600.0)
    assert spread_text(row["vs_raw_spread"]) == "0.50 (0.33–1.00 over 3 rounds)"


def test_no_rounds_no_verdict():
    assert verdict([], lambda v: v >= 1.0) is None
    assert _target({"flush-writer": [1.0]})["status"] == "not measured"


def test_every_writer_takes_early_and_late_places():
    writers = tuple("abcdefghijklm")
    firsts = [rotated(writers, r, 5)[0] for r in range(5)]
    assert len(set(firsts)) == 5
    assert all(sorted(rotated(writers, r, 5)) == sorted(writers) for r in range(5))
    assert rotated(writers, 0, 5) == writers


def test_deleted_topic_files_are_waited_for(tmp_path):
    for d in ("t-0", "t-1.0a44ec77-delete", "t-poll-0", "other-0"):
        os.mkdir(tmp_path / d)
    assert wait_files_gone(str(tmp_path), "t", timeout_s=0.2) is None  # still there: the wait says so
    os.rmdir(tmp_path / "t-0")
    os.rmdir(tmp_path / "t-1.0a44ec77-delete")
    assert wait_files_gone(str(tmp_path), "t", timeout_s=0.2) is not None  # another topic's files do not count


def test_request_figures_from_the_brokers_counters():
    before = {"requests": 100, "entries": 0, "records": 40, "bytes": 0}
    after = {"requests": 150, "entries": 100, "records": 10_040, "bytes": 1_000_000}
    f = request_figures(before, after, 2.0)
    assert f["requests_per_s"] == 25.0 and f["records_per_request"] == 200.0
    assert f["partitions_per_request"] == 2.0 and f["records_per_entry"] == 100.0
    assert request_figures(None, after, 2.0) is None


def test_the_whole_machine_counts_at_least_this_process():
    m = CpuMeter().start()
    x = 0
    for i in range(3_000_000):
        x += i * i
    tree = m.stop()
    assert tree > 0.05
    assert m.machine["busy"] >= tree - 0.05  # one tick of rounding on each side


def test_the_sink_against_the_plain_loop_outside_spark_is_read_round_by_round():
    from bench.render_sections import _ratio_spread

    # rounds where the sink was as fast as the loop beside it, and one slow round of both
    row = {"sink_vs_alone": 1.0, "sink_vs_alone_each": [1.02, 0.98, 1.0, 0.97, 1.03]}
    assert _ratio_spread(row) == "1.00 (0.97–1.03 over 5 rounds)"
    assert _ratio_spread({"sink_vs_alone": 0.85}) == "0.85"  # a run from before the rounds were kept


def test_the_targets_at_sparks_pace_carry_the_issues_goals_and_are_explained_once():
    from bench.analysis import why_missed
    from bench.targets import PACE, PACE_PREFIX

    runs = _runs({"spark-kafka": [1.0] * 5, "sink-sync": [2.0] * 5, "raw": [1.1] * 5})
    results = {"throughput": {"runs": runs, "summary": summarize_throughput(runs, ("spark-kafka", "sink-sync", "raw"),
                                                                            [100])},
               "meta": {"machine": {"cores": 2}}, "settings": {"cores": 2}}
    results["targets"] = evaluate_targets(results)
    pace = {t["name"][len(PACE_PREFIX):]: t for t in results["targets"] if t["group"] == PACE}
    assert {n: t["goal"] for n, t in pace.items()} == {
        "sink sync ÷ Spark's Kafka sink at its defaults, throughput (100 B)": ">= 1.00",
        "sink sync ÷ Spark's Kafka sink at its defaults, throughput (1024 B)": ">= 1.10",
        "CPU seconds per record, sink sync ÷ Spark's Kafka sink at its defaults (100 B, all processes)": "<= 1.00",
        "sink sync ÷ the raw confluent-kafka produce loop (no WAL, no header), throughput (100 B)": ">= 0.90"}
    assert pace["sink sync ÷ Spark's Kafka sink at its defaults, throughput (100 B)"]["measured"] == pytest.approx(0.5)
    assert pace["sink sync ÷ the raw confluent-kafka produce loop (no WAL, no header), throughput (100 B)"][
        "status"] == "missed"
    reasons = dict(why_missed(results))
    full = reasons[f"{PACE_PREFIX}sink sync ÷ Spark's Kafka sink at its defaults, throughput (100 B)"]
    assert full.startswith("Wall time per record: Spark's Kafka sink 1000.00 µs, sink sync 2000.00 µs")
    # the same comparison in the group against Spark's sink points to it instead of saying it again
    short = reasons["sink sync (WAL, id header) ÷ Spark's Kafka sink, throughput (100 B, each client's defaults)"]
    assert short.startswith(f"The figures of \"{PACE_PREFIX}sink sync ÷ Spark's Kafka sink at its defaults")
    assert "Wall time per record" not in short


def test_two_runs_side_by_side_say_whether_each_verdict_held():
    from bench.versus import versus_md

    def run(measured: float, status: str, straddles: bool) -> dict:
        return {"meta": {"timestamp": "T", "commit": "c", "machine": {"broker": "b"}},
                "targets": [{"name": "x", "measured": measured, "status": status,
                             "rounds": {"straddles": straddles}},
                            {"name": "y", "measured": 2.0, "status": "missed"},
                            {"name": "z", "measured": None, "status": "not measured"}]}

    text = versus_md(run(0.95, "met", True), run(0.85, "missed", True), "/x/old.json")
    assert "The verdict (met or missed) is the same in both runs for 1 of the 2 targets both measured." in text
    assert "| x | 0.85 | 0.95 | missed, not settled | met, not settled |" in text
    assert "| y | 2 | 2 | missed | missed |" in text
