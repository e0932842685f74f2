"""Tier 1: the test brokers' ports never collide (devtools.kafka_broker.free_port).

The kernel may offer one port to two ``bind(0)`` calls once the first socket
is closed; a broker given the same port for its listener and its controller
refuses its configuration (a fault test's broker failed to start so).
"""

from __future__ import annotations

from devtools.kafka_broker import free_port


def test_free_port_never_hands_out_a_port_twice():
    ports = [free_port() for _ in range(2000)]
    assert len(set(ports)) == len(ports), f"{len(ports) - len(set(ports))} ports handed out twice"
