"""The Databricks notebook's cells (templates/databricks_notebook.py) and stand-ins for the platform's globals.

Shared by tests/spark/test_notebook.py (in the test process, PySpark 4.2) and
tests/programs/compat_app.py (its ``notebook`` scenario, a release's own Python): the
standard library only, so that it imports in any of the tier's environments.

:func:`run_cells` executes the notebook's Python cells in order in one
namespace, as a notebook does; the ``%md`` and ``%pip`` cells (all ``# MAGIC``
lines) are skipped. :class:`FakeDbutils` has only what the notebook uses
(widgets, a secret scope, ``library.restartPython``); ``display`` is a
callable that records what it is given.
"""

from __future__ import annotations

import os
from typing import Any, Callable

__all__ = ["NOTEBOOK", "HEADER", "SEP", "DS_SKIPPED", "cells", "is_magic", "FakeDbutils", "run_cells"]

#: The notebook of this checkout (the real path: the compatibility tier reaches tests/ through a link).
NOTEBOOK = os.path.join(os.path.dirname(os.path.dirname(os.path.realpath(__file__))), "templates",
                        "databricks_notebook.py")
HEADER = "# Databricks notebook source"
SEP = "\n# COMMAND ----------\n"
#: The start of what the data-source cell prints where PySpark has no streaming Arrow writers (before 4.1).
DS_SKIPPED = "The data source section is skipped"


def cells(path: str = NOTEBOOK) -> list[str]:
    """The notebook's cells, in order (the header line checked and dropped)."""
    with open(path, encoding="utf-8") as fh:
        text = fh.read()
    first, _, body = text.partition("\n")
    assert first == HEADER, f"{path} is not a Databricks source notebook: {first!r}"
    return [c.strip("\n") for c in body.split(SEP)]


def is_magic(cell: str) -> bool:
    """A cell that is not Python (``%md``, ``%pip``): every line a ``# MAGIC`` line."""
    return all(line.startswith("# MAGIC") for line in cell.splitlines())


class _Widgets:
    def __init__(self, values: dict[str, str]) -> None:
        self.values: dict[str, str] = values
        self.defined: dict[str, str] = {}
        self.read: list[str] = []

    def text(self, name: str, default: str, label: str | None = None) -> None:
        self.defined[name] = default

    def get(self, name: str) -> str:
        if name not in self.defined:
            raise KeyError(f"InputWidgetNotDefined: {name}")  # as Databricks: defined before read
        self.read.append(name)
        return self.values.get(name, self.defined[name])


class _Secrets:
    def __init__(self, scopes: dict[tuple[str, str], str]) -> None:
        self.scopes = scopes
        self.calls: list[tuple[str, str]] = []

    def get(self, scope: str, key: str) -> str:
        self.calls.append((scope, key))
        return self.scopes[(scope, key)]


class _Library:
    def __init__(self) -> None:
        self.restarts = 0

    def restartPython(self) -> None:  # noqa: N802 - dbutils' name
        self.restarts += 1


class FakeDbutils:
    """``dbutils`` with only what the notebook uses: widgets set to ``widgets``, one secret scope ``kafka``."""

    def __init__(self, widgets: dict[str, str], secret: str) -> None:
        self.widgets = _Widgets(widgets)
        self.secrets = _Secrets({("kafka", "password"): secret})
        self.library = _Library()


def run_cells(spark: Any, dbutils: FakeDbutils, display: Callable[[Any], None], until: str | None = None,
              path: str = NOTEBOOK) -> dict[str, Any]:
    """Exec the Python cells in order (up to the first one containing ``until``); returns the namespace.

    The namespace's ``__name__`` is ``__main__``, as in a notebook: functions
    the cells define are pickled by value for Spark's workers.

    Raises:
        Exception: whatever a cell raised (the cell's index is in the traceback's file name).
    """
    ns: dict[str, Any] = {"__name__": "__main__", "spark": spark, "dbutils": dbutils, "display": display}
    for i, cell in enumerate(cells(path)):
        if is_magic(cell):
            continue
        if until is not None and until in cell:
            break
        exec(compile(cell, f"{path}#cell{i}", "exec"), ns)  # noqa: S102 - the notebook under test
    return ns
