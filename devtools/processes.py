"""The local processes the devtools start (the Kafka broker, the schema registry): their ports, their stop.

:func:`free_port` hands out loopback ports never handed out before by this
process; :func:`stop_process` ends a child, resumed first if it was paused.
Both are also importable from ``devtools.kafka_broker``.

``RKS_PORT_RANGE=LOW-HIGH`` makes :func:`free_port` take its ports from that
range only, in turn with every other process given the same range (a cursor
file under ``flock``), instead of from ``bind(0)``. The test suite gives each
pytest-xdist worker a range of its own below the kernel's ephemeral range
(``tests/conftest.py``): a broker restarted on its own ports is down for
seconds, and a ``bind(0)`` elsewhere (another worker, the JVMs it starts)
could take one of them meanwhile; no one takes a port of that range but the
processes of its own worker.
"""

from __future__ import annotations

import fcntl
import os
import signal
import socket
import subprocess
import tempfile
import threading

__all__ = ["free_port", "stop_process", "PORT_RANGE_ENV", "port_range"]

#: ``LOW-HIGH``: the ports :func:`free_port` may hand out (unset: any the kernel offers).
PORT_RANGE_ENV = "RKS_PORT_RANGE"

_HANDED_OUT: set[int] = set()
_HANDED_OUT_LOCK = threading.Lock()


def port_range() -> tuple[int, int] | None:
    """``(low, high)`` of ``RKS_PORT_RANGE`` (both included), or ``None`` when it is unset.

    Raises:
        ValueError: it is not ``LOW-HIGH`` with ``1024 <= LOW <= HIGH <= 65535``.
    """
    raw = os.environ.get(PORT_RANGE_ENV, "").strip()
    if not raw:
        return None
    try:
        low, high = (int(v) for v in raw.split("-"))
    except ValueError:
        raise ValueError(f"{PORT_RANGE_ENV}={raw!r} is not LOW-HIGH") from None
    if not 1024 <= low <= high <= 65535:
        raise ValueError(f"{PORT_RANGE_ENV}={raw!r}: want 1024 <= LOW <= HIGH <= 65535")
    return low, high


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _port_in_range(low: int, high: int) -> int:
    """The first bindable port of ``[low, high]`` after the last one a process of that range took (wrapping)."""
    cursor = os.path.join(tempfile.gettempdir(), f"rks-ports-{low}-{high}")
    fd = os.open(cursor, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # held for a few bind() calls at most
        raw = os.pread(fd, 16, 0).decode(errors="replace").strip()
        start = int(raw) if raw.isdigit() and low <= int(raw) <= high else low
        size = high - low + 1
        for i in range(size):
            port = low + (start - low + i) % size
            if port not in _HANDED_OUT and _bindable(port):
                os.ftruncate(fd, 0)
                os.pwrite(fd, str(low + (port - low + 1) % size).encode(), 0)
                return port
    finally:
        os.close(fd)  # lets the lock go
    raise RuntimeError(f"no free port in {PORT_RANGE_ENV}={low}-{high} that this process did not hand out already")


def free_port() -> int:
    """A port free now and never handed out before by this process.

    The kernel may offer the same port to two ``bind(0)`` calls in a row once
    the first socket is closed: a broker's listener and controller ports (or a
    proxy's and its broker's) then collide and the broker refuses its config.
    With ``RKS_PORT_RANGE`` set, the port comes from that range instead, the
    next after the last one any process of the range took.

    Raises:
        RuntimeError: no port that was not handed out already (after 1,000 tries, or in the whole range).
        ValueError: ``RKS_PORT_RANGE`` is malformed.
    """
    within = port_range()
    with _HANDED_OUT_LOCK:
        if within is not None:
            port = _port_in_range(*within)
            _HANDED_OUT.add(port)
            return port
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
