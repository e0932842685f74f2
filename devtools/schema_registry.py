"""A real Schema Registry for the tests and the benchmark: Apicurio Registry, its Confluent-compatible API.

Maven Central publishes Apicurio Registry's Quarkus build as
``io.apicurio:apicurio-registry-app:<version>:tar.gz:all`` (fetched once into
the jar cache by :func:`registry_app`). It needs Java 21+: the first of
``$RKS_REGISTRY_JAVA``, ``/usr/lib/jvm/*`` (newest first) or ``java`` that is
21 or newer. Storage is in memory (H2); with ``user``/``password`` the API asks
for HTTP basic auth. The Confluent API is at ``<url>/apis/ccompat/v7``.

Its global compatibility level starts at ``NONE`` (Confluent's default is
``BACKWARD``): :meth:`SchemaRegistry.start` sets ``BACKWARD`` so that tests
see the usual rules.
"""

from __future__ import annotations

import base64
import glob
import json
import os
import re
import signal
import subprocess
import tarfile
import time
import urllib.error
import urllib.request

from devtools.jvm import MavenError, cache_root, maven_artifact
from devtools.kafka_broker import free_port, stop_process

__all__ = ["REGISTRY_VERSION", "SchemaRegistry", "registry_app", "registry_java"]

REGISTRY_VERSION = "3.3.3"


def registry_app() -> str:
    """The folder holding Apicurio Registry's ``quarkus-run.jar`` (fetched and unpacked once).

    Raises:
        MavenError: it is not cached and Maven cannot fetch it.
    """
    dest = os.path.join(cache_root(), f"apicurio-registry-{REGISTRY_VERSION}-app")
    if os.path.exists(os.path.join(dest, ".complete")):
        return dest
    src = maven_artifact(f"io.apicurio:apicurio-registry-app:{REGISTRY_VERSION}:tar.gz:all",
                         f"apicurio-registry-{REGISTRY_VERSION}")
    (tgz,) = glob.glob(os.path.join(src, "*.tar.gz"))
    tmp = dest + ".tmp"
    with tarfile.open(tgz) as tar:
        tar.extractall(tmp, filter="data")
    (run,) = glob.glob(os.path.join(tmp, "**", "quarkus-run.jar"), recursive=True)
    os.replace(os.path.dirname(run), dest)
    open(os.path.join(dest, ".complete"), "w").close()
    return dest


def _major(java: str) -> int:
    try:
        out = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=60).stderr
    except OSError:
        return 0
    m = re.search(r'version "(\d+)', out)
    return int(m.group(1)) if m else 0


def registry_java() -> str:
    """A Java 21+ ``java`` for the registry.

    Raises:
        MavenError: none found (the message says where it looked).
    """
    found = [os.environ.get("RKS_REGISTRY_JAVA", "")]
    found += sorted(glob.glob("/usr/lib/jvm/*/bin/java"), reverse=True) + ["java"]
    for java in found:
        if java and _major(java) >= 21:
            return java
    raise MavenError("Apicurio Registry needs Java 21 or newer: set RKS_REGISTRY_JAVA to its `java` (looked in "
                     "/usr/lib/jvm and on PATH)")


class SchemaRegistry:
    """One Apicurio Registry process on free loopback ports (``url``: the Confluent-compatible API)."""

    def __init__(self, workdir: str, user: str | None = None, password: str | None = None) -> None:
        self.workdir = workdir
        self.user, self.password = user, password
        self.port, self.mgmt_port = free_port(), free_port()
        self.proc: "subprocess.Popen[bytes] | None" = None
        self.log_path = os.path.join(workdir, "registry.log")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/apis/ccompat/v7"

    def client_conf(self) -> dict[str, str]:
        conf = {"url": self.url}
        if self.user:
            conf["basic.auth.user.info"] = f"{self.user}:{self.password}"
        return conf

    def start(self, timeout_s: float = 90.0) -> "SchemaRegistry":
        """Start it and wait until it answers; set the global compatibility to BACKWARD.

        Raises:
            MavenError: Java 21+ or the app is missing.
            RuntimeError: it exited or did not answer within ``timeout_s`` (its log's tail in the message).
        """
        app = registry_app()
        props = ["-Dquarkus.http.host=127.0.0.1", f"-Dquarkus.http.port={self.port}",
                 "-Dquarkus.management.host=127.0.0.1", f"-Dquarkus.management.port={self.mgmt_port}"]
        if self.user:
            props += ["-Dquarkus.http.auth.basic=true", "-Dquarkus.security.users.embedded.enabled=true",
                      "-Dquarkus.security.users.embedded.plain-text=true",
                      f"-Dquarkus.security.users.embedded.users.{self.user}={self.password}",
                      f"-Dquarkus.security.users.embedded.roles.{self.user}=sr-admin"]
        os.makedirs(self.workdir, exist_ok=True)
        cmd = [registry_java(), "-Xmx384m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", *props, "-jar",
               os.path.join(app, "quarkus-run.jar")]
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=self.workdir,
                                         start_new_session=True)
        end = time.monotonic() + timeout_s
        while time.monotonic() < end:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the Schema Registry exited with code {self.proc.returncode}:\n{self.log_tail()}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.mgmt_port}/health/ready", timeout=2):
                    break
            except (OSError, urllib.error.URLError):
                time.sleep(0.2)
        else:
            tail = self.log_tail()
            self.stop()
            raise RuntimeError(f"the Schema Registry did not answer within {timeout_s}s:\n{tail}")
        self.request("PUT", "/config", {"compatibility": "BACKWARD"})
        return self

    def request(self, method: str, path: str, body: object = None) -> object:
        """One call of the Confluent API (``path`` after ``/apis/ccompat/v7``) with the admin's credentials."""
        req = urllib.request.Request(self.url + path, method=method,
                                     data=None if body is None else json.dumps(body).encode(),
                                     headers={"Content-Type": "application/vnd.schemaregistry.v1+json"})
        if self.user:
            token = base64.b64encode(f"{self.user}:{self.password}".encode()).decode()
            req.add_header("Authorization", f"Basic {token}")
        with urllib.request.urlopen(req, timeout=10) as resp:
            return json.loads(resp.read() or b"null")

    def log_tail(self, n: int = 3000) -> str:
        try:
            with open(self.log_path, "rb") as f:
                return f.read()[-n:].decode("utf-8", "replace")
        except OSError:
            return ""

    def pause(self) -> None:
        """SIGSTOP: it stops answering (a registry that hangs)."""
        assert self.proc is not None and self.proc.poll() is None, "registry not running"
        self.proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        if self.proc is not None and self.proc.poll() is None:  # never a reaped (perhaps reused) pid
            self.proc.send_signal(signal.SIGCONT)

    def stop(self) -> None:
        stop_process(self.proc)
        self.proc = None
