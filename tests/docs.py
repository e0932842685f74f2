"""The project's Markdown documents read as the tests need them: code blocks, links, heading anchors, tables.

README.md and docs/*.md. A fenced block's *marker* is an HTML comment ``<!-- runnable: KIND -->`` on the
last non-blank line before its fence, one of :data:`MARKERS`: what tests/spark/test_doc_quickstart.py does with it. Heading anchors are GitHub's: the heading's text lower-cased, every character
but letters, digits, ``_``, ``-`` and spaces dropped, spaces turned into ``-``, a repeated anchor suffixed ``-1``,
``-2``, ...
"""

from __future__ import annotations

import glob
import os
import re
from dataclasses import dataclass

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

#: The markers a block may carry, and what the tests do with it (every Python block is also compiled, its imports
#: and options checked: tests/unit/test_doc_samples.py).
MARKERS = {
    "spark": "run as a script, with its own SparkSession, against the test broker",
    "connect": "run as a script against a local Spark Connect server (SPARK_REMOTE)",
    "broker": "run as a script against the test broker (no Spark)",
    "spark-submit": "a shell block, run by bash from a copy of the repository's templates/ and conf/",
    "databricks": "compiled only: it needs a Databricks workspace",
}

_FENCE = re.compile(r"^(\s*)(```+|~~~+)\s*([\w+-]*)")
_MARKER = re.compile(r"^<!--\s*runnable:\s*([\w-]+)\s*-->$")
_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
_CODE_SPAN = re.compile(r"(`+)(.+?)\1", re.DOTALL)
_LINK = re.compile(r"(?<![\\])!?\[([^\]]*)\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_HTML_ID = re.compile(r"<a\s+(?:name|id)=\"([^\"]+)\"")


#: The documents written for the developers of the package, not its users: they may name its modules and inner
#: workings (the others say what a user does, in the package's public names).
DEVELOPER_DOCS = ("CHANGELOG.md", "DESIGN.md", "PERFORMANCE.md", "RELIABILITY.md")


def doc_paths(root: str = REPO) -> list[str]:
    """README.md and every docs/*.md under ``root``, sorted."""
    return [os.path.join(root, "README.md")] + sorted(glob.glob(os.path.join(root, "docs", "*.md")))


def user_doc_paths(root: str = REPO) -> list[str]:
    """README.md and the docs/*.md written for users (every one but :data:`DEVELOPER_DOCS`)."""
    return [p for p in doc_paths(root) if os.path.basename(p) not in DEVELOPER_DOCS]


def read(path: str) -> str:
    with open(path, encoding="utf-8") as f:
        return f.read()


@dataclass(frozen=True)
class Block:
    """A fenced code block: its document, the line of its opening fence (1-based), language, marker and text."""

    path: str
    line: int
    lang: str
    marker: str | None
    source: str

    @property
    def where(self) -> str:
        return f"{os.path.relpath(self.path, REPO)}:{self.line}"


def split_blocks(text: str, path: str = "") -> tuple[list[Block], list[str]]:
    """The fenced blocks of ``text``, and its lines with every fenced block's lines blanked (prose only)."""
    lines = text.splitlines()
    prose = list(lines)
    blocks: list[Block] = []
    i = 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        indent, fence, lang = m.group(1), m.group(2), m.group(3).lower()
        before = next((ln.strip() for ln in reversed(lines[:i]) if ln.strip()), "")
        marker = _MARKER.match(before)
        j = i + 1
        while j < len(lines) and not lines[j].strip().startswith(fence[0] * len(fence)):
            j += 1
        body = [ln[len(indent):] if ln.startswith(indent) else ln.lstrip() for ln in lines[i + 1:j]]
        blocks.append(Block(path, i + 1, lang, marker.group(1) if marker else None, "\n".join(body) + "\n"))
        for k in range(i, min(j + 1, len(lines))):
            prose[k] = ""
        i = j + 1
    return blocks, prose


def code_blocks(path: str) -> list[Block]:
    return split_blocks(read(path), path)[0]


def section_of(block: Block) -> str:
    """The anchor of the heading ``block`` stands under (``""`` before the first)."""
    _blocks, prose = split_blocks(read(block.path), block.path)
    for line in reversed(prose[:block.line - 1]):
        m = _HEADING.match(line)
        if m:
            return slug(m.group(2))
    return ""


def slug(heading: str) -> str:
    """GitHub's anchor of a heading's Markdown text."""
    text = _LINK.sub(lambda m: m.group(1), heading)
    text = text.replace("`", "").lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: str) -> set[str]:
    """Every anchor a link into ``path`` may name: its headings' (GitHub's slugs) and explicit HTML ids."""
    _blocks, prose = split_blocks(read(path), path)
    seen: dict[str, int] = {}
    out: set[str] = set()
    for line in prose:
        out.update(_HTML_ID.findall(line))
        m = _HEADING.match(line)
        if not m:
            continue
        base = slug(m.group(2))
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return out


def links(path: str) -> list[tuple[int, str]]:
    """``(line, target)`` of every Markdown link and image in ``path``'s prose (not in code blocks or spans)."""
    _blocks, prose = split_blocks(read(path), path)
    text = "\n".join(prose)
    text = _CODE_SPAN.sub(lambda m: "code" + "\n" * m.group(0).count("\n"), text)
    return [(text.count("\n", 0, m.start()) + 1, m.group(2)) for m in _LINK.finditer(text)]


def link_problems(paths: list[str]) -> list[str]:
    """Links of ``paths`` whose file or anchor does not exist; web and mail links are not followed."""
    problems = []
    cache: dict[str, set[str]] = {}
    for path in paths:
        for line, target in links(path):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # https:, mailto:, ...
                continue
            file_part, _, anchor = target.partition("#")
            dest = os.path.normpath(os.path.join(os.path.dirname(path), file_part)) if file_part else path
            where = f"{os.path.relpath(path, REPO)}:{line}: {target}"
            if not os.path.exists(dest):
                problems.append(f"{where}: no file {os.path.relpath(dest, REPO)}")
                continue
            if anchor and dest.endswith(".md"):
                if dest not in cache:
                    cache[dest] = anchors(dest)
                if anchor not in cache[dest]:
                    problems.append(f"{where}: no anchor #{anchor} in {os.path.relpath(dest, REPO)}")
    return problems


def tables(path: str) -> list[list[list[str]]]:
    """The Markdown tables of ``path``'s prose: each a list of rows (the header first), each a list of cells."""
    _blocks, prose = split_blocks(read(path), path)
    out: list[list[list[str]]] = []
    current: list[list[str]] = []
    for line in prose + [""]:
        s = line.strip()
        if s.startswith("|") and s.endswith("|"):
            cells = [c.strip() for c in re.split(r"(?<!\\)\|", s[1:-1])]
            if not all(re.fullmatch(r":?-+:?", c) for c in cells):  # the header's rule
                current.append(cells)
            continue
        if current:
            out.append(current)
            current = []
    return out
