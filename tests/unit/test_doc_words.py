"""The sink's own words are defined where a user first meets them: in a user's document (tests/docs.py), the first
time a word of :data:`WORDS` is used in prose, docs/guarantees.md's glossary (``## Words``) is already linked, or is
the section it stands in; and the glossary defines every one of them."""

from __future__ import annotations

import os
import re

from ..docs import REPO, read, split_blocks, tables, user_doc_paths

#: The words of the sink's inner workings a user meets in the docs (``part`` is defined too, but is also plain
#: English: "in part"; it is not checked).
WORDS = ("lane", "unit", "settle", "drain", "replay", "adopt", "slot", "marker")
GLOSSARY = f"{REPO}/docs/guarantees.md"
_LINK = re.compile(r"\]\((?:[\w./]*guarantees\.md)?#words\)")
_SPAN = re.compile(r"(`+)(.+?)\1")


def _prose_lines(path: str) -> list[str]:
    """``path``'s lines outside code blocks, code spans blanked (``sink.drain`` and ``rks replay`` are names)."""
    _blocks, prose = split_blocks(read(path), path)
    return [_SPAN.sub("", line) for line in prose]


def _first_use(lines: list[str], word: str) -> int | None:
    pattern = re.compile(rf"\b{word}(s|ed|ing|es)?\b(?! test)", re.I)  # (a "unit test" is not a unit)
    return next((i for i, line in enumerate(lines) if pattern.search(line)), None)


def test_the_glossary_defines_every_word():
    (words,) = [t for t in tables(GLOSSARY) if t[0][0] == "word"]
    assert {row[0] for row in words[1:]} >= set(WORDS) | {"part", "pending"}


def test_every_user_doc_links_the_glossary_before_it_uses_a_word_of_it():
    problems = []
    for path in user_doc_paths():
        lines = _prose_lines(path)
        if path == GLOSSARY:
            defined = next(i for i, line in enumerate(lines) if line.startswith("## Words"))
        else:
            defined = next((i for i, line in enumerate(read(path).splitlines()) if _LINK.search(line)), None)
        for word in WORDS:
            first = _first_use(lines, word)
            if first is not None and (defined is None or first < defined):
                problems.append(f"{os.path.basename(path)}:{first + 1}: {word}")
    assert problems == []


def test_the_check_finds_a_word_used_before_the_link():
    lines = ["A lane is ...", "[words](guarantees.md#words)", "`sink.drain(spark)` and a unit test"]
    assert _first_use(lines, "lane") == 0 and _first_use(lines, "unit") is None
    assert _first_use([_SPAN.sub("", "`sink.drain(spark)`")], "drain") is None
