"""Tier 1: the migration guide's table of Java producer settings is the one ``javaconf.TABLE`` renders."""

from __future__ import annotations

import dataclasses

from devtools.java_settings import BEGIN, DOC, END, main, render_table, splice
from spark_recoverable_sink.javaconf import TABLE


def _doc() -> str:
    with open(DOC, encoding="utf-8") as f:
        return f.read()


def test_the_guide_s_table_is_the_rendered_table():
    doc = _doc()
    assert doc.count(BEGIN) == 1 and doc.count(END) == 1
    between = doc.split(BEGIN, 1)[1].split(END, 1)[0]
    assert between == "\n" + render_table(), "run: python -m devtools.java_settings"
    assert main(["--check"]) == 0


def test_the_check_fails_when_a_row_changes():
    doc = _doc()
    changed = [dataclasses.replace(TABLE[0], reason=TABLE[0].reason + " Changed.")] + list(TABLE[1:])
    assert splice(doc, render_table(changed)) != doc
    assert splice(doc, render_table(TABLE[1:])) != doc
    assert splice(doc, render_table()) == doc


def test_every_setting_has_one_row_with_its_status():
    rows = [line for line in render_table().splitlines()[2:]]
    assert len(rows) == len(TABLE)
    for s, line in zip(sorted(TABLE, key=lambda s: s.java), rows):
        assert line.startswith(f"| `{s.java}` |") and f"| {s.status} |" in line
