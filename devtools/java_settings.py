"""The migration guide's table of the Java producer's settings, rendered from ``javaconf.TABLE``.

``python -m devtools.java_settings`` writes the table between the markers of
``docs/migrating-from-spark-kafka.md``; ``--check`` only compares (exit 1 when
the doc differs). ``tests/unit/test_javaconf_doc.py`` fails when they differ,
so the guide and the code cannot drift.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from typing import Iterable

from spark_recoverable_sink.javaconf import REFUSED, TABLE, JavaSetting

__all__ = ["BEGIN", "END", "DOC", "render_table", "splice", "main"]

BEGIN = "<!-- BEGIN java-producer-settings -->"
END = "<!-- END java-producer-settings -->"
DOC = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs",
                   "migrating-from-spark-kafka.md")
_NAME = re.compile(r"(?<![\w`])([a-z_]+(?:\.[a-z_*]+)+(?:=\w+)?|acks|retries|oauth_cb|partitioner)(?![\w`])")


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render_table(table: Iterable[JavaSetting] = TABLE) -> str:
    """The Markdown table of ``table``, one row per Java setting, in alphabetical order."""
    rows = ["| Java producer setting (`kafka.` option) | librdkafka | Status | Why |", "|---|---|---|---|"]
    for s in sorted(table, key=lambda s: s.java):
        lib = _NAME.sub(r"`\1`", _cell(s.librdkafka))
        reason = f"Refused: {s.reason}" if s.status == REFUSED and s.convert is None else s.reason
        rows.append(f"| `{s.java}` | {lib} | {s.status} | {_cell(reason)}{'' if reason.endswith('.') else '.'} |")
    return "\n".join(rows) + "\n"


def splice_between(doc: str, begin: str, end: str, table: str) -> str:
    """``doc`` with what stands between ``begin`` and ``end`` replaced by ``table`` (every generated doc table).

    Raises:
        ValueError: the markers are missing or out of order.
    """
    start, stop = doc.find(begin), doc.find(end)
    if start < 0 or stop < start:
        raise ValueError(f"the doc must hold {begin} and then {end}")
    return doc[:start + len(begin)] + "\n" + table + doc[stop:]


def splice(doc: str, table: str) -> str:
    """``doc`` with what stands between :data:`BEGIN` and :data:`END` replaced by ``table``.

    Raises:
        ValueError: the markers are missing or out of order.
    """
    return splice_between(doc, BEGIN, END, table)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only compare; exit 1 when the doc differs")
    args = parser.parse_args(argv)
    with open(DOC, encoding="utf-8") as f:
        doc = f.read()
    new = splice(doc, render_table())
    if args.check:
        if new != doc:
            print(f"{DOC}: the Java settings table differs from javaconf.TABLE; run python -m devtools.java_settings",
                  file=sys.stderr)
            return 1
        return 0
    if new != doc:
        with open(DOC, "w", encoding="utf-8") as f:
            f.write(new)
        print(f"{DOC}: table written ({len(TABLE)} settings)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
