"""Lets Spark find ``format("recoverable-kafka")`` by itself.

When a session looks up Python data sources it imports every top-level
module named ``pyspark_*`` and registers its ``DefaultSource``. This module
ships with ``spark-recoverable-sink``.
"""

from spark_recoverable_sink.driver.datasource import (
    RecoverableKafkaDataSource as DefaultSource,
)

__all__ = ["DefaultSource"]
