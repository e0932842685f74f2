"""Tier 1: the benchmark's verdicts read rounds, not one lucky or unlucky run (bench/rounds.py, bench/targets.py).

A throughput ratio is taken round by round, the target reads the median of
those ratios and says how many rounds agree; the writers' order is spread
over the rounds; a deleted topic's files are waited for; the page is rendered
from one file, with the hand-written explanation as it is. Pure: synthetic
results documents, a scratch directory, this process's own CPU.
"""

from __future__ import annotations

import os

import pytest

from bench import render
from bench.common import CpuMeter, wait_files_gone
from bench.rounds import CPU, paired, rotated, spread_text, verdict
from bench.spark import summarize_throughput
from bench.targets import evaluate_targets

NAME = "sink sync (WAL, id header) ÷ flush-writer (no WAL, no header), throughput (100 B)"


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
    runs = _runs({"flush-writer": [1.0, 2.0, 1.0], "spark-kafka": [2.0, 2.0, 3.0]})
    row = next(r for r in summarize_throughput(runs, ("flush-writer", "spark-kafka"), [100])
               if r["writer"] == "spark-kafka")
    assert row["vs_flush_spread"] == pytest.approx({"median": 0.5, "min": 1 / 3, "max": 1.0, "n": 3})
    assert row["cpu_spread"]["n"] == 3 and row["machine_cpu_spread"]["median"] == pytest.approx(3600.0)
    assert row["cpu_vs_flush"] == pytest.approx(2.0)  # medians: 3.0 s of CPU per 1,000 rows against 1.5 s
    assert spread_text(row["vs_flush_spread"]) == "0.50 (0.33–1.00 over 3 rounds)"


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


def test_the_whole_machine_counts_at_least_this_process():
    m = CpuMeter().start()
    x = 0
    for i in range(3_000_000):
        x += i * i
    tree = m.stop()
    assert tree > 0.05
    assert m.machine["busy"] >= tree - 0.05  # one tick of rounding on each side


def _results(seconds: dict[str, list[float]], **more) -> dict:
    runs = _runs(seconds)
    return {"meta": {"timestamp": "20261206T110321", "mode": "full", "commit": "abc123", "elapsed_s": 1.0,
                     "machine": {"cores": 2, "broker": "Apache Kafka 4.4.0", "loadavg_start": [0.1]}},
            "settings": {"partitions": 2},
            "throughput": {"runs": runs, "summary": summarize_throughput(runs, tuple(seconds), [100]), "sizes": [100],
                           "rows_by_size": {"100": 1000}, "partitions": 2, "rounds": len(runs)}, **more}


def test_the_targets_at_sparks_pace_carry_their_goals():
    results = _results({"spark-kafka": [1.0] * 5, "sink-sync": [2.0] * 5, "flush-writer": [1.1] * 5})
    pace = {t["name"]: t for t in evaluate_targets(results) if t["group"] == "at-least-once at Spark's pace"}
    assert {n: t["goal"] for n, t in pace.items()} == {
        "sink sync ÷ Spark's Kafka sink, throughput (100 B)": ">= 1.00",
        "sink sync ÷ Spark's Kafka sink, throughput (1024 B)": ">= 1.10",
        "CPU per record, sink sync ÷ Spark's Kafka sink (100 B, all processes)": "<= 1.00"}
    t = pace["sink sync ÷ Spark's Kafka sink, throughput (100 B)"]
    assert t["measured"] == pytest.approx(0.5) and t["status"] == "missed"
    assert pace["sink sync ÷ Spark's Kafka sink, throughput (1024 B)"]["status"] == "not measured"  # no 1 KiB runs


def test_a_section_the_run_does_not_hold_has_no_targets_and_no_part_of_the_page(tmp_path, monkeypatch):
    results = _results({"spark-kafka": [1.0] * 3, "sink-sync": [0.9] * 3, "flush-writer": [1.1] * 3, "raw": [0.5] * 3})
    assert not any("memory" in t["name"] or "Kafka source" in t["name"] for t in evaluate_targets(results))
    explained = tmp_path / "explained.md"
    explained.write_text("Sync missed at 1 KiB: *written by a person*.\n")
    monkeypatch.setattr(render, "EXPLAINED", str(explained))
    page = render.markdown(results, "bench/results/20261206T110321.json")
    assert "From one run: `bench/results/20261206T110321.json`, commit `abc123`, 2026-12-06 11:03:21" in page
    assert "Not in this run: kafka-source, realtime, memory.\n" in page and "## Memory" not in page
    assert "## Why missed targets are missed\n\nSync missed at 1 KiB: *written by a person*.\n" in page
    assert "| sink sync (native) | 0.90 (0.90–0.90) |" in page
    assert "writers the runner no longer measures (raw)" in page and "| raw" not in page


def test_the_page_and_its_chart_are_written_from_the_file_named(tmp_path):
    results = _results({"spark-kafka": [1.0] * 3, "sink-sync": [0.9] * 3})
    render.render(results, "/elsewhere/run.json", str(tmp_path))
    assert "`run.json`" in (tmp_path / "PERFORMANCE.md").read_text()
    assert (tmp_path / "performance.png").stat().st_size > 0
