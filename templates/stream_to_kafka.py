"""Stream rows into Kafka through RecoverableKafkaSink: a spark-submit job template.

    spark-submit --master 'local[2]' templates/stream_to_kafka.py --conf conf/stream_to_kafka.json

Settings come from the JSON conf file (sections spark, kafka, sink, source,
query; see spark_recoverable_sink.jobs.settings), KAFKA_BOOTSTRAP overrides
kafka.bootstrap_servers, and secrets are written as {"env": "VARIABLE"}.
The query, its graceful stop and the drain come from
spark_recoverable_sink.jobs.run_template.

The source is Spark's ``rate`` source (or ``rate-micro-batch``): key = the
row's number, value = {"n": <number>, "ts": "<time>"}. Copy this file and
replace ``Source`` and ``build_source`` with the job's real input.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

from pyspark.sql import DataFrame, SparkSession

from spark_recoverable_sink.jobs import SettingsError, run_template

FORMATS = ("rate", "rate-micro-batch")


@dataclass(frozen=True)
class Source:
    """``source``: ``rate`` (rows_per_second) or ``rate-micro-batch`` (rows_per_batch)."""

    format: str = "rate"
    rows_per_second: int = 1000
    rows_per_batch: int = 10000
    num_partitions: int = 2

    def __post_init__(self) -> None:
        if self.format not in FORMATS:
            raise SettingsError(f"source.format: must be one of {FORMATS}, got {self.format!r}")
        for name in ("rows_per_second", "rows_per_batch", "num_partitions"):
            if getattr(self, name) <= 0:
                raise SettingsError(f"source.{name}: must be > 0, got {getattr(self, name)}")


def build_source(spark: SparkSession, source: Source) -> DataFrame:
    """The input in the Kafka sink schema: ``key`` (string), ``value`` (a struct: JSON unless ``sink.value_format``)."""
    reader = spark.readStream.format(source.format).option("numPartitions", source.num_partitions)
    if source.format == "rate":
        reader = reader.option("rowsPerSecond", source.rows_per_second)
    else:
        reader = reader.option("rowsPerBatch", source.rows_per_batch)
    return reader.load().selectExpr(
        "cast(value as string) as key",
        "named_struct('n', value, 'ts', cast(timestamp as string)) as value",
    )


if __name__ == "__main__":
    sys.exit(run_template(Source, build_source, job="stream_to_kafka"))
