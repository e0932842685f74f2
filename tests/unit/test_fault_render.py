"""docs/RELIABILITY.md's table: which recorded run a scenario's row comes from."""

from __future__ import annotations

from tests.faults.render import END, START, render


def _doc(*rows: str) -> str:
    return "# Reliability\n\n" + START + "\n" + "\n".join(rows) + "\n\nRuns:\n\n- `abc1234`: a run\n" + END + "\n"


def _row(name: str, commit: str, seconds: float = 1.0) -> str:
    return f"| {name}: a title | passed | 10 | 10 | 0 | 0 | - | {seconds} | `{commit}` |"


def _data(name: str, commit: str, status: str = "passed", failure: str = "") -> dict:
    return {"commit": commit, "updated_at": "now", "machine": "m", "broker": "b", "scenarios": {name: {
        "scenario": name, "title": "a title", "status": status, "rows_sent": 10, "distinct_ids": 10, "lost": 0,
        "duplicates": 0, "recovery_s": None, "seconds": 2.0, "commit": commit, "failure": failure,
        "finished_at": "now"}}}


def test_a_run_on_an_uncommitted_tree_replaces_no_row_of_a_commit_s():
    out = render(_doc(_row("05_x", "abc1234")), _data("05_x", "def5678+dirty", "failed", "boom"))
    assert _row("05_x", "abc1234") in out
    assert "def5678+dirty" not in out


def test_a_run_on_a_commit_replaces_the_row_and_a_dirty_one_replaces_a_dirty_one():
    out = render(_doc(_row("05_x", "abc1234")), _data("05_x", "def5678"))
    assert _row("05_x", "def5678", 2.0) in out and "`abc1234` |" not in out
    out = render(_doc(_row("05_x", "abc1234+dirty")), _data("05_x", "def5678+dirty"))
    assert _row("05_x", "def5678+dirty", 2.0) in out
    out = render(_doc(), _data("05_x", "def5678+dirty"))
    assert _row("05_x", "def5678+dirty", 2.0) in out, "a scenario with no row takes whatever run there is"
