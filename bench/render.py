"""Render benchmark results into docs/PERFORMANCE.md, docs/performance.png and docs/performance-scaling.png.

Usage: python bench/render.py [results.json] [--docs-dir DIR]
(default: bench/results/latest.json into docs/; ``--docs-dir`` writes the three files elsewhere)
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOCS = os.path.join(REPO, "docs")

if REPO not in sys.path:  # also run as a script: python bench/render.py
    sys.path.insert(0, REPO)
from bench.render_head import _head_md, _machine_md, _targets_md  # noqa: E402  (the page, section by section)
from bench.render_md import DOC_NAME, PNG_NAME, SCALING_PNG_NAME, _ok  # noqa: E402
from bench.render_ks import kafka_source_md, realtime_md  # noqa: E402
from bench.render_scaling import _scaling_section_md  # noqa: E402
from bench.render_threads import threads_section_md  # noqa: E402
from bench.render_throughput import throughput_md  # noqa: E402
from bench.render_sections import (  # noqa: E402
    _exactly_once_md,
    _formats_md,
    _latency_md,
    _memory_md,
    _profile_md,
    _recovery_md,
    _running_md,
    _versions_md,
    _wal_md,
)
from bench.targets import evaluate_targets  # noqa: E402

DOC = os.path.join(DOCS, DOC_NAME)
PNG = os.path.join(DOCS, PNG_NAME)


def markdown(results: dict[str, Any]) -> str:
    out: list[str] = []
    w = out.append
    _head_md(w, results)
    _targets_md(w, results)
    _machine_md(w, results)
    throughput_md(w, results)
    _latency_md(w, results)
    _scaling_section_md(w, results)
    _wal_md(w, results)
    _memory_md(w, results)
    _recovery_md(w, results)
    _profile_md(w, results)
    _formats_md(w, results.get("formats"))
    kafka_source_md(w, results)
    realtime_md(w, results)
    threads_section_md(w, results)
    _exactly_once_md(w, results)
    _versions_md(w)
    _running_md(w, results)
    return "\n".join(out)


from bench.chart import chart, scaling_chart  # noqa: E402  (the figures: bench/chart.py)


def render(results: dict[str, Any], doc: str | None = None, png: str | None = None,
           docs_dir: str | None = None, versus: str | None = None) -> None:
    """Write the page and both charts (into ``docs_dir``, default docs/; ``doc``/``png`` override single paths)."""
    d = docs_dir or DOCS
    doc, png = doc or os.path.join(d, DOC_NAME), png or os.path.join(d, PNG_NAME)
    spng = os.path.join(os.path.dirname(png), SCALING_PNG_NAME)
    if "targets" not in results:
        results["targets"] = evaluate_targets(results)
    text = markdown(results)
    if versus:  # an earlier run beside this one (bench/versus.py)
        from bench.versus import versus_md

        with open(versus) as f:
            old = json.load(f)
        old["targets"] = evaluate_targets(old)
        text += "\n" + versus_md(results, old, versus)
    with open(doc, "w") as f:
        f.write(text)
    chart(results, png)
    written = [doc, png]
    if _ok(results.get("scaling")) and scaling_chart(results, spng):
        written.append(spng)
    print("[render] wrote " + ", ".join(os.path.relpath(p, REPO) for p in written), file=sys.stderr)


def main() -> None:
    import argparse

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("results", nargs="?", default=os.path.join(REPO, "bench", "results", "latest.json"))
    ap.add_argument("--docs-dir", default=None, help="write PERFORMANCE.md and the charts here instead of docs/")
    ap.add_argument("--versus", default=None, help="an earlier results JSON to set beside this run (bench/versus.py)")
    args = ap.parse_args()
    with open(args.results) as f:
        results = json.load(f)
    results["targets"] = evaluate_targets(results)
    if args.docs_dir:
        os.makedirs(args.docs_dir, exist_ok=True)
    render(results, docs_dir=args.docs_dir, versus=args.versus)


if __name__ == "__main__":
    main()
