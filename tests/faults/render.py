"""Render the fault results JSON as the Markdown table of docs/RELIABILITY.md.

    python -m tests.faults.render                      # print the table
    python -m tests.faults.render docs/RELIABILITY.md  # replace the table between the markers in place

Reads ``RKS_FAULT_RESULTS`` or tests/faults/results/last_run.json.
"""

from __future__ import annotations

import json
import sys

from tests.faults.scenario_results import results_path

START, END = "<!-- fault-results:start -->", "<!-- fault-results:end -->"


def _fmt(v) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.1f}"
    return str(v)


def table(data: dict) -> str:
    rows = sorted(data.get("scenarios", {}).values(), key=lambda r: r["scenario"])
    out = [f"Last run: {data.get('updated_at', '?')} on {data.get('machine', '?')}; broker: "
           f"{data.get('broker', 'not recorded (runs before the move to Apache Kafka: the stand-in broker)')}.", "",
           "| scenario | status | rows sent | distinct ids | lost | duplicates | fault to full delivery (s) | test (s) |",
           "|---|---|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        status = r["status"]
        out.append(f"| {r['scenario']}: {r['title']} | {status} | {_fmt(r.get('rows_sent'))} | "
                   f"{_fmt(r.get('distinct_ids'))} | {_fmt(r.get('lost'))} | {_fmt(r.get('duplicates'))} | "
                   f"{_fmt(r.get('recovery_s'))} | {_fmt(r.get('seconds'))} |")
    failed = [r for r in rows if r["status"] != "passed"]
    if failed:
        out += ["", "Not passing in that run:", ""]
        for r in failed:
            why = (r.get("failure") or "").strip().splitlines()
            out.append(f"- `{r['scenario']}` ({r['status']}): {why[0][:300] if why else ''}")
    return "\n".join(out)


def main(argv: list[str]) -> int:
    with open(results_path()) as f:
        text = table(json.load(f))
    if not argv:
        print(text)
        return 0
    path = argv[0]
    with open(path) as f:
        doc = f.read()
    a, b = doc.index(START) + len(START), doc.index(END)
    with open(path, "w") as f:
        f.write(doc[:a] + "\n" + text + "\n" + doc[b:])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
