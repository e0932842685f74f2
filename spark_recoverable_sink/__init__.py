"""spark_recoverable_sink: publish Spark DataFrames to Kafka through a local write-ahead log.

Every record is committed to an executor-local LMDB write-ahead log before
Kafka sees it, tracked until the broker acknowledges it, retried from the log
when delivery fails, and replayed by a later task when its worker died. See
docs/guarantees.md for the guarantees and docs/DESIGN.md for the data path.
"""

from .config import SinkConfig
from .driver import versions as _versions
from .driver.formats import Avro, JsonSchema
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
    SparkVersionError,
    WalError,
    WalFormatError,
    WalFullError,
    WalVersionError,
    WalWriteError,
)
from .report import BatchReport, PartitionReport


def __getattr__(name: str):  # noqa: ANN202 - PEP 562: the data source needs pyspark, imported on first use
    if name == "RecoverableKafkaDataSource":
        from .driver.datasource import RecoverableKafkaDataSource

        return RecoverableKafkaDataSource
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "RecoverableKafkaSink",
    "RecoverableKafkaDataSource",
    "Avro",
    "JsonSchema",
    "SinkConfig",
    "BatchReport",
    "PartitionReport",
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
    "DeadLetterError",
    "ProducerError",
    "BrokerUnreachableError",
    "ExactlyOnceMismatchError",
    "MarkerError",
    "RegistryError",
    "RegistryUnavailableError",
    "RegistryAuthError",
    "SchemaIncompatibleError",
]

_pyspark = _versions.distribution_version()  # read without importing PySpark
if _pyspark is not None and not _versions.features(_pyspark).python_data_source:
    __all__.remove("RecoverableKafkaDataSource")  # PySpark 3.5, 4.0: ``import *`` leaves the data source out

__version__ = "0.1.0"
