"""Tier 1: the test brokers' ports never collide (devtools.kafka_broker.free_port).

The kernel may offer one port to two ``bind(0)`` calls once the first socket
is closed; a broker given the same port for its listener and its controller
refuses its configuration (a fault test's broker failed to start so).
With ``RKS_PORT_RANGE`` (each pytest-xdist worker has one of its own) the
processes given one range take its ports in turn.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile

import pytest

from devtools.kafka_broker import free_port
from devtools.processes import PORT_RANGE_ENV

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_free_port_never_hands_out_a_port_twice():
    ports = [free_port() for _ in range(2000)]
    assert len(set(ports)) == len(ports), f"{len(ports) - len(set(ports))} ports handed out twice"


def _range_of_this_test(tmp_path, monkeypatch) -> tuple[int, int]:
    """A range of 10 ports below every test worker's (16384 and up), and a cursor file of this test's own."""
    low = 10000 + (os.getpid() % 500) * 10
    monkeypatch.setenv(PORT_RANGE_ENV, f"{low}-{low + 9}")
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(tempfile, "tempdir", None)  # gettempdir() reads TMPDIR again
    return low, low + 9


def test_free_port_in_a_range_takes_turns_with_every_process_of_that_range(tmp_path, monkeypatch):
    low, high = _range_of_this_test(tmp_path, monkeypatch)
    with socket.socket() as held:  # a port of the range someone else listens on: never handed out
        held.bind(("127.0.0.1", low + 1))
        first, second = free_port(), free_port()
        child = subprocess.run([sys.executable, "-c", "from devtools.processes import free_port; print(free_port())"],
                               cwd=ROOT, capture_output=True, text=True, timeout=60, check=True)
        theirs = int(child.stdout)
        third = free_port()
    taken = [first, second, theirs, third]
    assert all(low <= p <= high for p in taken) and low + 1 not in taken, taken
    assert taken == sorted(taken) and len(set(taken)) == 4, taken  # the child went on from this process's last


def test_free_port_range_is_checked():
    for bad in ("20000", "a-b", "30000-20000", "80-90"):
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv(PORT_RANGE_ENV, bad)
            with pytest.raises(ValueError, match=PORT_RANGE_ENV):
                free_port()
