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
    "SparkVersionError",
    "SchemaError",
    "InvalidRecordError",
    "WalError",
    "WalFullError",
    "WalFormatError",
    "WalVersionError",
    "WalWriteError",
    "WalReadError",
    "WalUncleanError",
    "DeadLetterError",
    "ProducerError",
    "BrokerUnreachableError",
    "ExactlyOnceMismatchError",
    "MarkerError",
    "SettleTimeoutError",
    "RegistryError",
    "RegistryUnavailableError",
    "RegistryAuthError",
    "SchemaIncompatibleError",
]


class RecoverableSinkError(Exception):
    """Root of every error this package raises."""


class ConfigError(RecoverableSinkError, ValueError):
    """An option of the sink is wrong; ``option`` names it."""

    def __init__(self, option: str, reason: str) -> None:
        super().__init__(f"invalid option {option!r}: {reason}")
        self.option = option
        self.reason = reason


class SparkVersionError(ConfigError, ImportError):
    """The installed PySpark lacks what an entry point or option needs; ``version`` names it.

    Raised when the sink is built or the entry point imported, and by an
    exactly-once task whose PySpark worker's input it cannot read (a vendor's
    worker: :mod:`.task.input_end`). The message names the alternative that
    runs on this version. An ``ImportError`` too: importing the data source on
    PySpark 3.5 raises it.
    """

    def __init__(self, option: str, reason: str, version: str) -> None:
        super().__init__(option, reason)
        self.version = version


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


class WalVersionError(WalFormatError):
    """A WAL slot, or a chunk in it, is of a version this build does not read; ``version`` is the one it has.

    Another build wrote it (older or newer): its bytes may well be sound, but
    they mean what that build meant. The slot is refused whole and left as it
    is (never replayed, set aside or dropped) until the build that wrote it
    delivers it (``rks replay``) or an operator quarantines it.
    """

    def __init__(self, message: str, path: str | None = None, version: str = "") -> None:
        super().__init__(message, path)
        self.version = version


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
    """A batch's unit does not match what its lane already committed to Kafka: nothing of it was published.

    In exactly-once mode a (run, batch, lane) whose transaction is
    committed is skipped when the batch runs again, which is only right when
    the re-run brings the same records (the marker holds a digest of their
    ids: :mod:`.ids`). Raised when the lane's marker shows the batch committed
    with other records, or a later batch committed (the run id was used
    before). ``run``, ``batch``, ``lane``, ``rows`` (this run) and
    ``reason`` say where it differs; ``committed_batch`` is the marker's batch.
    """

    def __init__(self, message: str, batch: int, lane: int, rows: int, committed_batch: int | None,
                 run: str = "", reason: str = "") -> None:
        super().__init__(message)
        self.batch = batch
        self.lane = lane
        self.rows = rows
        self.committed_batch = committed_batch
        self.run = run
        self.reason = reason


class MarkerError(RecoverableSinkError):
    """Exactly-once: the lanes' markers cannot be trusted, so no unit is published or skipped on them.

    Raised when the marker topic was deleted or replaced while the query ran
    (Kafka deletes a deleted topic's committed offsets with it: every lane's
    proof is gone), or when a lane group's offset
    metadata, or a lane's latest marker record, is not one this version reads
    (another client's, a newer version's, damaged). ``marker_topic`` names the topic,
    ``lane`` the lane concerned (empty for the whole topic). The message says
    what to do.
    """

    def __init__(self, message: str, marker_topic: str, lane: str = "") -> None:
        super().__init__(message)
        self.marker_topic = marker_topic
        self.lane = lane


class SettleTimeoutError(RecoverableSinkError):
    """Exactly-once: a batch's lanes were not all committed within ``settle_timeout_s``.

    ``lanes`` lists every lane still waiting: ``{"lane", "batch", "rows",
    "tries", "last_error"}`` (secrets scrubbed). Nothing was dropped: the
    units stay in the executors' WALs; the batch fails and runs again after a
    restart, and a committed lane is skipped then.
    """

    def __init__(self, message: str, lanes: Sequence[dict[str, Any]]) -> None:
        super().__init__(message)
        self.lanes = tuple(lanes)


class RegistryError(RecoverableSinkError):
    """The Schema Registry refused or failed a request of a ``value_format`` / ``key_format``.

    Raised on the driver before any record of the batch is written. ``subject``
    names the subject, ``status`` the HTTP status (``None`` when no answer
    came) and ``code`` the registry's error code (``-1`` when none). Messages
    never hold the registry's credentials.
    """

    def __init__(self, message: str, subject: str, status: int | None = None, code: int = -1) -> None:
        super().__init__(message)
        self.subject = subject
        self.status = status
        self.code = code


class RegistryUnavailableError(RegistryError):
    """No answer from the registry (down, unreachable, timed out, or a 5xx answer)."""


class RegistryAuthError(RegistryError):
    """The registry refused the credentials (HTTP 401) or the subject to them (HTTP 403)."""


class SchemaIncompatibleError(RegistryError):
    """The subject's compatibility rules refuse the schema (HTTP 409): nothing was registered or written."""
