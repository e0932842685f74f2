"""This run against an earlier one (another broker, another commit): the figures that moved, side by side.

    python bench/render.py --versus bench/results/20261124T041924.json

Compares what both runs measured alike: batch throughput per writer and
value size (median rows/s), micro-batch latency per writer (p50 trigger),
and every target's measured ratio. Each row says by how much the figure
moved; why is the text of docs/PERFORMANCE.md's section that names it.
"""

from __future__ import annotations

import os
from typing import Any

__all__ = ["versus_md"]


def _tp(results: dict[str, Any]) -> dict[tuple[str, int], float]:
    return {(r["writer"], int(r["value_bytes"])): float(r["rows_per_s"])
            for r in (results.get("throughput") or {}).get("summary") or [] if r.get("rows_per_s")}


def _lat(results: dict[str, Any]) -> dict[tuple[str, int], float]:
    out = {}
    for r in (results.get("latency") or {}).get("results") or []:
        p50 = (r.get("trigger_ms") or {}).get("p50")
        if p50 is not None and "writer" in r:
            out[(r["writer"], int(r.get("value_bytes") or 0))] = float(p50)
    return out


def _targets(results: dict[str, Any]) -> dict[str, tuple[float, str]]:
    """Each measured target's figure and verdict (``met``, ``missed``; ``, not settled`` where rounds straddle)."""
    out = {}
    for t in results.get("targets") or []:
        if isinstance(t.get("measured"), (int, float)):
            settled = "" if not (t.get("rounds") or {}).get("straddles") else ", not settled"
            out[t["name"]] = (float(t["measured"]), t["status"] + settled)
    return out


def _broker(results: dict[str, Any]) -> str:
    return str((results.get("meta") or {}).get("machine", {}).get("broker") or "unknown")


def versus_md(new: dict[str, Any], old: dict[str, Any], old_path: str) -> str:
    """The Markdown section comparing ``new`` with ``old`` (read from ``old_path``)."""
    out = [f"## Against the run of {old['meta']['timestamp']} ({_broker(old)})\n",
           f"This run ({_broker(new)}) beside `{os.path.basename(old_path)}` (commit "
           f"`{str(old['meta'].get('commit'))[:10]}`, broker {_broker(old)}), same machine and the same "
           "benchmark code path for each row. \"×\" = this run ÷ that run.\n"]
    sections = [
        ("writer | value | rows/s then | rows/s now", _tp(new), _tp(old), "{:,.0f}"),
        ("writer (micro-batch trigger) | value | p50 then (ms) | p50 now (ms)", _lat(new), _lat(old), "{:,.0f}"),
    ]
    for head, now, then, fmt in sections:
        rows = [(w, s, then[(w, s)], now[(w, s)]) for (w, s) in sorted(now) if (w, s) in then]
        if rows:
            out.append(f"| {head} | × |\n|---|---:|---:|---:|---:|")
            out += [f"| {w} | {s} B | {fmt.format(a)} | {fmt.format(b)} | {b / a:.2f} |" for w, s, a, b in rows]
            out.append("")
    gn, go = _targets(new), _targets(old)
    rows3 = [(n, go[n], gn[n]) for n in gn if n in go]
    if rows3:
        same = sum(1 for _, a, b in rows3 if a[1].split(",")[0] == b[1].split(",")[0])
        out.append(f"The verdict (met or missed) is the same in both runs for {same} of the {len(rows3)} targets "
                   "both measured.\n")
        out.append("| target (measured ratio or figure) | then | now | verdict then | verdict now |\n"
                   "|---|---:|---:|---|---|")
        out += [f"| {n} | {a[0]:.3g} | {b[0]:.3g} | {a[1]} | {b[1]} |" for n, a, b in rows3]
        out.append("")
    return "\n".join(out) + "\n"
