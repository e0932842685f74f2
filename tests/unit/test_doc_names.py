"""The docs name what a user can reach: every error they name is importable from the package root, and the
documents written for users (README.md and docs/*.md but the developers' own, tests/docs.py) send no one into
the package's internal modules, by dotted name or by file."""

from __future__ import annotations

import builtins
import importlib
import inspect
import os
import re

import spark_recoverable_sink
from spark_recoverable_sink import errors

from ..docs import doc_paths, read, user_doc_paths

PACKAGE = "spark_recoverable_sink"
PACKAGE_DIR = os.path.dirname(spark_recoverable_sink.__file__)
#: Subpackages users import by name: the job templates' building blocks (docs/deployment.md).
PUBLIC_SUBPACKAGES = ("jobs",)
_ERROR = re.compile(r"(?<![\w.])([A-Z][A-Za-z0-9]*Error)\b")  # Java's are ...Exception
_DOTTED = re.compile(rf"\b{PACKAGE}((?:\.[A-Za-z_]\w*)+)")
_PY_FILE = re.compile(r"(?<![\w./-])((?:[a-z_]+/)*[a-z_]+\.py)\b")


def _named_errors(path: str) -> set[str]:
    return {n for n in _ERROR.findall(read(path)) if not isinstance(getattr(builtins, n, None), type)}


def _logger_names() -> set[str]:
    """The logger names the package logs under (a user configures logging by them)."""
    names = set()
    for root, _dirs, files in os.walk(PACKAGE_DIR):
        for f in files:
            if f.endswith(".py"):
                names |= set(re.findall(rf'getLogger\("({PACKAGE}[\w.]*)"\)', read(os.path.join(root, f))))
    return names


def _module_files() -> set[str]:
    """Every module of the package as a path inside it (``ids.py``, ``driver/lineage.py``)."""
    out = set()
    for root, _dirs, files in os.walk(PACKAGE_DIR):
        out |= {os.path.relpath(os.path.join(root, f), PACKAGE_DIR) for f in files if f.endswith(".py")}
    return out


def test_every_error_the_docs_name_is_importable_from_the_package_root():
    exported = set(spark_recoverable_sink.__all__)
    ours = {n for n, c in inspect.getmembers(errors, inspect.isclass) if issubclass(c, Exception)}
    problems, named = [], set()
    for path in doc_paths():
        names = _named_errors(path)
        named |= names
        # a user's document may name only exported errors; a developer's, any but one of errors.py not exported
        must = names if path in user_doc_paths() else names & ours
        problems += [f"{os.path.basename(path)}: {n}" for n in sorted(must) if n not in exported
                     or not isinstance(getattr(spark_recoverable_sink, n, None), type)]
    assert {"SettleTimeoutError", "WalReadError", "WalUncleanError", "DeadLetterError"} <= named
    assert problems == []


def test_every_error_of_the_package_is_exported():
    ours = {n for n, c in inspect.getmembers(errors, inspect.isclass) if issubclass(c, Exception)}
    assert set(errors.__all__) == ours
    assert sorted(ours - set(spark_recoverable_sink.__all__)) == []
    star: dict = {}
    exec(f"from {PACKAGE} import *", star)  # noqa: S102 - what `import *` gives a user
    assert ours <= set(star)


def test_the_user_docs_name_no_internal_module():
    loggers, files = _logger_names(), _module_files()
    problems = []
    for path in user_doc_paths():
        text = read(path)
        for m in _DOTTED.finditer(text):
            name = PACKAGE + m.group(1)
            parts = m.group(1).split(".")[1:]
            if name in loggers or parts[0] in PUBLIC_SUBPACKAGES:
                continue
            try:  # a public name of the root (spark_recoverable_sink.RecoverableKafkaSink) is fine
                if parts[0] in spark_recoverable_sink.__all__:
                    continue
                importlib.import_module(f"{PACKAGE}.{parts[0]}")
            except ImportError:
                continue  # not a module either: not ours to judge
            problems.append(f"{os.path.basename(path)}: {name}")
        problems += [f"{os.path.basename(path)}: {f}" for f in _PY_FILE.findall(text)
                     if f in files and not f.startswith(tuple(f"{p}/" for p in PUBLIC_SUBPACKAGES))]
    assert problems == []


def test_the_checks_find_an_internal_module_and_the_errors_a_doc_names():
    assert _DOTTED.search("see spark_recoverable_sink.delivery.exactly_once.lanes").group(1) == \
        ".delivery.exactly_once.lanes"
    assert "driver/lineage.py" in _PY_FILE.findall("(`driver/lineage.py`, no job run)")
    assert "driver/lineage.py" in _module_files() and "ids.py" in _module_files()
    assert "spark_recoverable_sink.sink" in _logger_names()
    assert _ERROR.findall("fails with `WalFullError` (a ValueError), jobs/x.SettingsError") == \
        ["WalFullError", "ValueError"]


#: The job templates, the demo and the Databricks notebook: programs a user copies, so they use the public API only.
TEMPLATES_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "templates")


def _internal_imports(source: str) -> list[str]:
    """What ``source`` imports of the package beyond its public API (the root's ``__all__`` and the public
    subpackages' ``__all__``)."""
    import ast

    public = {PACKAGE: set(spark_recoverable_sink.__all__) | set(PUBLIC_SUBPACKAGES)}
    for sub in PUBLIC_SUBPACKAGES:
        public[f"{PACKAGE}.{sub}"] = set(importlib.import_module(f"{PACKAGE}.{sub}").__all__)
    bad = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == PACKAGE:
            allowed = public.get(node.module or "")
            bad += [f"{node.module}.{a.name}" for a in node.names if allowed is None or a.name not in allowed]
        elif isinstance(node, ast.Import):
            bad += [a.name for a in node.names if a.name.split(".")[0] == PACKAGE and a.name not in public]
    return bad


def test_the_job_templates_import_only_the_public_api():
    programs = sorted(f for f in os.listdir(TEMPLATES_DIR) if f.endswith(".py"))
    assert "databricks_notebook.py" in programs and "demo.py" in programs
    problems = [f"{f}: {name}" for f in programs
                for name in _internal_imports(read(os.path.join(TEMPLATES_DIR, f)))]
    assert problems == []


def test_the_public_api_check_finds_an_internal_import():
    assert _internal_imports("from spark_recoverable_sink.delivery.engine import choose") == \
        ["spark_recoverable_sink.delivery.engine.choose"]
    assert _internal_imports("import spark_recoverable_sink.ids") == ["spark_recoverable_sink.ids"]
    assert _internal_imports("from spark_recoverable_sink import ids, RecoverableKafkaSink") == \
        ["spark_recoverable_sink.ids"]
    assert _internal_imports("from spark_recoverable_sink import jobs as job, delivery_engine\n"
                             "from spark_recoverable_sink.jobs import run_template") == []
