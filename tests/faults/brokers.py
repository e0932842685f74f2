"""Brokers that can be hurt: Tansu behind a :class:`TcpProxy` (paused, killed, restarted), and a local S3 server."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.request

from devtools.devbroker import EmbeddedBroker, free_port, stop_process

from .procs import kill9
from .proxy import SINK_CLIENT_ID, TcpProxy


class S3Server:
    """A local S3 endpoint (``moto_server`` from the ``moto[server]`` package) with one bucket."""

    def __init__(self, log_path: str, bucket: str = "tansu") -> None:
        self.port = free_port()
        self.bucket = bucket
        self.log_path = log_path
        self.proc: subprocess.Popen[bytes] | None = None

    @staticmethod
    def available() -> str | None:
        """Why it cannot run, or None."""
        exe = os.path.join(os.path.dirname(sys.executable), "moto_server")
        if not os.path.exists(exe):
            return "moto_server not installed (pip install 'moto[server]')"
        return None

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def env(self) -> dict[str, str]:
        return {"AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test", "AWS_DEFAULT_REGION": "us-east-1",
                "AWS_REGION": "us-east-1", "AWS_ENDPOINT": self.endpoint, "AWS_ALLOW_HTTP": "true"}

    def start(self, timeout_s: float = 30.0) -> "S3Server":
        exe = os.path.join(os.path.dirname(sys.executable), "moto_server")
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen([exe, "-H", "127.0.0.1", "-p", str(self.port)], stdout=log,
                                     stderr=subprocess.STDOUT, start_new_session=True)
        log.close()
        end = time.monotonic() + timeout_s
        while time.monotonic() < end:
            try:
                req = urllib.request.Request(f"{self.endpoint}/{self.bucket}", method="PUT")
                urllib.request.urlopen(req, timeout=2).read()
                return self
            except OSError:
                time.sleep(0.2)
        self.stop()
        raise RuntimeError("moto_server did not start")

    def stop(self) -> None:
        stop_process(self.proc)


class TansuBroker(EmbeddedBroker):
    """Tansu on ``127.0.0.1:broker_port``, advertising the proxy's port when ``proxied``.

    Can be paused (SIGSTOP), SIGKILLed and restarted on the same ports; with
    ``storage`` (e.g. ``s3://tansu/`` plus ``env`` from :class:`S3Server`) its
    data survives a restart.
    """

    def __init__(self, log_path: str, proxied: bool = True, storage: str | None = None,
                 env: dict[str, str] | None = None, targets: tuple[str, ...] | None = (SINK_CLIENT_ID,)) -> None:
        broker_port = free_port()
        self.proxy = TcpProxy(broker_port, targets=targets) if proxied else None
        super().__init__(broker_port, log_path, advertised_port=self.proxy.port if self.proxy else None,
                         storage_engine=storage, env=env)

    @property
    def broker_port(self) -> int:
        return self.port

    def start(self, timeout_s: float = 20.0) -> "TansuBroker":
        if self.proxy is not None and self.proxy._thread is None:
            self.proxy.start()
        super().start(timeout_s)
        return self

    def kill(self) -> float:  # type: ignore[override]
        """SIGKILL from outside; returns when the signal was sent."""
        assert self.proc is not None
        t = kill9(self.proc.pid)
        self.proc.wait(10)
        return t

    def restart(self, timeout_s: float = 20.0) -> "TansuBroker":
        if self.proc is not None and self.proc.poll() is None:
            self.kill()
        return self.start(timeout_s)

    def stop(self) -> None:
        super().stop()
        if self.proxy is not None:
            self.proxy.stop()
