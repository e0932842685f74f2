"""Fault harness: inject faults from outside the code under test and count what arrived.

Everything here works on real processes and real sockets:

* :func:`spark_python_workers`, :func:`executor_jvms`, :func:`slot_holders`
  find the pids to kill through ``/proc`` (children of *this* test process's
  JVM's ``pyspark.daemon``; ``CoarseGrainedExecutorBackend`` JVMs; the holder
  of a WAL slot's ``flock`` from ``/proc/locks``) -- never by name;
* :func:`slot_attempts` and :func:`slot_row_keys` read a slot's attempts and
  chunks read-only (what a dead or live worker left in its WAL);
* faults are timed by the test hooks of ``tests/hooks.py`` (a task parked at
  a named point until the test releases it), never by polling for a moment;
* :class:`TcpProxy` sits between producers and the broker and can refuse, cut
  or stall the connections of chosen clients (by Kafka ``client.id``);
* :class:`TansuBroker` launches Tansu advertising the proxy's port (so the
  proxy stays in the path after metadata), optionally on S3 storage backed by
  :class:`S3Server` (moto), and can be paused, SIGKILLed and restarted;
* :class:`LiveReader` consumes the topic while the scenario runs and notes
  when each id first became visible (fault-to-full-delivery time);
* :func:`tally` and :func:`record_result` turn a full read of the topic into
  the scenario row (rows sent, distinct ids, lost, duplicates, recovery time)
  appended to the results JSON (``RKS_FAULT_RESULTS`` overrides the path).

No broker is mocked anywhere.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
import urllib.request
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Iterable

from devtools.devbroker import EmbeddedBroker, free_port, stop_process

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
DEFAULT_RESULTS = os.path.join(HERE, "results", "last_run.json")
SINK_CLIENT_ID = "rks-sink"  # client.id of the sink's producers: the proxy's faults target it
READER_CLIENT_ID = "rks-reader"


def run_cli(command: str, args: dict, timeout: float = 120) -> tuple[int, list[dict], str]:
    """Run ``python -m tests.faults.writer_cli COMMAND ARGS`` (no Spark); returns (rc, JSON lines, stderr tail)."""
    env = {**os.environ, "PYTHONPATH": REPO}
    p = subprocess.run([sys.executable, "-m", "tests.faults.writer_cli", command, json.dumps(args)],
                       capture_output=True, timeout=timeout, env=env, cwd=REPO)
    lines = [json.loads(line) for line in p.stdout.decode(errors="replace").splitlines() if line.startswith("{")]
    return p.returncode, lines, p.stderr.decode(errors="replace")[-3000:]


def results_path() -> str:
    return os.environ.get("RKS_FAULT_RESULTS") or DEFAULT_RESULTS


# ---------------------------------------------------------------------------------------------
# processes, through /proc
# ---------------------------------------------------------------------------------------------


def _stat_fields(pid: int) -> list[str] | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            raw = f.read()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    return raw.rsplit(")", 1)[1].split()


def ppid(pid: int) -> int | None:
    f = _stat_fields(pid)
    return int(f[1]) if f else None


def alive(pid: int) -> bool:
    f = _stat_fields(pid)
    return bool(f) and f[0] not in ("Z", "X")


def cpu_ticks(pid: int) -> int:
    f = _stat_fields(pid)
    return int(f[11]) + int(f[12]) if f else -1


def cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return ""


def _all_pids() -> list[int]:
    return [int(p) for p in os.listdir("/proc") if p.isdigit()]


def children(pid: int) -> list[int]:
    return [p for p in _all_pids() if ppid(p) == pid]


def descendants(pid: int) -> list[int]:
    parent = {p: ppid(p) for p in _all_pids()}
    out, frontier = [], [pid]
    while frontier:
        nxt = [p for p, pp in parent.items() if pp in frontier]
        out += nxt
        frontier = nxt
    return out


def spark_python_workers(root: int | None = None) -> list[int]:
    """Python workers forked by the ``pyspark.daemon`` of JVMs under ``root`` (default: this process)."""
    root = os.getpid() if root is None else root
    out = []
    for p in descendants(root):
        if "pyspark.daemon" in cmdline(p) and "java" in cmdline(ppid(p) or 0):
            out += [c for c in children(p) if alive(c)]
    return out


def executor_jvms(root: int) -> list[int]:
    """Executor JVMs (``CoarseGrainedExecutorBackend``) under ``root``."""
    return [p for p in descendants(root) if "CoarseGrainedExecutorBackend" in cmdline(p) and alive(p)]


def wait_dead(pid: int, timeout_s: float) -> bool:
    """Wait until ``pid`` has exited (or is a zombie); False after ``timeout_s``."""
    end = time.monotonic() + timeout_s
    while alive(pid):
        if time.monotonic() > end:
            return False
        time.sleep(0.02)
    return True


def kill9(pid: int) -> float:
    """SIGKILL ``pid``; returns the time of the kill (``time.time()``)."""
    t = time.time()
    os.kill(pid, signal.SIGKILL)
    return t


# ---------------------------------------------------------------------------------------------
# WAL slots seen from outside
# ---------------------------------------------------------------------------------------------


def _flock_holders() -> dict[tuple[int, int, int], int]:
    """(major, minor, inode) -> pid of every FLOCK WRITE lock, from /proc/locks."""
    out: dict[tuple[int, int, int], int] = {}
    with open("/proc/locks") as f:
        for line in f:
            parts = line.split()
            if "->" in parts:
                continue  # a waiter, not a holder
            if len(parts) >= 6 and parts[1] == "FLOCK" and parts[3] == "WRITE":
                with contextlib.suppress(ValueError):
                    maj, mnr, ino = parts[5].split(":")
                    out[(int(maj, 16), int(mnr, 16), int(ino))] = int(parts[4])
    return out


def slot_holders(wal_dir: str, sink: str) -> dict[int, int | None]:
    """slot index -> pid holding its flock (None when free)."""
    sdir = os.path.join(wal_dir, sink)
    holders = _flock_holders()
    out: dict[int, int | None] = {}
    if not os.path.isdir(sdir):
        return out
    for name in sorted(os.listdir(sdir)):
        if name.startswith("slot-") and name.endswith(".lock"):
            idx = int(name[5:10])
            try:
                st = os.stat(os.path.join(sdir, name))
            except FileNotFoundError:
                continue
            out[idx] = holders.get((os.major(st.st_dev), os.minor(st.st_dev), st.st_ino))
    return out


def slot_attempts(slot_path: str) -> dict[tuple[int, int, int], int]:
    """A slot's attempts table read-only: (batch, partition, gen) -> state (1 open, 2 committed)."""
    import lmdb

    from spark_recoverable_sink.wal.format import AttemptKey
    from spark_recoverable_sink.wal.records import decode_attempt

    if not os.path.exists(os.path.join(slot_path, "data.mdb")):
        return {}
    env = lmdb.open(slot_path, readonly=True, lock=True, max_dbs=4, subdir=True, create=False)
    try:
        try:
            db = env.open_db(b"attempts", create=False)
        except lmdb.NotFoundError:
            return {}
        with env.begin(db=db) as txn:
            out = {}
            for k, v in txn.cursor():
                ak = AttemptKey.unpack(bytes(k))
                out[(ak.batch, ak.partition, ak.gen)] = decode_attempt(bytes(v)).state
            return out
    finally:
        env.close()


def slot_row_keys(slot_path: str) -> dict[bytes, int]:
    """Row key -> count of every record in a slot's chunks, read-only (committed or not, acked or not)."""
    import lmdb

    from spark_recoverable_sink.wal.format import decode_chunk

    out: dict[bytes, int] = {}
    if not os.path.exists(os.path.join(slot_path, "data.mdb")):
        return out
    env = lmdb.open(slot_path, readonly=True, lock=True, max_dbs=4, subdir=True, create=False)
    try:
        try:
            db = env.open_db(b"chunks", create=False)
        except lmdb.NotFoundError:
            return out
        with env.begin(db=db) as txn:
            for _k, v in txn.cursor():
                batch = decode_chunk(bytes(v))
                for key in batch.column(batch.schema.names.index("key")).to_pylist():
                    out[key] = out.get(key, 0) + 1
        return out
    finally:
        env.close()


def explain_missing(t: "Tally", wal_dir: str, sink: str, parts: list[Any]) -> str:
    """Why rows are missing from Kafka: still in a WAL slot (whose owner is dead or alive), or nowhere.

    For the end-of-test check of a scenario: 'in a WAL' is pending (within the
    guarantee; nobody came for it yet), 'nowhere' is a loss.
    """
    missing = {str(i).encode() for i in t.lost_rows}
    where: dict[str, int] = {}
    found: set[bytes] = set()
    for idx, pid in slot_holders(wal_dir, sink).items():
        try:
            keys = slot_row_keys(os.path.join(wal_dir, sink, f"slot-{idx:05d}"))
        except Exception as exc:  # noqa: BLE001 -- part of the diagnosis
            where[f"slot {idx} unreadable ({type(exc).__name__}: {exc})"] = -1
            continue
        hit = missing & set(keys)
        if hit:
            owner = "free (owner dead)" if pid is None else f"held by pid {pid} ({'alive' if alive(pid) else 'dead'})"
            where[f"slot {idx} {owner}"] = len(hit)
            found |= hit
    nowhere = len(missing - found)
    pending = {(p.partition, p.spark_attempt, p.pid): p.pending for p in parts if p.pending}
    skipped = sum(b - a + 1 for gs in t.offset_gaps.values() for a, b in gs)
    if not nowhere:
        case = "PENDING: every missing row is still in a WAL slot (accepted, not delivered)"
    elif skipped >= nowhere:
        case = "READER: rows in no WAL, and the reader skipped offsets the broker holds (read again)"
    else:
        case = "LOSS: rows in neither Kafka nor any WAL"
    return (f"{case}. missing={t.lost} in_wal={len(found)} nowhere={nowhere} by_slot={where} "
            f"offset_gaps={dict(list(t.offset_gaps.items())[:5])} sample={t.lost_sample[:10]} "
            f"task_reports_with_pending={pending} per_kafka_partition={t.per_partition} "
            f"reader_errors={t.errors[:5]}")


# ---------------------------------------------------------------------------------------------
# source data
# ---------------------------------------------------------------------------------------------


def row_value(i: int, size: int) -> bytes:
    return (b"row-%d:" % i).ljust(size, b"x")


def write_source(directory: str, n_rows: int, n_files: int, value_size: int = 200, start: int = 0,
                 sizes: dict[int, int] | None = None) -> list[str]:
    """Parquet files of rows ``start .. start+n_rows-1``: key = row number (string), value = padded bytes.

    ``sizes`` overrides the value size of chosen rows (e.g. a poison record).
    """
    sizes = sizes or {}
    import pyarrow as pa
    import pyarrow.parquet as pq

    os.makedirs(directory, exist_ok=True)
    per = -(-n_rows // n_files)
    paths = []
    for f in range(n_files):
        lo, hi = start + f * per, min(start + n_rows, start + (f + 1) * per)
        if lo >= hi:
            break
        keys = [str(i) for i in range(lo, hi)]
        vals = [row_value(i, sizes.get(i, value_size)) for i in range(lo, hi)]
        table = pa.table({"key": pa.array(keys, pa.string()), "value": pa.array(vals, pa.binary())})
        path = os.path.join(directory, f"part-{lo:09d}.parquet")
        tmp = os.path.join(directory, f".part-{lo:09d}.tmp")
        pq.write_table(table, tmp)
        os.replace(tmp, path)
        paths.append(path)
    return paths


SOURCE_SCHEMA = "key string, value binary"


class BatchProbe:
    """``foreachBatch`` function wrapping a sink; notes when each batch starts and ends (driver side)."""

    def __init__(self, sink: Any, record_rows: bool = False) -> None:
        """With ``record_rows`` it also notes the row numbers (keys) each batch held."""
        self.sink = sink
        self.record_rows = record_rows
        self.rows: dict[int, list[int]] = {}
        self.current: int | None = None
        self.started: dict[int, float] = {}
        self.ended: dict[int, float] = {}
        self.calls: list[int] = []
        self.errors: list[tuple[int, str]] = []

    def __call__(self, df: Any, batch_id: int) -> None:
        self.current = batch_id
        self.calls.append(batch_id)
        self.started[batch_id] = time.time()
        if self.record_rows:
            self.rows[batch_id] = [int(r.key) for r in df.select("key").collect()]
        try:
            self.sink(df, batch_id)
        except BaseException as exc:
            self.errors.append((batch_id, f"{type(exc).__name__}: {str(exc).splitlines()[0][:300] if str(exc) else ''}"))
            raise
        finally:
            self.ended[batch_id] = time.time()
            self.current = None


def start_stream(spark: Any, src: str, fn: Callable, checkpoint: str, files_per_trigger: int = 1,
                 available_now: bool = True) -> Any:
    stream = (spark.readStream.schema(SOURCE_SCHEMA).option("maxFilesPerTrigger", files_per_trigger)
              .parquet(src))
    w = stream.writeStream.foreachBatch(fn).option("checkpointLocation", checkpoint)
    w = w.trigger(availableNow=True) if available_now else w.trigger(processingTime="500 milliseconds")
    return w.start()


def sink_reports(sink: Any) -> list[Any]:
    return list(sink.reports)


def partition_reports(sink: Any) -> list[Any]:
    return [p for r in sink.reports for p in r.partition_reports]


# ---------------------------------------------------------------------------------------------
# the network: a loopback TCP proxy that can refuse, cut and stall chosen clients
# ---------------------------------------------------------------------------------------------


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


# ---------------------------------------------------------------------------------------------
# brokers
# ---------------------------------------------------------------------------------------------


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


# ---------------------------------------------------------------------------------------------
# reading back
# ---------------------------------------------------------------------------------------------


class LiveReader:
    """Consumes topics from the beginning in a thread; notes when each key was first seen."""

    def __init__(self, bootstrap: str, topics: str | list[str]) -> None:
        self.bootstrap = bootstrap
        self.topics = [topics] if isinstance(topics, str) else list(topics)
        self.first_seen: dict[bytes, float] = {}
        self.records = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="live-reader", daemon=True)
        self._cv = threading.Condition()
        self.error: BaseException | None = None
        self.errors: list[str] = []  # per-message errors the consumer reported (never skipped silently)

    def start(self) -> "LiveReader":
        self._thread.start()
        return self

    def _run(self) -> None:
        from confluent_kafka import Consumer, TopicPartition

        try:
            c = Consumer({
                "bootstrap.servers": self.bootstrap, "group.id": f"live-{time.monotonic_ns()}",
                "client.id": READER_CLIENT_ID, "enable.auto.commit": False, "auto.offset.reset": "earliest",
                "fetch.max.bytes": 52428800, "topic.metadata.refresh.interval.ms": 2000,
                "reconnect.backoff.max.ms": 1000,
            })
            tps = []
            end = time.monotonic() + 30
            for name in self.topics:
                while True:
                    md = c.list_topics(name, timeout=10)
                    t = md.topics.get(name)
                    if t is not None and t.error is None and t.partitions:
                        break
                    if time.monotonic() > end:
                        raise RuntimeError(f"topic {name} has no metadata")
                    time.sleep(0.2)
                tps += [TopicPartition(name, p, 0) for p in t.partitions]  # offset 0: see kafka_helpers.read_topic
            c.assign(tps)
            while not self._stop.is_set():
                msgs = c.consume(5000, 0.2)
                now = time.time()
                with self._cv:
                    for m in msgs:
                        if m.error():
                            self.errors.append(str(m.error()))
                            continue
                        self.records += 1
                        k = m.key()
                        if k is not None and k not in self.first_seen:
                            self.first_seen[k] = now
                    if msgs:
                        self._cv.notify_all()
            c.close()
        except BaseException as exc:  # surfaced by wait_for / stop
            self.error = exc

    def wait_for(self, keys: Iterable[bytes], timeout_s: float) -> float | None:
        """Wait until every key in ``keys`` was seen; returns the time the last one arrived."""
        want = set(keys)
        missing = set(want)
        end = time.monotonic() + timeout_s
        with self._cv:
            while True:
                missing = {k for k in missing if k not in self.first_seen}
                if not missing:
                    return max((self.first_seen[k] for k in want), default=time.time())
                left = end - time.monotonic()
                if left <= 0 or self.error is not None:
                    return None
                self._cv.wait(min(1.0, left))

    def last_arrival(self, keys: Iterable[bytes]) -> float | None:
        with self._cv:
            ts = [self.first_seen.get(k) for k in keys]
        if any(t is None for t in ts):
            return None
        return max(ts, default=None)  # type: ignore[arg-type]

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(15)


def keys_of(rows: Iterable[int]) -> list[bytes]:
    return [str(i).encode() for i in rows]


@dataclass
class Tally:
    rows_sent: int
    records_read: int
    distinct_ids: int
    lost: int
    duplicates: int
    lost_sample: list[int]
    foreign: int  # records whose key is not one of the expected rows
    lost_rows: list[int] = field(default_factory=list, repr=False)
    per_partition: dict[int, int] = field(default_factory=dict)  # records read per Kafka partition
    errors: list[str] = field(default_factory=list)  # errors the reader's consumer reported
    # Offsets the reader never got, per Kafka partition: (first, last) ranges. Offsets are contiguous
    # here (no transactions, no compaction), so a gap is records the broker has and the reader skipped.
    offset_gaps: dict[int, list[tuple[int, int]]] = field(default_factory=dict)


def tally(contents: Any, expected_rows: Iterable[int]) -> Tally:
    """Count a full read against the row numbers that were sent (key = row number)."""
    from collections import Counter

    want = set(expected_rows)
    counts: Counter[int] = Counter()
    foreign = 0
    for r in contents.records:
        try:
            k = int(r.key)
        except (TypeError, ValueError):
            foreign += 1
            continue
        if k in want:
            counts[k] += 1
        else:
            foreign += 1
    lost = sorted(want - set(counts))
    per_partition = Counter(r.partition for r in contents.records)
    offsets: dict[int, set[int]] = {}
    for r in contents.records:
        offsets.setdefault(r.partition, set()).add(r.offset)
    gaps: dict[int, list[tuple[int, int]]] = {}
    for p, offs in offsets.items():
        expect = 0
        for o in sorted(offs):
            if o > expect:
                gaps.setdefault(p, []).append((expect, o - 1))
            expect = o + 1
    return Tally(
        rows_sent=len(want), records_read=len(contents.records), distinct_ids=len(counts), lost=len(lost),
        duplicates=sum(c - 1 for c in counts.values()), lost_sample=lost[:20], foreign=foreign, lost_rows=lost,
        per_partition=dict(sorted(per_partition.items())), errors=list(getattr(contents, "errors", []))[:20],
        offset_gaps=gaps,
    )


def read_back(bootstrap: str, topic: str, expected_rows: Iterable[int], reader: LiveReader | None = None,
              wait_s: float = 90.0, isolation: str = "read_uncommitted") -> Tally:
    """Wait (up to ``wait_s``) for every row to be visible, then read the topic back completely."""
    from tests.kafka_helpers import read_topic

    rows = list(expected_rows)
    if reader is not None:
        reader.wait_for(keys_of(rows), wait_s)
        seen = reader.records
        contents = read_topic(bootstrap, topic, expected=max(seen, len(rows)), idle_s=3.0, timeout_s=wait_s + 60,
                              isolation=isolation)
    else:
        contents = read_topic(bootstrap, topic, expected=len(rows), idle_s=5.0, timeout_s=wait_s + 60,
                              isolation=isolation)
    t = tally(contents, rows)
    if reader is not None:
        t.errors += reader.errors[:20]
    return t


# ---------------------------------------------------------------------------------------------
# results
# ---------------------------------------------------------------------------------------------


@dataclass
class ScenarioRow:
    scenario: str
    title: str
    status: str = "running"  # passed / failed / skipped
    rows_sent: int | None = None
    records_read: int | None = None
    distinct_ids: int | None = None
    lost: int | None = None
    duplicates: int | None = None
    recovery_s: float | None = None  # fault injected -> every row visible to a consumer
    fault: str = ""
    notes: list[str] = field(default_factory=list)
    figures: dict[str, Any] = field(default_factory=dict)
    seconds: float | None = None
    finished_at: str = ""
    failure: str = ""

    def apply(self, t: Tally) -> None:
        self.rows_sent, self.records_read, self.distinct_ids = t.rows_sent, t.records_read, t.distinct_ids
        self.lost, self.duplicates = t.lost, t.duplicates
        if t.lost:
            self.notes.append(f"lost sample: {t.lost_sample}")

    def recovery(self, fault_at: float | None, full_at: float | None) -> None:
        if fault_at is not None and full_at is not None:
            self.recovery_s = round(max(0.0, full_at - fault_at), 2)


def record_result(row: ScenarioRow, path: str | None = None) -> None:
    """Replace this scenario's row in the results JSON (other scenarios' rows are kept)."""
    path = path or results_path()
    os.makedirs(os.path.dirname(path), exist_ok=True)
    data: dict[str, Any] = {"scenarios": {}}
    with contextlib.suppress(FileNotFoundError, ValueError):
        with open(path) as f:
            data = json.load(f)
    data.setdefault("scenarios", {})[row.scenario] = asdict(row)
    data["updated_at"] = time.strftime("%Y-%m-%dT%H:%M:%S")
    data["machine"] = f"{os.cpu_count()} cores, python {sys.version.split()[0]}"
    tmp = f"{path}.tmp.{os.getpid()}"
    with open(tmp, "w") as f:
        json.dump(data, f, indent=1, sort_keys=True)
    os.replace(tmp, path)


def print_table(rows: Iterable[dict[str, Any]], out: Any = None) -> None:
    out = out or sys.stdout
    cols = ["scenario", "status", "rows_sent", "distinct_ids", "lost", "duplicates", "recovery_s"]
    lines = [cols] + [[str(r.get(c, "")) if r.get(c) is not None else "-" for c in cols] for r in rows]
    widths = [max(len(line[i]) for line in lines) for i in range(len(cols))]
    for line in lines:
        print("  ".join(v.ljust(w) for v, w in zip(line, widths)), file=out)
