"""``python -m devtools.fetch_jars`` (``make jars``): Java checked, every jar the tests' JVM programs need fetched once.

Apache Kafka's jars (devtools/kafka_broker.py), Spark's Kafka connector and
Avro package (devtools/jvm.py) and the Schema Registry
(devtools/schema_registry.py) go into the cache of :func:`devtools.jvm.cache_root`;
a later run finds them there and fetches nothing. Run it from the checkout's root.
"""

from __future__ import annotations

import os
import sys

from devtools.jvm import MavenError, java, spark_avro_jars, spark_kafka_connector_jars
from devtools.kafka_broker import kafka_jars, kafka_version
from devtools.schema_registry import registry_app

__all__ = ["main"]


def main() -> int:
    """Fetch what is missing and print where each piece is; 2 (and one line on stderr) if something cannot be had."""
    try:
        where = java()
        kafka = kafka_jars()
        spark = spark_kafka_connector_jars()
        avro = spark_avro_jars()
        registry = registry_app()
    except (MavenError, RuntimeError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"java: {where}\nApache Kafka {kafka_version()}: {kafka}\nSpark's Kafka connector: {os.path.dirname(spark[0])}"
          f"\nSpark's Avro package: {avro[0]}\nSchema Registry (Apicurio): {registry}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
