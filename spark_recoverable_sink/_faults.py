"""Test-only fault hooks: crash the worker process at a named point.

Inactive unless the environment variable ``RKS_FAULT_DIR`` names a directory
when the worker starts. A test arms a fault by writing a file
``<dir>/<point>`` holding the number of rows after which to crash; the first
process that reaches the point with that many rows claims the file (an atomic
rename) and calls ``os._exit`` -- no cleanup, no ``atexit``, like a kill.
"""

from __future__ import annotations

import os

__all__ = ["check", "arm", "ENV"]

ENV = "RKS_FAULT_DIR"
_DIR = os.environ.get(ENV) or None


def arm(fault_dir: str, point: str, after_rows: int) -> None:
    """Arm a one-shot crash at ``point`` once a task has handled ``after_rows`` rows."""
    os.makedirs(fault_dir, exist_ok=True)
    tmp = os.path.join(fault_dir, f".{point}.tmp")
    with open(tmp, "w") as f:
        f.write(str(after_rows))
    os.replace(tmp, os.path.join(fault_dir, point))


def check(point: str, rows: int) -> None:
    """Crash here if a fault is armed for ``point`` and ``rows`` reached its threshold."""
    if _DIR is None:
        return
    path = os.path.join(_DIR, point)
    try:
        with open(path) as f:
            threshold = int(f.read().strip() or 0)
    except (FileNotFoundError, ValueError):
        return
    if rows < threshold:
        return
    try:
        os.rename(path, f"{path}.fired.{os.getpid()}")
    except FileNotFoundError:
        return  # another process claimed it
    os._exit(137)
