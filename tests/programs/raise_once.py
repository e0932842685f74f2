"""Test hook (``RKS_TEST_HOOKS=tests.programs.raise_once``): raise once at the point named by ``RKS_RAISE_AT``.

When it fires it creates the file named by ``RKS_RAISE_FIRED`` (so the test
knows the step really ran and really failed).
"""

from __future__ import annotations

import os
import threading
from typing import Any

_lock = threading.Lock()
_fired = False


class InjectedFault(RuntimeError):
    pass


def point(name: str, coords: dict[str, Any]) -> None:
    global _fired
    if name != os.environ.get("RKS_RAISE_AT"):
        return
    with _lock:
        if _fired:
            return
        _fired = True
    open(os.environ["RKS_RAISE_FIRED"], "w").close()
    raise InjectedFault(f"injected at {name} {coords}")
