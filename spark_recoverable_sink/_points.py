"""Named points on the data path where a test can stop, fail or kill the process.

In production every :func:`point` call returns at once: nothing is installed.
The hooks themselves live with the tests, outside this package. A test
installs one of two ways:

* in its own process: ``install(fn)`` (and ``install(None)`` to remove it);
* in processes it does not control (Spark's Python workers, subprocesses):
  the environment variable ``RKS_TEST_HOOKS`` names a module, importable in
  that process, whose ``point(name, coords)`` function is installed the first
  time this module is imported there.

A hook is called as ``fn(name, coords)`` with ``coords`` a dict of the
point's coordinates (``batch``, ``partition``, ``rows``, ...). It may return
(carry on), block (park the caller until the test releases it), raise (an
injected failure) or end the process.
"""

from __future__ import annotations

import importlib
import os
from typing import Any, Callable

__all__ = ["point", "install", "ENV"]

ENV = "RKS_TEST_HOOKS"

Hook = Callable[[str, dict[str, Any]], None]
_hook: Hook | None = None


def install(fn: Hook | None) -> None:
    """Install ``fn`` as this process's hook (``None`` removes it)."""
    global _hook
    _hook = fn


def point(name: str, **coords: Any) -> None:
    """Mark a named point; a no-op unless a test installed a hook."""
    if _hook is not None:
        _hook(name, coords)


def _from_env() -> None:
    spec = os.environ.get(ENV)
    if spec:
        install(importlib.import_module(spec).point)


_from_env()
