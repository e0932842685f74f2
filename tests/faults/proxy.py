"""A loopback TCP proxy in front of the broker that refuses, cuts or stalls chosen clients (by ``client.id``)."""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
import time

from devtools.kafka_broker import free_port

SINK_CLIENT_ID = "rks-sink"  # client.id of the sink's producers: the proxy's faults target it


def _rst_close(s: socket.socket) -> None:
    with contextlib.suppress(OSError):
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    with contextlib.suppress(OSError):
        s.close()


def _kafka_client_id(first_request: bytes) -> str | None:
    """client.id from a Kafka request (size, api_key, api_version, correlation_id, client_id)."""
    if len(first_request) < 14:
        return None
    (n,) = struct.unpack_from(">h", first_request, 12)
    if n < 0:
        return None
    return first_request[14:14 + n].decode(errors="replace")


class _Conn:
    def __init__(self, client: socket.socket, upstream: socket.socket, affected: bool) -> None:
        self.client = client
        self.upstream = upstream
        self.affected = affected
        self.closed = False

    def close(self, rst: bool = False) -> None:
        if self.closed:
            return
        self.closed = True
        for s in (self.client, self.upstream):
            if rst:
                _rst_close(s)
            else:
                with contextlib.suppress(OSError):
                    s.close()


class TcpProxy:
    """Pure-Python loopback proxy in front of one upstream port.

    Faults apply to connections whose Kafka ``client.id`` starts with one of
    ``targets`` (all connections when ``targets`` is None):

    * :meth:`refuse` -- new targeted connections are reset right after their first request;
    * :meth:`cut` -- every targeted connection is reset now, and new ones are refused;
    * :meth:`stall` -- targeted connections stay open but no byte is forwarded either way;
    * :meth:`refuse_all` -- the listening socket is closed (connect() gets ECONNREFUSED);
    * :meth:`restore` -- back to forwarding (stalled connections resume).
    """

    def __init__(self, upstream_port: int, port: int | None = None, targets: tuple[str, ...] | None = None) -> None:
        self.upstream_port = upstream_port
        self.port = port or free_port()
        self.targets = targets
        self.mode = "pass"
        self.listening = False
        self._conns: set[_Conn] = set()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._listener: socket.socket | None = None
        self._thread: threading.Thread | None = None
        self.stats = {"accepted": 0, "refused": 0, "cut": 0}

    def _listen(self) -> None:
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", self.port))
        s.listen(128)
        s.settimeout(0.1)
        self._listener = s
        self.listening = True

    def start(self) -> "TcpProxy":
        self._listen()
        self._thread = threading.Thread(target=self._accept_loop, name=f"proxy-{self.port}", daemon=True)
        self._thread.start()
        return self

    def _accept_loop(self) -> None:
        while not self._stop.is_set():
            lst = self._listener
            if lst is None:
                time.sleep(0.05)
                continue
            try:
                client, _ = lst.accept()
            except (socket.timeout, OSError):
                continue
            threading.Thread(target=self._handle, args=(client,), daemon=True).start()

    def _affects(self, client_id: str | None) -> bool:
        if self.targets is None:
            return True
        return client_id is not None and any(client_id.startswith(t) for t in self.targets)

    def _handle(self, client: socket.socket) -> None:
        client.settimeout(10)
        try:
            head = self._recv_exact(client, 4)
            (size,) = struct.unpack(">i", head)
            first = head + self._recv_exact(client, size)
        except (OSError, ValueError, struct.error):
            _rst_close(client)
            return
        affected = self._affects(_kafka_client_id(first))
        if affected and self.mode in ("refuse", "cut"):
            self.stats["refused"] += 1
            _rst_close(client)
            return
        try:
            up = socket.create_connection(("127.0.0.1", self.upstream_port), timeout=5)
        except OSError:
            _rst_close(client)
            return
        conn = _Conn(client, up, affected)
        with self._lock:
            self._conns.add(conn)
        self.stats["accepted"] += 1
        client.settimeout(0.1)
        up.settimeout(0.1)
        pending = [first]
        threading.Thread(target=self._pump, args=(conn, client, up, pending), daemon=True).start()
        threading.Thread(target=self._pump, args=(conn, up, client, []), daemon=True).start()

    @staticmethod
    def _recv_exact(s: socket.socket, n: int) -> bytes:
        buf = b""
        while len(buf) < n:
            chunk = s.recv(n - len(buf))
            if not chunk:
                raise ValueError("closed")
            buf += chunk
        return buf

    def _pump(self, conn: _Conn, src: socket.socket, dst: socket.socket, pending: list[bytes]) -> None:
        try:
            while not conn.closed and not self._stop.is_set():
                if conn.affected and self.mode == "stall":
                    time.sleep(0.05)
                    continue
                while pending:
                    dst.sendall(pending.pop(0))
                try:
                    data = src.recv(65536)
                except socket.timeout:
                    continue
                if not data:
                    break
                while True:
                    try:
                        dst.sendall(data)
                        break
                    except socket.timeout:
                        continue
        except OSError:
            pass
        finally:
            conn.close()
            with self._lock:
                self._conns.discard(conn)

    # -- faults --------------------------------------------------------------------------------

    def refuse(self) -> None:
        self.mode = "refuse"

    def cut(self) -> None:
        self.mode = "cut"
        with self._lock:
            victims = [c for c in self._conns if c.affected]
        for c in victims:
            self.stats["cut"] += 1
            c.close(rst=True)

    def stall(self) -> None:
        self.mode = "stall"

    def refuse_all(self) -> None:
        self.mode = "refuse"
        if self._listener is not None:
            lst, self._listener = self._listener, None
            lst.close()
            self.listening = False

    def restore(self) -> None:
        if self._listener is None:
            self._listen()
        self.mode = "pass"

    def stop(self) -> None:
        self._stop.set()
        if self._listener is not None:
            self._listener.close()
            self._listener = None
        with self._lock:
            conns = list(self._conns)
        for c in conns:
            c.close()
