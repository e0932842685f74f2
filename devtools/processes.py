"""The local processes the devtools start (the Kafka broker, the schema registry): their ports, their stop.

:func:`free_port` hands out loopback ports never handed out before by this
process; :func:`stop_process` ends a child, resumed first if it was paused.
Both are also importable from ``devtools.kafka_broker``.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import threading

__all__ = ["free_port", "stop_process"]

_HANDED_OUT: set[int] = set()
_HANDED_OUT_LOCK = threading.Lock()


def free_port() -> int:
    """A port free now and never handed out before by this process.

    The kernel may offer the same port to two ``bind(0)`` calls in a row once
    the first socket is closed: a broker's listener and controller ports (or a
    proxy's and its broker's) then collide and the broker refuses its config.

    Raises:
        RuntimeError: no port that was not handed out already (after 1,000 tries).
    """
    with _HANDED_OUT_LOCK:
        for _ in range(1000):
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                port = s.getsockname()[1]
            if port not in _HANDED_OUT:
                _HANDED_OUT.add(port)
                return port
    raise RuntimeError("no free port that this process did not hand out already")


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
