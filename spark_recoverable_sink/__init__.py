"""spark_recoverable_sink: publish Spark DataFrames to Kafka through a local write-ahead log.

Every record is committed to an executor-local LMDB write-ahead log before
Kafka sees it, tracked until the broker acknowledges it, retried from the log
when delivery fails, and replayed by a later task when its worker died. See
docs/guarantees.md for the guarantees and docs/DESIGN.md for the data path.

The public API is what ``__all__`` here names, with :mod:`spark_recoverable_sink.jobs` (the job templates'
building blocks) and the ``rks`` command. Every other module of the package is internal: it may change in any
release, and the job templates, the notebook and the docs' examples import none of it (a test holds them to it).
"""

from .config import SinkConfig
from .delivery.engine import choose as delivery_engine
from .driver import versions as _versions
from .driver.formats import Avro, JsonSchema
from .driver.metrics import registry as metrics_registry
from .driver.sink import RecoverableKafkaSink
from .errors import (
    BrokerUnreachableError,
    ConfigError,
    DeadLetterError,
    ExactlyOnceMismatchError,
    InvalidRecordError,
    MarkerError,
    ProducerError,
    RecoverableSinkError,
    RegistryAuthError,
    RegistryError,
    RegistryUnavailableError,
    SchemaError,
    SchemaIncompatibleError,
    SettleTimeoutError,
    SparkVersionError,
    WalError,
    WalFormatError,
    WalFullError,
    WalReadError,
    WalUncleanError,
    WalVersionError,
    WalWriteError,
)
from .ids import batch_prefix, batch_prefix_of
from .report import BatchReport, TaskReport


def __getattr__(name: str):  # noqa: ANN202 - PEP 562: imported on first use
    if name == "RecoverableKafkaDataSource":  # needs pyspark
        from .driver.datasource import RecoverableKafkaDataSource

        return RecoverableKafkaDataSource
    if name == "SettingsError":  # the job templates' (spark_recoverable_sink.jobs)
        from .jobs.settings import SettingsError

        return SettingsError
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "RecoverableKafkaSink",
    "RecoverableKafkaDataSource",
    "Avro",
    "JsonSchema",
    "SinkConfig",
    "BatchReport",
    "TaskReport",
    "metrics_registry",
    "delivery_engine",
    "batch_prefix",
    "batch_prefix_of",
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
    "SettingsError",
]

_pyspark = _versions.distribution_version()  # read without importing PySpark
if _pyspark is not None and not _versions.features(_pyspark).python_data_source:
    __all__.remove("RecoverableKafkaDataSource")  # PySpark 3.5, 4.0: ``import *`` leaves the data source out

__version__ = "0.1.0"
