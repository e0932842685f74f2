"""Import the job files under templates/ (not a package) in tests."""

from __future__ import annotations

import importlib.util
import os
import sys
from types import ModuleType

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def load_job(name: str, filename: str | None = None) -> ModuleType:
    """Import ``templates/<filename>`` (default ``<name>.py``) as module ``name``, once."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, os.path.join(ROOT, "templates", filename or f"{name}.py"))
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod  # dataclass type hints resolve through sys.modules
    spec.loader.exec_module(mod)
    return mod
