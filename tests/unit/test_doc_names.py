"""The docs name what a user can reach: every error they name is importable from the package root."""

from __future__ import annotations

import builtins
import inspect
import os
import re

import spark_recoverable_sink
from spark_recoverable_sink import errors

from ..docs import doc_paths, read, user_doc_paths

PACKAGE = "spark_recoverable_sink"
_ERROR = re.compile(r"(?<![\w.])([A-Z][A-Za-z0-9]*Error)\b")  # Java's are ...Exception


def _named_errors(path: str) -> set[str]:
    return {n for n in _ERROR.findall(read(path)) if not isinstance(getattr(builtins, n, None), type)}


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


def test_the_check_finds_the_errors_a_doc_names():
    assert _ERROR.findall("fails with `WalFullError` (a ValueError), jobs/x.SettingsError") == \
        ["WalFullError", "ValueError"]
