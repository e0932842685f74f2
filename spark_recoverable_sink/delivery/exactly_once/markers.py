"""Exactly-once names and markers: what every attempt at a unit shares, and how Kafka remembers it."""

from __future__ import annotations

from ...config import SinkConfig

__all__ = ["lane_id", "encode_marker", "decode_marker", "client_conf", "ROWS_MASK"]

_ROWS_BITS = 24  # the marker keeps the row count modulo 2**24 next to the batch id
ROWS_MASK = (1 << _ROWS_BITS) - 1


def lane_id(sink: str, run: str, partition: int) -> str:
    """The ``transactional.id`` (and marker group) of one lane: what all attempts at its units share."""
    return f"rks-eo.{sink}.{run}.{partition}"


def encode_marker(batch: int, rows: int) -> int:
    """The marker offset of a committed unit: batch and row count (mod 2**24) in one int64."""
    return ((batch + 1) << _ROWS_BITS) | (rows & ((1 << _ROWS_BITS) - 1))


def decode_marker(offset: int) -> tuple[int, int] | None:
    """``(batch, rows mod 2**24)`` of a marker offset; ``None`` if the lane never committed."""
    if offset is None or offset < (1 << _ROWS_BITS):
        return None
    return (offset >> _ROWS_BITS) - 1, offset & ((1 << _ROWS_BITS) - 1)


_CLIENT_PREFIXES = ("bootstrap.servers", "security.", "sasl.", "ssl.", "enable.ssl", "client.", "socket.", "broker.",
                    "reconnect.", "metadata.", "topic.metadata", "api.version", "log_level")


def client_conf(config: SinkConfig) -> dict[str, str]:
    """The connection and security options of the sink's Kafka configuration (for consumers and admin)."""
    return {k: v for k, v in config.producer_conf().items() if k.startswith(_CLIENT_PREFIXES)}
