"""The rounds behind a figure: its spread, and a ratio of two writers taken round by round.

The throughput section runs every writer once per round, the rounds
interleaved and the writers' order rotated (:func:`rotated`), so two
writers' runs of the same round shared the machine's state of that moment:
a ratio is taken within each round (:func:`paired`), and a target reads the
median of those ratios and how many rounds agree with it (:func:`verdict`).
One round that met a neighbour's burst moves the range, not the verdict.

Pure functions of a results document's ``throughput.runs`` (each run:
``writer``, ``value_bytes``, ``round``, ``rows``, ``seconds``, ``cpu_s``,
optionally ``machine_cpu``); they run wherever the results are read.
"""

from __future__ import annotations

import statistics
from typing import Any, Callable

__all__ = ["spread", "per_round", "paired", "verdict", "spread_text", "rotated", "SPEED", "CPU", "MACHINE_CPU"]

SPEED, CPU, MACHINE_CPU = "speed", "cpu", "machine_cpu"


def rotated(writers: tuple[str, ...], rnd: int, rounds: int) -> tuple[str, ...]:
    """The writers' order of round ``rnd``: rotated by ``rnd × len ÷ rounds`` places (spread over the rounds)."""
    k = (rnd * len(writers)) // max(1, rounds) % max(1, len(writers))
    return writers[k:] + writers[:k]


def spread(xs: list[float]) -> dict[str, Any] | None:
    """Median, min, max and count of ``xs`` (None when empty)."""
    if not xs:
        return None
    return {"median": statistics.median(xs), "min": min(xs), "max": max(xs), "n": len(xs)}


def _figure(run: dict[str, Any], kind: str) -> float | None:
    """The figure of one run: rows/s, or CPU seconds per record (the run's processes, or the whole machine).

    Raises:
        ValueError: ``kind`` is none of :data:`SPEED`, :data:`CPU`, :data:`MACHINE_CPU`.
    """
    if kind == SPEED:
        return run["rows"] / run["seconds"] if run.get("seconds") else None
    if kind == CPU:
        return run["cpu_s"] / run["rows"] if run.get("cpu_s") is not None else None
    if kind == MACHINE_CPU:
        m = run.get("machine_cpu") or {}
        return m["busy"] / run["rows"] if m.get("busy") is not None else None
    raise ValueError(f"unknown figure {kind!r}")


def per_round(runs: list[dict[str, Any]], writer: str, size: int, kind: str = SPEED) -> dict[int, float]:
    """Round -> the figure of ``writer``'s run at ``size`` bytes (rounds without one are left out)."""
    out = {}
    for r in runs:
        if r.get("writer") == writer and r.get("value_bytes") == size:
            v = _figure(r, kind)
            if v is not None:
                out[int(r.get("round", 0))] = v
    return out


def paired(runs: list[dict[str, Any]], a: str, b: str, size: int, kind: str = SPEED,
           kind_b: str | None = None) -> list[float]:
    """``a``'s figure ÷ ``b``'s, round by round, for the rounds both ran (``kind_b``: b's figure, default ``kind``)."""
    fa, fb = per_round(runs, a, size, kind), per_round(runs, b, size, kind_b or kind)
    return [fa[k] / fb[k] for k in sorted(fa) if k in fb and fb[k]]


def verdict(ratios: list[float], holds: Callable[[float], bool]) -> dict[str, Any] | None:
    """The :func:`spread` of per-round ratios, ``agree`` (rounds where ``holds``), ``met`` (it holds at the median)."""
    sp = spread(ratios)
    if sp is None:
        return None
    return {**sp, "agree": sum(1 for x in ratios if holds(x)), "met": bool(holds(sp["median"])),
            "straddles": holds(sp["min"]) != holds(sp["max"])}


def spread_text(sp: dict[str, Any] | None, fmt: str = "{:.2f}", rounds: bool = True) -> str:
    """``1.20 (1.10–1.31 over 5 rounds)``; the bare median when there is one round; '–' when none."""
    if sp is None:
        return "–"
    med = fmt.format(sp["median"])
    if sp["n"] < 2:
        return med
    tail = f" over {sp['n']} rounds" if rounds else ""
    return f"{med} ({fmt.format(sp['min'])}–{fmt.format(sp['max'])}{tail})"
