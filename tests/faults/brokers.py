"""A broker that can be hurt: Apache Kafka behind a :class:`TcpProxy` (paused, SIGKILLed, restarted on its log)."""

from __future__ import annotations

from devtools.kafka_broker import KafkaBroker, free_port

from .procs import kill9
from .proxy import SINK_CLIENT_ID, TcpProxy


class HurtableBroker(KafkaBroker):
    """A single-node Kafka broker, its PLAINTEXT listener advertised at a proxy's port when ``proxied``.

    The proxy forwards to the broker's PLAINTEXT port; the broker talks to
    itself on its internal listener, never through the proxy, so a proxy fault
    hurts only the clients it targets (``targets``: client.id prefixes, the
    sink's by default). The broker can be paused (SIGSTOP), SIGKILLed and
    restarted on the same log and ports.
    """

    def __init__(self, workdir: str, proxied: bool = True,
                 targets: tuple[str, ...] | None = (SINK_CLIENT_ID,), **kwargs: object) -> None:
        broker_port = free_port()
        self.proxy = TcpProxy(broker_port, targets=targets) if proxied else None
        super().__init__(workdir, port=broker_port, advertised_port=self.proxy.port if self.proxy else None,
                         **kwargs)  # type: ignore[arg-type]

    @property
    def broker_port(self) -> int:
        return self.port

    def start(self, timeout_s: float = 60.0) -> "HurtableBroker":
        if self.proxy is not None and self.proxy._thread is None:
            self.proxy.start()
        super().start(timeout_s)
        return self

    def kill(self) -> float:
        """SIGKILL from outside; returns when the signal was sent."""
        if self.proc is None or self.proc.poll() is not None:
            return 0.0
        t = kill9(self.proc.pid)
        self.proc.wait(30)
        return t

    def stop(self) -> None:
        super().stop()
        if self.proxy is not None:
            self.proxy.stop()
