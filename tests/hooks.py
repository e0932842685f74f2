"""Test hooks for the sink's named points (``spark_recoverable_sink._points``): park or crash a process there.

Installed in every process that imports the package with these variables set
(``tests/conftest.py`` sets them before Spark starts, so Spark's Python
workers inherit them)::

    RKS_TEST_HOOKS=tests.hooks     # which module _points loads (the repo root must be on PYTHONPATH)
    RKS_HOOK_DIR=<directory>       # where the test and the hooked processes exchange files

Control is by files in ``RKS_HOOK_DIR`` (no sockets, no shared memory: it
works across Spark's forked workers, subprocesses and local-cluster executors):

* the test **arms** a hook: ``arm.<tag>.json`` holds the point's name, the
  coordinates to match and what to do (``park`` or ``crash``);
* the first process whose point matches **claims** it by renaming that file
  (atomic: exactly one process wins);
* ``park``: the claimer writes ``parked.<tag>.json`` (its pid, the point, the
  coordinates) and blocks until ``release.<tag>`` exists. The test waits for
  the parked file -- an event the code reports, never a race to catch --
  injects its fault from outside (kill -9 of that pid, SIGSTOP of the broker,
  a proxy cut) and releases. A process parked longer than its safety timeout
  writes ``expired.<tag>.json`` and raises :class:`HookTimeout` (the task
  fails loudly instead of hanging CI);
* ``crash``: the claimer writes ``fired.<tag>.json`` and ends with
  ``os._exit(137)`` -- no cleanup, no ``atexit``, like a kill.

Coordinates match exactly (``batch=1``) or by bound with a suffix:
``batch__ge=1``, ``rows__ge=3000``. This module imports nothing from the
package (it is imported while the package itself is being imported).
"""

from __future__ import annotations

import json
import os
import sys
import time
import uuid
from dataclasses import dataclass
from typing import Any

__all__ = ["ENV_DIR", "HookTimeout", "Hooks", "Parked", "Crash", "point", "env_for"]

ENV_DIR = "RKS_HOOK_DIR"
POLL_S = 0.01
DEFAULT_PARK_TIMEOUT_S = 180.0


class HookTimeout(RuntimeError):
    """A parked process was never released (the test is broken): fail, never hang."""


def _write_json(path: str, data: dict[str, Any]) -> None:
    tmp = f"{path}.tmp.{os.getpid()}"
    with open(tmp, "w") as f:
        json.dump(data, f)
    os.replace(tmp, path)


def _read_json(path: str) -> dict[str, Any] | None:
    try:
        with open(path) as f:
            return json.load(f)
    except (FileNotFoundError, ValueError):
        return None


def _matches(match: dict[str, Any], coords: dict[str, Any]) -> bool:
    for key, want in match.items():
        name, _, op = key.partition("__")
        have = coords.get(name)
        if have is None:
            return False
        if op == "ge":
            if have < want:
                return False
        elif op == "le":
            if have > want:
                return False
        elif have != want:
            return False
    return True


# -- the hooked process side ---------------------------------------------------------------------


def point(name: str, coords: dict[str, Any]) -> None:
    """Called by ``_points.point``: park or crash here if the test armed this point."""
    d = os.environ.get(ENV_DIR)
    if not d:
        return
    try:
        entries = os.listdir(d)
    except FileNotFoundError:
        return
    for entry in sorted(entries):
        if not (entry.startswith("arm.") and entry.endswith(".json")):
            continue
        path = os.path.join(d, entry)
        spec = _read_json(path)
        if spec is None or spec.get("point") != name or not _matches(spec.get("match", {}), coords):
            continue
        try:
            os.rename(path, f"{path}.claimed.{os.getpid()}")
        except FileNotFoundError:
            continue  # another process claimed it first
        tag = spec["tag"]
        here = {"pid": os.getpid(), "point": name, "coords": coords, "time": time.time()}
        if spec["action"] == "crash":
            _write_json(os.path.join(d, f"fired.{tag}.json"), here)
            os._exit(137)
        _park(d, tag, here, float(spec.get("timeout_s", DEFAULT_PARK_TIMEOUT_S)))


def _park(d: str, tag: str, here: dict[str, Any], timeout_s: float) -> None:
    _write_json(os.path.join(d, f"parked.{tag}.json"), here)
    release = os.path.join(d, f"release.{tag}")
    end = time.monotonic() + timeout_s
    while not os.path.exists(release):
        if time.monotonic() > end:
            _write_json(os.path.join(d, f"expired.{tag}.json"), here)
            msg = (f"test hook: pid {os.getpid()} parked at {here['point']} {here['coords']} was not released "
                   f"within {timeout_s:.0f} s (tag {tag}): the test never released it")
            print(msg, file=sys.stderr, flush=True)
            raise HookTimeout(msg)
        time.sleep(POLL_S)


# -- the test side ---------------------------------------------------------------------------------


@dataclass
class Parked:
    """An armed park: :meth:`wait` for a process to reach it, inject the fault, :meth:`release`."""

    dir: str
    tag: str
    point: str

    def wait(self, timeout_s: float = 120.0) -> dict[str, Any]:
        """The parked process's ``{pid, point, coords, time}``.

        Raises:
            AssertionError: no process reached the point within ``timeout_s``.
        """
        path = os.path.join(self.dir, f"parked.{self.tag}.json")
        end = time.monotonic() + timeout_s
        while True:
            got = _read_json(path)
            if got is not None:
                return got
            if time.monotonic() > end:
                raise AssertionError(f"no process reached {self.point} within {timeout_s:.0f} s "
                                     f"(armed hook {self.tag} in {self.dir})")
            time.sleep(POLL_S)

    def parked(self) -> dict[str, Any] | None:
        return _read_json(os.path.join(self.dir, f"parked.{self.tag}.json"))

    def release(self) -> None:
        open(os.path.join(self.dir, f"release.{self.tag}"), "w").close()

    def expired(self) -> dict[str, Any] | None:
        return _read_json(os.path.join(self.dir, f"expired.{self.tag}.json"))


@dataclass
class Crash:
    """An armed crash: :meth:`fired` tells which process ended there."""

    dir: str
    tag: str
    point: str

    def fired(self) -> dict[str, Any] | None:
        return _read_json(os.path.join(self.dir, f"fired.{self.tag}.json"))


class Hooks:
    """The test's handle on a hook directory (the one in ``RKS_HOOK_DIR`` of the processes to hook)."""

    def __init__(self, directory: str) -> None:
        self.dir = directory
        os.makedirs(directory, exist_ok=True)

    def _arm(self, point: str, action: str, match: dict[str, Any], **extra: Any) -> str:
        tag = uuid.uuid4().hex[:12]
        _write_json(os.path.join(self.dir, f"arm.{tag}.json"),
                    {"tag": tag, "point": point, "action": action, "match": match, **extra})
        return tag

    def park(self, point: str, timeout_s: float = DEFAULT_PARK_TIMEOUT_S, **match: Any) -> Parked:
        """Arm: the first process reaching ``point`` with matching coordinates parks there."""
        return Parked(self.dir, self._arm(point, "park", match, timeout_s=timeout_s), point)

    def crash(self, point: str, after_rows: int = 0, **match: Any) -> Crash:
        """Arm: the first process reaching ``point`` with ``rows >= after_rows`` (and ``match``) exits at once."""
        return Crash(self.dir, self._arm(point, "crash", {**match, "rows__ge": after_rows}), point)

    def armed(self) -> list[str]:
        """Tags armed and not claimed yet."""
        return sorted(e[4:-5] for e in os.listdir(self.dir) if e.startswith("arm.") and e.endswith(".json"))

    def reset(self) -> None:
        """Release every parked process and remove every file (between tests)."""
        for e in os.listdir(self.dir):
            if e.startswith("parked."):
                open(os.path.join(self.dir, "release." + e[len("parked."):-len(".json")]), "w").close()
        for e in os.listdir(self.dir):
            if not e.startswith("release."):
                os.unlink(os.path.join(self.dir, e))


def env_for(directory: str) -> dict[str, str]:
    """The variables a subprocess needs to be hooked through ``directory``."""
    return {"RKS_TEST_HOOKS": "tests.hooks", ENV_DIR: directory}
