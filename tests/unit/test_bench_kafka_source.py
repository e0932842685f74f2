"""Tier 1: the kafka-source section's verdicts (bench/analysis_ks.py): ratios taken within a round, spreads reported.

Pure: synthetic rounds as bench/kafka_source.py records them.
"""

from __future__ import annotations

from bench.analysis_ks import ks_targets, summarize
from bench.targets import evaluate_targets

SK, SYNC, EO = "spark-kafka", "sink-sync", "sink-exactly-once"


def _q(p50: float, p95: float) -> dict:
    return {"trigger_ms": {"p50": p50, "p95": p95}, "add_batch_ms": {"p50": p50 - 20}, "kept_up": p95 <= 1000}


def _section(per_round: list[dict[str, tuple[float, float]]], partitions: int = 4) -> dict:
    rounds = [{"round": r, "results": {f"{partitions}:{w}": _q(*v) for w, v in got.items()}, "errors": {}}
              for r, got in enumerate(per_round)]
    return {"rows_per_trigger": 50_000, "partitions": [partitions], "rounds": rounds,
            "summary": summarize(rounds, [partitions], (SK, SYNC, EO))}


def test_the_ratio_to_spark_s_sink_is_taken_within_each_round_and_its_median_judged():
    # A slow round slows both writers: round by round, exactly-once is 1.2 times Spark's sink every time.
    sec = _section([{SK: (400, 600), SYNC: (420, 640), EO: (480, 700)},
                    {SK: (800, 900), SYNC: (840, 950), EO: (960, 990)},
                    {SK: (500, 700), SYNC: (520, 720), EO: (600, 800)}])
    eo = next(r for r in sec["summary"] if r["writer"] == EO)
    assert eo["p50_vs_spark_kafka"] == {"median": 1.2, "min": 1.2, "max": 1.2}
    assert eo["trigger_p50_ms"] == {"median": 600, "min": 480, "max": 960}
    (ratio, p95) = ks_targets(sec)
    assert ratio[2] == 1.2 and ratio[4] is True and "rounds 1.20–1.20" in ratio[3]
    assert p95[2] == 800 and p95[4] is True


def test_exactly_once_late_where_spark_s_sink_keeps_up_misses_and_where_it_does_not_is_not_judged():
    late = _section([{SK: (400, 600), EO: (1100, 1400)}] * 5)
    ratio, p95 = ks_targets(late)
    assert ratio[4] is False and p95[4] is False
    nobody = _section([{SK: (1300, 1500), EO: (1400, 1600)}] * 5)
    _ratio, p95 = ks_targets(nobody)
    assert p95[4] is None and "no goal" in p95[5]  # not judged: evaluate_targets says "not measured"


def test_the_targets_list_carries_the_section_s_targets():
    sec = _section([{SK: (400, 600), EO: (480, 700)}] * 5)
    names = [t["name"] for t in evaluate_targets({"kafka_source": sec})]
    assert sum("Spark's Kafka source" in n for n in names) == 2
