"""The reference tables of the docs, rendered from the code: the sink's options and the metric names.

* ``docs/configuration.md``, between :data:`OPTIONS_BEGIN` and
  :data:`OPTIONS_END`: one row per :class:`SinkConfig` field (its type, its
  default, the text of its docstring's ``Attributes``), then, between
  :data:`KEYWORDS_BEGIN` and :data:`KEYWORDS_END`, the keywords of
  :class:`RecoverableKafkaSink` that are not ``SinkConfig`` fields (their
  defaults from the signature, their text from its ``Args``, whether the
  data source takes them from :mod:`spark_recoverable_sink.driver.options`),
  and between :data:`METHODS_BEGIN` and :data:`METHODS_END` the sink's calls
  (their signatures and the first line of their docstrings);
* ``docs/monitoring.md``, between :data:`METRICS_BEGIN` and :data:`METRICS_END`:
  one row per metric family of :mod:`spark_recoverable_sink.driver.metrics`.

``python -m devtools.config_doc`` writes them; ``--check`` only compares (exit 1
when a doc differs). ``tests/unit/test_config_doc.py`` fails when they differ,
so the reference and the code cannot drift.
"""

from __future__ import annotations

import argparse
import dataclasses
import inspect
import os
import re
import sys
import typing
from typing import Any, Callable

from devtools.java_settings import splice_between
from spark_recoverable_sink.config import SinkConfig
from spark_recoverable_sink.driver.metrics import FAMILIES
from spark_recoverable_sink.driver.options import DRIVER_STEP_KEYWORDS
from spark_recoverable_sink.driver.sink import RecoverableKafkaSink

__all__ = ["DOCS", "CONFIG_DOC", "METRICS_DOC", "OPTIONS_BEGIN", "OPTIONS_END", "KEYWORDS_BEGIN", "KEYWORDS_END",
           "METHODS_BEGIN", "METHODS_END", "METRICS_BEGIN", "METRICS_END", "docstring_entries", "options_table",
           "keywords_table", "methods_table", "metrics_table", "render", "main"]

_DOCS_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs")
CONFIG_DOC = os.path.join(_DOCS_DIR, "configuration.md")
METRICS_DOC = os.path.join(_DOCS_DIR, "monitoring.md")
OPTIONS_BEGIN, OPTIONS_END = "<!-- BEGIN sink-options -->", "<!-- END sink-options -->"
KEYWORDS_BEGIN, KEYWORDS_END = "<!-- BEGIN sink-keywords -->", "<!-- END sink-keywords -->"
METHODS_BEGIN, METHODS_END = "<!-- BEGIN sink-methods -->", "<!-- END sink-methods -->"
METRICS_BEGIN, METRICS_END = "<!-- BEGIN metrics -->", "<!-- END metrics -->"

#: SinkConfig fields under the name users give them (``kafka_conf`` is stored as its items).
_USER_NAME = {"kafka_conf_items": "kafka_conf"}
_ROLE = re.compile(r":[a-z]+:`~?\.*([^`]+)`")
_INTERNAL = re.compile(r":(?:mod|data):`[^`]+`")
_DOC_PAGE = re.compile(r"\bdocs/([a-z-]+)\.md(#[a-z0-9_-]+)?")
_GIB, _DAY = 1024 ** 3, 24 * 3600


def docstring_entries(doc: str, section: str) -> dict[str, str]:
    """The entries of a Google-style docstring ``section`` (``Attributes``, ``Args``): name -> one-line text.

    Each entry is one option's row of a user's table, so each says what its option does, and nothing sends a
    user into the code: reST roles of classes and functions and double backquotes become Markdown code, a
    ``docs/<page>.md`` a link to that page.

    Raises:
        ValueError: the docstring has no such section; an entry names several options (``a / b: text``, one
            meaning in two rows) or a module or constant (``:mod:``, ``:data:``).
    """
    lines = inspect.cleandoc(doc).splitlines()
    try:
        start = lines.index(f"{section}:") + 1
    except ValueError:
        raise ValueError(f"no {section}: section in the docstring") from None
    entries: dict[str, list[str]] = {}
    current: list[str] = []
    for line in lines[start:]:
        if line.strip() and not line.startswith("    "):
            break  # the next section
        if line.startswith("    ") and not line.startswith("        "):
            names, _, text = line.strip().partition(": ")
            if " / " in names:
                raise ValueError(f"the entry {names} gives one text to several options: give each its own")
            current = [text]
            entries[names.strip().lstrip("*")] = current
        elif line.strip():
            current.append(line.strip())
    return {name: _markdown(name, " ".join(parts)) for name, parts in entries.items()}


def _markdown(name: str, text: str) -> str:
    internal = _INTERNAL.search(text)
    if internal:
        raise ValueError(f"the entry of {name} names a module or constant ({internal.group(0)}): a user reads it; "
                         "say what it does, or name a page of docs/")
    text = _ROLE.sub(r"`\1`", text).replace("``", "`").replace("|", "\\|")
    return _DOC_PAGE.sub(lambda m: f"[{_title(m.group(1))}]({m.group(1)}.md{m.group(2) or ''})", text)


def _title(page: str) -> str:
    """How the docs name ``docs/<page>.md`` in a sentence (``[operations](operations.md)``).

    Raises:
        ValueError: no such page (a docstring names a page that does not exist).
    """
    if not os.path.exists(os.path.join(_DOCS_DIR, f"{page}.md")):
        raise ValueError(f"a docstring names docs/{page}.md, which does not exist")
    return page.split("-")[0]


def _type(hint: Any) -> str:
    if isinstance(hint, str):  # an annotation kept as text (the sink's signature)
        return "Avro \\| JsonSchema \\| None" if "RegistryFormat" in hint else hint.replace("|", "\\|")
    args = typing.get_args(hint)
    if typing.get_origin(hint) is tuple:
        return "list of str" if args and args[0] is str else "list"
    if args:  # X | None
        return " \\| ".join(_type(a) for a in args)
    return "None" if hint is type(None) else getattr(hint, "__name__", str(hint))


def _default(name: str, value: Any) -> str:
    if value is inspect.Parameter.empty or value is dataclasses.MISSING:
        return "required"
    if isinstance(value, int) and not isinstance(value, bool) and name.endswith("_bytes") and value % _GIB == 0:
        return f"`{value}` ({value // _GIB} GiB)"
    if isinstance(value, float) and name.endswith("_s") and value >= _DAY and value % _DAY == 0:
        return f"`{value:g}` ({value / _DAY:g} days)"
    if isinstance(value, tuple) and not value:
        return "none"
    if isinstance(value, str):
        return f'`"{value}"`'
    return f"`{value!r}`"


def _sink_params() -> dict[str, inspect.Parameter]:
    params = dict(inspect.signature(RecoverableKafkaSink.__init__).parameters)
    return {n: p for n, p in params.items() if n != "self" and p.kind is not inspect.Parameter.VAR_KEYWORD}


def options_table() -> str:
    """The options of :class:`SinkConfig`: name, type, default, meaning (the docstring's ``Attributes``).

    Raises:
        ValueError: a field has no entry in the docstring's ``Attributes``.
    """
    text = docstring_entries(SinkConfig.__doc__ or "", "Attributes")
    hints = typing.get_type_hints(SinkConfig)
    params = _sink_params()
    rows = ["| option | type | default | meaning |", "|---|---|---|---|"]
    for f in dataclasses.fields(SinkConfig):
        name = _USER_NAME.get(f.name, f.name)
        if name not in text:
            raise ValueError(f"SinkConfig field {f.name} has no entry in the docstring's Attributes")
        default = f.default if f.default is not dataclasses.MISSING else (
            params[name].default if name in params else dataclasses.MISSING)
        kind = "dict" if name == "kafka_conf" else _type(hints[f.name])
        rows.append(f"| `{name}` | {kind} | {_default(name, default)} | {text[name]} |")
    return "\n".join(rows) + "\n"


def keywords_table() -> str:
    """The keywords of :class:`RecoverableKafkaSink` that are not :class:`SinkConfig` fields, and whether the data
    source takes each as an option (it refuses those of :data:`DRIVER_STEP_KEYWORDS`).

    Raises:
        ValueError: a keyword has no entry in the class docstring's ``Args``.
    """
    text = docstring_entries(RecoverableKafkaSink.__doc__ or "", "Args")
    fields = {_USER_NAME.get(f.name, f.name) for f in dataclasses.fields(SinkConfig)}
    rows = ["| keyword | type | default | data source | meaning |", "|---|---|---|---|---|"]
    for name, p in _sink_params().items():
        if name in fields:
            continue
        if name not in text:
            raise ValueError(f"RecoverableKafkaSink keyword {name} has no entry in the docstring's Args")
        source = "no" if name in DRIVER_STEP_KEYWORDS else f'yes: `.option("{name}", ...)`'
        rows.append(f"| `{name}` | {_type(p.annotation)} | {_default(name, p.default)} | {source} | {text[name]} |")
    return "\n".join(rows) + "\n"


#: The sink's calls a user makes, as its table shows them.
_METHODS = (("sink", "__call__"), ("sink.write", "write"), ("sink.drain", "drain"))


def methods_table() -> str:
    """The calls of :class:`RecoverableKafkaSink`: signature (without annotations), what they return, the first
    line of their docstring."""
    rows = ["| call | returns | |", "|---|---|---|"]
    for shown, attr in _METHODS:
        method = getattr(RecoverableKafkaSink, attr)
        sig = inspect.signature(method)
        params = [str(p.replace(annotation=inspect.Parameter.empty)) for p in list(sig.parameters.values())[1:]]
        returns = "—" if sig.return_annotation in (None, "None") else f"`{sig.return_annotation}`"
        first = _markdown(attr, inspect.cleandoc(method.__doc__ or "").splitlines()[0])
        rows.append(f"| `{shown}({', '.join(params)})` | {returns} | {first} |")
    return "\n".join(rows) + "\n"


def metrics_table() -> str:
    """One row per metric family of the driver's Prometheus registry (exposed name, type, help)."""
    rows = ["| metric | type | meaning |", "|---|---|---|"]
    for name, kind, doc in FAMILIES:
        shown = f"{name}_total" if kind == "counter" else name
        suffix = " (`_bucket`, `_sum`, `_count`)" if kind == "histogram" else ""
        rows.append(f"| `{shown}` | {kind} | {doc}{suffix} |")
    return "\n".join(rows) + "\n"


#: Each doc and the (begin, end, render) of every table it holds.
DOCS: dict[str, tuple[tuple[str, str, Callable[[], str]], ...]] = {
    CONFIG_DOC: ((OPTIONS_BEGIN, OPTIONS_END, options_table), (KEYWORDS_BEGIN, KEYWORDS_END, keywords_table),
                 (METHODS_BEGIN, METHODS_END, methods_table)),
    METRICS_DOC: ((METRICS_BEGIN, METRICS_END, metrics_table),),
}


def render(path: str, doc: str) -> str:
    """``doc`` (the text of ``path``) with every table of :data:`DOCS` rendered anew."""
    for begin, end, table in DOCS[path]:
        doc = splice_between(doc, begin, end, table())
    return doc


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only compare; exit 1 when a doc differs")
    args = parser.parse_args(argv)
    status = 0
    for path in DOCS:
        with open(path, encoding="utf-8") as f:
            doc = f.read()
        new = render(path, doc)
        if new == doc:
            continue
        if args.check:
            print(f"{path}: differs from the code; run python -m devtools.config_doc", file=sys.stderr)
            status = 1
        else:
            with open(path, "w", encoding="utf-8") as f:
                f.write(new)
            print(f"{path}: tables written")
    return status


if __name__ == "__main__":
    sys.exit(main())
