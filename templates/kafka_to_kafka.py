"""Read Kafka, transform, write Kafka through RecoverableKafkaSink: a spark-submit job template.

    spark-submit --master 'local[2]' \
        --packages org.apache.spark:spark-sql-kafka-0-10_2.13:<your Spark version> \
        templates/kafka_to_kafka.py --conf conf/kafka_to_kafka.json

(``_2.12`` on Spark 3.5, whose PyPI build is for Scala 2.12.)

The source is Spark's Kafka source (``source.subscribe`` on
``source.bootstrap_servers``; ``source.consumer_conf`` holds further consumer
options, secrets as {"env": "VARIABLE"}). ``transform`` is the job's logic:
replace it. conf/kafka_to_kafka.json is at-least-once (ids that hold across
the Kafka source's re-runs); ``"guarantee": "exactly_once"`` there makes it
transactional (docs/guarantees.md). The rest works as in templates/stream_to_kafka.py.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field

from pyspark.sql import DataFrame, SparkSession

from spark_recoverable_sink.jobs import (
    check_client_conf,
    resolve_client_conf,
    run_template,
)


@dataclass(frozen=True)
class Source:
    """``source``: the Kafka cluster and topics read from."""

    bootstrap_servers: str
    subscribe: str
    starting_offsets: str = "earliest"
    max_offsets_per_trigger: int = 0  # 0 = no limit
    consumer_conf: dict = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        check_client_conf("source.consumer_conf", self.consumer_conf)


def read_source(spark: SparkSession, source: Source) -> DataFrame:
    """``spark.readStream.format("kafka")`` with the ``source`` settings (secrets resolved here)."""
    reader = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", source.bootstrap_servers)
              .option("subscribe", source.subscribe).option("startingOffsets", source.starting_offsets))
    if source.max_offsets_per_trigger > 0:
        reader = reader.option("maxOffsetsPerTrigger", source.max_offsets_per_trigger)
    for name, value in resolve_client_conf("source.consumer_conf", source.consumer_conf).items():
        reader = reader.option(f"kafka.{name}", str(value))
    return reader.load()


def transform(df: DataFrame) -> DataFrame:
    """The job's logic on the Kafka source schema: keep the key, wrap the value with where it came from.

    The value is a struct: written as JSON text, or with ``sink.value_format`` as Avro or JSON Schema.
    """
    return df.where("value is not null").selectExpr(
        "key",
        "named_struct('payload', cast(value as string), 'topic', topic, 'partition', partition, "
        "'offset', offset) as value",
    )


def build_source(spark: SparkSession, source: Source) -> DataFrame:
    """The job's input for the sink: the Kafka source, transformed."""
    return transform(read_source(spark, source))


if __name__ == "__main__":
    sys.exit(run_template(Source, build_source, job="kafka_to_kafka"))
