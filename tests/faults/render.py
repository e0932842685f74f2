"""Render the fault results as the table of docs/RELIABILITY.md, saying which run each row comes from.

    python -m tests.faults.render                      # print the table
    python -m tests.faults.render docs/RELIABILITY.md  # replace the table between the markers in place

Rows come from the results file (``RKS_FAULT_RESULTS`` or
tests/faults/results/last_run.json, written by every scenario as it ends:
:mod:`.scenario_results`) when there is one, else from the table already in
the doc: a scenario keeps the row of its latest recorded run, with the commit
that run tested (a run on an uncommitted tree replaces no row of a commit's).
A scenario of the suite (a ``test_NN...`` function under
tests/faults/, and the soak) that no recorded run covers gets a row saying
``not run since <commit>``: the commit that last changed its test, which no
recorded run has tested. So the doc never claims a run that did not happen,
and rendering it needs no fault run.
"""

from __future__ import annotations

import glob
import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass

from tests.faults.scenario_results import REPO, code_commit, results_path

START, END = "<!-- fault-results:start -->", "<!-- fault-results:end -->"
COLUMNS = ("scenario", "status", "rows sent", "distinct ids", "lost", "duplicates", "fault to full delivery (s)",
           "test (s)", "run")
_TEST = re.compile(r"^def (test_(\d\d[a-z]?)_\w+)\([^)]*\)[^:]*:\n(?:\s+\"\"\"(.+?)(?:\"\"\"|\n))?", re.MULTILINE)
_ROW = re.compile(r"^\| (?P<key>[\w.-]+): ")
_RUN = re.compile(r"^- `(?P<commit>[^`]+)`: (?P<text>.+)$")


@dataclass(frozen=True)
class Scenario:
    """One scenario of the suite: its number (``01``, ``09a``, ``soak``), the file of its test, a title."""

    number: str
    path: str
    title: str


def catalogue(repo: str = REPO) -> list[Scenario]:
    """Every scenario the suite has: the ``test_NN_...`` functions of tests/faults/test_*.py, and the soak."""
    found: dict[str, Scenario] = {}
    for path in sorted(glob.glob(os.path.join(repo, "tests", "faults", "test_*.py"))):
        with open(path, encoding="utf-8") as f:
            text = f.read()
        head = (text.split('"""')[1].strip().splitlines() or [""])[0] if text.startswith('"""') else ""
        for func, number, doc in _TEST.findall(text):
            title = doc.strip() or (head if head.startswith(f"Scenario {number.lstrip('0')}") else func)
            found.setdefault(number, Scenario(number, os.path.relpath(path, repo), title))
    found["soak"] = Scenario("soak", "tests/programs/soak.py", "make soak: random faults for a few minutes")
    return sorted(found.values(), key=lambda s: s.number)


def last_change(path: str, repo: str = REPO) -> str:
    """The short commit that last changed ``path`` (``unknown`` outside git)."""
    try:
        out = subprocess.run(["git", "-C", repo, "log", "-1", "--format=%h", "--", path], capture_output=True,
                             text=True, timeout=30, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return out or "unknown"


def _fmt(v: object) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.1f}"
    return str(v)


def result_rows(data: dict) -> tuple[dict[str, str], dict[str, str], list[str]]:
    """From a results file: table lines by scenario, the run's legend by commit, and the failure notes."""
    commit = data.get("commit") or "unknown"
    runs = {commit: f"{data.get('updated_at', '?')} on {data.get('machine', '?')}; broker: {data.get('broker', '?')}"}
    rows, failed = {}, []
    for r in data.get("scenarios", {}).values():
        run = r.get("commit") or commit
        if run not in runs:
            runs[run] = f"{r.get('finished_at', '?')} on {data.get('machine', '?')}; broker: {data.get('broker', '?')}"
        rows[r["scenario"]] = (f"| {r['scenario']}: {r['title']} | {r['status']} | {_fmt(r.get('rows_sent'))} | "
                               f"{_fmt(r.get('distinct_ids'))} | {_fmt(r.get('lost'))} | {_fmt(r.get('duplicates'))} | "
                               f"{_fmt(r.get('recovery_s'))} | {_fmt(r.get('seconds'))} | `{run}` |")
        if r["status"] != "passed":
            why = (r.get("failure") or "").strip().splitlines()
            failed.append(f"- `{r['scenario']}` ({r['status']}, `{run}`): {why[0][:300] if why else ''}")
    return rows, runs, failed


def doc_rows(doc: str) -> tuple[dict[str, str], dict[str, str], list[str]]:
    """The rows, runs and failure notes already between the doc's markers (rows of scenarios never run left out)."""
    body = doc[doc.index(START) + len(START):doc.index(END)]
    rows, runs, failed, in_failed = {}, {}, [], False
    for line in body.splitlines():
        m, r = _ROW.match(line), _RUN.match(line)
        if m and "| not run since " not in line:
            rows[m.group("key")] = line
        elif r and not in_failed:
            runs[r.group("commit")] = r.group("text")
        elif line.startswith("Not passing"):
            in_failed = True
        elif in_failed and line.startswith("- "):
            failed.append(line)
    return rows, runs, failed


def table(rows: dict[str, str], runs: dict[str, str], failed: list[str], scenarios: list[Scenario],
          rendered_at: str, changed: dict[str, str]) -> str:
    """The Markdown between the markers: the rows by scenario, one per never-run scenario, the runs' legend.

    ``changed`` maps a scenario number to the commit that last changed its test.
    """
    out = ["Each row is the latest recorded run of its scenario; `run` is the commit that run tested (`+dirty`: "
           "with uncommitted changes), described below the table. A scenario of the suite with no recorded run "
           "says `not run since` the commit that last changed its test. Rendered by `python -m tests.faults.render` "
           f"on the tree of `{rendered_at}`.", "",
           "| " + " | ".join(COLUMNS) + " |", "|---|---|" + "---:|" * 6 + "---|"]
    all_rows = dict(rows)
    for s in scenarios:
        if not any(k == s.number or k.startswith(f"{s.number}_") for k in all_rows):
            all_rows[s.number] = (f"| {s.number}: {s.title} (`{s.path}`) | not run since `{changed[s.number]}` | "
                                  "- | - | - | - | - | - | - |")
    out += [all_rows[k] for k in sorted(all_rows)]
    used = sorted({c for line in all_rows.values() for c in re.findall(r"\| `([^`]+)` \|$", line)})
    out += ["", "Runs:", ""] + [f"- `{c}`: {runs.get(c, 'not described')}" for c in used]
    if failed:
        out += ["", "Not passing in their run:", ""] + failed
    return "\n".join(out)


def _run_of(line: str) -> str:
    """The run (commit) a table line names in its last column."""
    m = re.search(r"\| `([^`]+)` \|$", line)
    return m.group(1) if m else ""


def render(doc: str, data: dict | None, repo: str = REPO) -> str:
    """``doc`` with its table rendered from ``data`` (a results file; ``None``: the doc's own rows) and the suite.

    A scenario's row from ``data`` replaces the doc's unless it comes from a run on an uncommitted tree
    (``+dirty``) and the doc's comes from a commit: such a run is no record of what a commit does.
    """
    rows, runs, failed = doc_rows(doc)
    if data is not None:
        new_rows, new_runs, new_failed = result_rows(data)
        kept = {k for k, line in new_rows.items()  # a run on an uncommitted tree never replaces one on a commit
                if k in rows and _run_of(line).endswith("+dirty") and not _run_of(rows[k]).endswith("+dirty")}
        fresh = set(new_rows) - kept
        failed = [f for f in failed if f.split("`")[1] not in fresh] + \
            [f for f in new_failed if f.split("`")[1] in fresh]
        rows.update({k: line for k, line in new_rows.items() if k in fresh})
        runs.update(new_runs)
    scenarios = catalogue(repo)
    changed = {s.number: last_change(s.path, repo) for s in scenarios}
    text = table(rows, runs, failed, scenarios, code_commit(repo), changed)
    a, b = doc.index(START) + len(START), doc.index(END)
    return doc[:a] + "\n" + text + "\n" + doc[b:]


def main(argv: list[str]) -> int:
    path = argv[0] if argv else os.path.join(REPO, "docs", "RELIABILITY.md")
    with open(path, encoding="utf-8") as f:
        doc = f.read()
    data = None
    if os.path.exists(results_path()):
        with open(results_path(), encoding="utf-8") as f:
            data = json.load(f)
    new = render(doc, data)
    if not argv:
        print(new[new.index(START) + len(START):new.index(END)].strip())
        return 0
    with open(path, "w", encoding="utf-8") as f:
        f.write(new)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
