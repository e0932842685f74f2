"""Exceptions raised by the sink.

One root, :class:`RecoverableSinkError`; subclasses carry structured fields
(record ids, the Kafka error) instead of asking callers to parse messages.
Every exception that wraps a lower-level one is raised ``from`` it.
"""

from __future__ import annotations

from typing import Any, Sequence

__all__ = [
    "RecoverableSinkError",
    "ConfigError",
    "SchemaError",
    "InvalidRecordError",
    "WalError",
    "WalFullError",
    "WalFormatError",
    "WalWriteError",
    "WalReadError",
    "WalUncleanError",
    "DeadLetterError",
    "ProducerError",
    "BrokerUnreachableError",
    "ExactlyOnceMismatchError",
]


class RecoverableSinkError(Exception):
    """Root of every error this package raises."""


class ConfigError(RecoverableSinkError, ValueError):
    """An option of the sink is wrong; ``option`` names it."""

    def __init__(self, option: str, reason: str) -> None:
        super().__init__(f"invalid option {option!r}: {reason}")
        self.option = option
        self.reason = reason


class SchemaError(RecoverableSinkError, ValueError):
    """The input DataFrame does not have the Kafka sink schema.

    ``column`` names the offending column (``None`` when one is missing),
    ``actual`` is the type it has and ``allowed`` the types it may have.
    """

    def __init__(
        self, message: str, column: str | None = None, actual: str | None = None,
        allowed: Sequence[str] = (),
    ) -> None:
        super().__init__(message)
        self.column = column
        self.actual = actual
        self.allowed = tuple(allowed)


class InvalidRecordError(RecoverableSinkError, ValueError):
    """A row cannot become a Kafka record (e.g. a null topic and no default topic).

    Raised on the executor before any row of the Arrow batch is written to the
    WAL, so the task fails and nothing of that batch is half-accepted.
    """

    def __init__(self, message: str, record_id: str | None = None) -> None:
        super().__init__(message)
        self.record_id = record_id


class WalError(RecoverableSinkError):
    """A problem with a write-ahead log slot; ``path`` names it."""

    def __init__(self, message: str, path: str | None = None) -> None:
        super().__init__(message)
        self.path = path


class WalFullError(WalError):
    """The WAL slot reached ``max_wal_bytes`` (or LMDB's map is full).

    Nothing was dropped to make room: the records of the failed append were
    never accepted (the task fails and Spark re-runs it), and everything
    already accepted stays in the WAL until Kafka acknowledges it.
    """


class WalFormatError(WalError):
    """A WAL slot is of an unknown format version, or its bytes are corrupt."""


class WalWriteError(WalError):
    """The disk refused a WAL write (e.g. ENOSPC); the append was not accepted."""


class WalReadError(WalError):
    """LMDB failed while reading a WAL slot (e.g. EIO); nothing was changed."""


class WalUncleanError(WalFormatError):
    """A slot written with ``wal_sync="none"`` failed validation after the machine restarted.

    LMDB without fsync can leave the whole environment corrupt after a system
    crash; the sink sets such a slot aside (quarantine) instead of trusting it.
    """


class DeadLetterError(RecoverableSinkError):
    """Records failed with a non-retriable Kafka error and no dead-letter topic is set.

    The records are kept in the WAL's dead-letter store; ``record_ids`` names
    them and ``errors`` maps each id to the broker's error text.
    """

    def __init__(self, message: str, record_ids: Sequence[str], errors: dict[str, str]) -> None:
        super().__init__(message)
        self.record_ids = tuple(record_ids)
        self.errors = dict(errors)


class ProducerError(RecoverableSinkError):
    """The Kafka client could not be built or failed fatally; ``kafka_error`` is the cause."""

    def __init__(self, message: str, kafka_error: Any = None) -> None:
        super().__init__(message)
        self.kafka_error = kafka_error


class BrokerUnreachableError(RecoverableSinkError):
    """The first batch of a sink that has never reached a broker could not reach one.

    ``bootstrap_servers`` is the address tried and ``last_error`` the client's
    last connection error (secrets scrubbed). Nothing was dropped: the
    ``pending`` records the batch accepted stay in the executors' WALs and are
    delivered once a broker answers (or by the next run).
    """

    def __init__(self, message: str, bootstrap_servers: str, last_error: str, pending: int = 0) -> None:
        super().__init__(message)
        self.bootstrap_servers = bootstrap_servers
        self.last_error = last_error
        self.pending = pending


class ExactlyOnceMismatchError(RecoverableSinkError):
    """A re-run of a batch does not hold what the first run already committed to Kafka.

    In exactly-once mode a (batch, partition) whose transaction is committed is
    skipped when the batch runs again; that is only right if the re-run puts
    the same rows in the same Spark partition. ``batch``, ``partition``,
    ``rows`` (this run) and ``committed_rows`` (the committed unit's count,
    modulo 2**24) say where it differs. Nothing of this attempt is published.
    """

    def __init__(self, message: str, batch: int, partition: int, rows: int, committed_rows: int | None) -> None:
        super().__init__(message)
        self.batch = batch
        self.partition = partition
        self.rows = rows
        self.committed_rows = committed_rows
