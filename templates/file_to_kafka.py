"""Stream a landing directory of JSON or Parquet files into Kafka: a spark-submit job template.

    spark-submit --master 'local[2]' templates/file_to_kafka.py --conf conf/file_to_kafka.json

Each row goes to Kafka as key = ``source.key_column`` (as a string) and
value = the whole row: JSON text, or with ``sink.value_format`` Avro or JSON
Schema in Schema Registry's wire format. The files' schema comes from
``source.schema_file``: a Spark DDL string (``id bigint, name string``) or a
StructType's JSON (``df.schema.json()``). Settings, secrets, the query and its
graceful stop work as in templates/stream_to_kafka.py (spark_recoverable_sink.jobs);
``query.available_now: true`` processes the files present and stops.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from spark_recoverable_sink.jobs import SettingsError, load_schema, run_template

FORMATS = ("json", "parquet")


@dataclass(frozen=True)
class Source:
    """``source``: the landing directory, its file format and schema, and the key column."""

    path: str
    schema_file: str
    key_column: str
    format: str = "json"
    max_files_per_trigger: int = 100

    def __post_init__(self) -> None:
        if self.format not in FORMATS:
            raise SettingsError(f"source.format: must be one of {FORMATS}, got {self.format!r}")
        if self.max_files_per_trigger <= 0:
            raise SettingsError(f"source.max_files_per_trigger: must be > 0, got {self.max_files_per_trigger}")


def build_source(spark: SparkSession, source: Source) -> DataFrame:
    """The files as ``key`` = the key column, ``value`` = the row as a struct (JSON unless ``sink.value_format``)."""
    df = (spark.readStream.format(source.format).schema(load_schema(source.schema_file))
          .option("maxFilesPerTrigger", source.max_files_per_trigger).load(source.path))
    if source.key_column not in df.columns:
        raise SettingsError(f"source.key_column: {source.key_column!r} is not in the schema {df.columns}")
    return df.select(F.col(source.key_column).cast("string").alias("key"),
                     F.struct(*df.columns).alias("value"))


if __name__ == "__main__":
    sys.exit(run_template(Source, build_source, job="file_to_kafka"))
