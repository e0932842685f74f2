"""Kafka requests confluent-kafka's AdminClient lacks or sends through a node of its own choosing.

The fault suite asks the brokers themselves which node coordinates a
transactional id, and what that coordinator holds of the transaction (its
state, its partitions), so that a scenario kills the coordinator of a
transaction it saw open, and asserts so; and it asks one chosen node for
metadata (a librdkafka client picks the node itself, and while one is
SIGSTOPped its requests can wait there until they time out). Each is a
plain request/response exchange over one TCP connection, in the protocol's
flexible versions (Apache Kafka's
``clients/src/main/resources/common/message/*.json``):

* ``FindCoordinator`` v4 (api key 10), ``key_type`` 1 (transaction): any
  broker answers with the coordinator's node id;
* ``DescribeTransactions`` v0 (api key 65): the coordinator answers with the
  transaction's state (``Ongoing``, ``PrepareCommit``, ``CompleteCommit``,
  ``Empty``, ...), its producer id and epoch, and its partitions;
* ``Metadata`` v12 (api key 3): the node's view of topics' partitions (leader,
  leader epoch, replicas, in-sync replicas);
* ``ListOffsets`` v7 (api key 2): a leader's latest offsets, without the
  leader epoch a librdkafka client sends from its metadata cache (its admin
  client kept sending one the broker had fenced, ``FENCED_LEADER_EPOCH``, for
  30 s after a leader election).

Nothing of the sink uses this module (test code).
"""

from __future__ import annotations

import itertools
import socket
import struct
from dataclasses import dataclass, field

__all__ = ["KafkaWireError", "Coordinator", "TransactionState", "PartitionState", "find_coordinator",
           "describe_transaction", "metadata", "latest_offsets"]

_LIST_OFFSETS, _METADATA, _FIND_COORDINATOR, _DESCRIBE_TRANSACTIONS = 2, 3, 10, 65
_KEY_TYPE_TRANSACTION = 1
_CLIENT_ID = "rks-fault-wire"
_CORRELATION = itertools.count(1)
# Error codes a caller may meet (Apache Kafka's org.apache.kafka.common.protocol.Errors)
ERRORS = {0: "NONE", 3: "UNKNOWN_TOPIC_OR_PARTITION", 6: "NOT_LEADER_OR_FOLLOWER", 7: "REQUEST_TIMED_OUT",
          14: "COORDINATOR_LOAD_IN_PROGRESS", 15: "COORDINATOR_NOT_AVAILABLE", 16: "NOT_COORDINATOR",
          74: "FENCED_LEADER_EPOCH", 105: "TRANSACTIONAL_ID_NOT_FOUND"}


class KafkaWireError(RuntimeError):
    """The broker could not be reached, closed the connection, or answered what this module cannot read."""


@dataclass(frozen=True)
class Coordinator:
    """A FindCoordinator answer: ``node_id`` -1 with a non-zero ``error_code`` when the broker has none yet."""

    key: str
    node_id: int
    host: str
    port: int
    error_code: int
    error_message: str | None

    @property
    def error(self) -> str:
        return ERRORS.get(self.error_code, str(self.error_code))


@dataclass(frozen=True)
class TransactionState:
    """A DescribeTransactions answer for one transactional id."""

    transactional_id: str
    error_code: int
    state: str
    timeout_ms: int
    start_ms: int
    producer_id: int
    producer_epoch: int
    partitions: dict[str, tuple[int, ...]] = field(default_factory=dict)

    @property
    def error(self) -> str:
        return ERRORS.get(self.error_code, str(self.error_code))


@dataclass(frozen=True)
class PartitionState:
    """One partition as a node's metadata has it (``leader`` -1: none)."""

    id: int
    error_code: int
    leader: int
    leader_epoch: int
    replicas: tuple[int, ...]
    isrs: tuple[int, ...]


# -- encoding ---------------------------------------------------------------------------------------


def _uvarint(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _compact_str(s: str) -> bytes:
    raw = s.encode()
    return _uvarint(len(raw) + 1) + raw


def _header_v2(api_key: int, version: int, correlation: int) -> bytes:
    """Request header v2: api key, version, correlation id, client id (a non-compact string), no tagged fields."""
    cid = _CLIENT_ID.encode()
    return struct.pack(">hhih", api_key, version, correlation, len(cid)) + cid + _uvarint(0)


class _Reader:
    """Reads a flexible-version response body; :class:`KafkaWireError` past its end."""

    def __init__(self, data: bytes) -> None:
        self.data, self.pos = data, 0

    def _take(self, n: int) -> bytes:
        if self.pos + n > len(self.data):
            raise KafkaWireError(f"response ends at byte {len(self.data)}, wanted {n} more at {self.pos}")
        raw = self.data[self.pos:self.pos + n]
        self.pos += n
        return raw

    def int8(self) -> int:
        return struct.unpack(">b", self._take(1))[0]

    def int16(self) -> int:
        return struct.unpack(">h", self._take(2))[0]

    def int32(self) -> int:
        return struct.unpack(">i", self._take(4))[0]

    def boolean(self) -> bool:
        return self._take(1) != b"\x00"

    def int64(self) -> int:
        return struct.unpack(">q", self._take(8))[0]

    def uvarint(self) -> int:
        n = shift = 0
        for _ in range(5):
            b = self._take(1)[0]
            n |= (b & 0x7F) << shift
            if not b & 0x80:
                return n
            shift += 7
        raise KafkaWireError("unsigned varint longer than 5 bytes")

    def compact_str(self) -> str | None:
        n = self.uvarint()
        return None if n == 0 else self._take(n - 1).decode()

    def compact_len(self) -> int:
        n = self.uvarint()
        return max(0, n - 1)

    def tagged(self) -> None:
        for _ in range(self.uvarint()):
            self.uvarint()
            self._take(self.uvarint())


def _exchange(host: str, port: int, api_key: int, version: int, body: bytes, timeout_s: float) -> _Reader:
    """Send one request, return its response body after the v1 response header (correlation id, tagged fields).

    Raises:
        KafkaWireError: no connection, a closed one, or an answer to another request.
    """
    correlation = next(_CORRELATION)
    payload = _header_v2(api_key, version, correlation) + body
    try:
        with socket.create_connection((host, port), timeout=timeout_s) as s:
            s.sendall(struct.pack(">i", len(payload)) + payload)
            size = struct.unpack(">i", _recv(s, 4))[0]
            data = _recv(s, size)
    except OSError as exc:
        raise KafkaWireError(f"api_key={api_key} broker={host}:{port}: {type(exc).__name__}: {exc}") from exc
    r = _Reader(data)
    got = r.int32()
    if got != correlation:
        raise KafkaWireError(f"api_key={api_key} broker={host}:{port}: correlation id {got}, sent {correlation}")
    r.tagged()
    return r


def _recv(s: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            raise ConnectionError(f"closed after {len(buf)} of {n} bytes")
        buf += chunk
    return bytes(buf)


# -- the two requests -------------------------------------------------------------------------------


def find_coordinator(host: str, port: int, transactional_id: str, timeout_s: float = 5.0) -> Coordinator:
    """Which node coordinates ``transactional_id``, as the broker at ``host:port`` answers (FindCoordinator v4).

    Raises:
        KafkaWireError: the broker could not be asked or answered nothing for the key.
    """
    body = struct.pack(">b", _KEY_TYPE_TRANSACTION) + _uvarint(2) + _compact_str(transactional_id) + _uvarint(0)
    r = _exchange(host, port, _FIND_COORDINATOR, 4, body, timeout_s)
    r.int32()  # throttle_time_ms
    for _ in range(r.compact_len()):
        key = r.compact_str() or ""
        node_id, host_, port_ = r.int32(), r.compact_str() or "", r.int32()
        code, message = r.int16(), r.compact_str()
        r.tagged()
        if key == transactional_id:
            return Coordinator(key, node_id, host_, port_, code, message)
    raise KafkaWireError(f"FindCoordinator broker={host}:{port}: no answer for transactional_id={transactional_id}")


def describe_transaction(host: str, port: int, transactional_id: str, timeout_s: float = 5.0) -> TransactionState:
    """The transaction of ``transactional_id`` as its coordinator at ``host:port`` holds it (DescribeTransactions v0).

    A broker that is not its coordinator answers ``error_code`` 16 (NOT_COORDINATOR).

    Raises:
        KafkaWireError: the broker could not be asked or answered nothing for the id.
    """
    body = _uvarint(2) + _compact_str(transactional_id) + _uvarint(0)
    r = _exchange(host, port, _DESCRIBE_TRANSACTIONS, 0, body, timeout_s)
    r.int32()  # throttle_time_ms
    for _ in range(r.compact_len()):
        code, tid, state = r.int16(), r.compact_str() or "", r.compact_str() or ""
        timeout_ms, start_ms, pid, epoch = r.int32(), r.int64(), r.int64(), r.int16()
        partitions: dict[str, tuple[int, ...]] = {}
        for _t in range(r.compact_len()):
            topic = r.compact_str() or ""
            partitions[topic] = tuple(r.int32() for _p in range(r.compact_len()))
            r.tagged()
        r.tagged()
        if tid == transactional_id:
            return TransactionState(tid, code, state, timeout_ms, start_ms, pid, epoch, partitions)
    raise KafkaWireError(f"DescribeTransactions broker={host}:{port}: no answer for "
                         f"transactional_id={transactional_id}")


def metadata(host: str, port: int, topics: list[str] | None, timeout_s: float = 5.0) -> dict[str, list[PartitionState]]:
    """Topic -> its partitions (by id) as the node at ``host:port`` knows them (Metadata v12); ``topics`` None: all.

    A topic the node does not know is left out.

    Raises:
        KafkaWireError: the node could not be asked, or answered what this module cannot read.
    """
    if topics is None:
        body = _uvarint(0)
    else:
        body = _uvarint(len(topics) + 1) + b"".join(b"\x00" * 16 + _compact_str(t) + _uvarint(0) for t in topics)
    body += b"\x00\x00" + _uvarint(0)  # allow_auto_topic_creation, include_topic_authorized_operations: false
    r = _exchange(host, port, _METADATA, 12, body, timeout_s)
    r.int32()  # throttle_time_ms
    for _ in range(r.compact_len()):  # brokers
        r.int32(), r.compact_str(), r.int32(), r.compact_str()
        r.tagged()
    r.compact_str()  # cluster_id
    r.int32()  # controller_id
    out: dict[str, list[PartitionState]] = {}
    for _ in range(r.compact_len()):
        code, name = r.int16(), r.compact_str() or ""
        r._take(16)  # topic_id
        r.boolean()  # is_internal
        parts = []
        for _p in range(r.compact_len()):
            p_code, index, leader, epoch = r.int16(), r.int32(), r.int32(), r.int32()
            replicas = tuple(r.int32() for _r in range(r.compact_len()))
            isrs = tuple(r.int32() for _i in range(r.compact_len()))
            for _o in range(r.compact_len()):  # offline replicas
                r.int32()
            r.tagged()
            parts.append(PartitionState(index, p_code, leader, epoch, replicas, isrs))
        r.int32()  # topic_authorized_operations
        r.tagged()
        if code == 0 and parts:
            out[name] = sorted(parts, key=lambda p: p.id)
    return out


def latest_offsets(host: str, port: int, topic: str, partitions: list[int],
                   timeout_s: float = 5.0) -> dict[int, tuple[int, int]]:
    """Partition -> ``(error code, latest offset)`` as the node at ``host:port`` answers ListOffsets v7 (read
    uncommitted, no current leader epoch): the high watermark where it leads the partition, an error where not.

    Raises:
        KafkaWireError: the node could not be asked, or answered what this module cannot read.
    """
    parts = b"".join(struct.pack(">iiq", p, -1, -1) + _uvarint(0) for p in partitions)
    body = (struct.pack(">ib", -1, 0) + _uvarint(2) + _compact_str(topic) + _uvarint(len(partitions) + 1) + parts
            + _uvarint(0) + _uvarint(0))
    r = _exchange(host, port, _LIST_OFFSETS, 7, body, timeout_s)
    r.int32()  # throttle_time_ms
    out: dict[int, tuple[int, int]] = {}
    for _ in range(r.compact_len()):
        name = r.compact_str()
        for _p in range(r.compact_len()):
            index, code = r.int32(), r.int16()
            r.int64()  # timestamp
            offset = r.int64()
            r.int32()  # leader_epoch
            r.tagged()
            if name == topic:
                out[index] = (code, offset)
        r.tagged()
    return out
