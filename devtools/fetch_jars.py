"""``python -m devtools.fetch_jars`` (``make jars``): Java checked, every jar the tests' JVM programs need fetched once.

Apache Kafka's jars (devtools/kafka_broker.py), Spark's Kafka connector and
Avro package (devtools/jvm.py) and the Schema Registry
(devtools/schema_registry.py) go into the cache of :func:`devtools.jvm.cache_root`;
a later run finds them there and fetches nothing. The class-data archives of
the broker's and this venv's Spark driver's JVMs are written there too, once
(devtools/cds_make.py, 70 s for a new venv's): they only make those JVMs
start faster, so one that cannot be written is said and left out. Run it from the checkout's root.
"""

from __future__ import annotations

import os
import subprocess
import sys

from devtools.cds_make import make_kafka_archive, make_spark_archive
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
    for what, make in (("Kafka broker", make_kafka_archive), ("Spark driver", make_spark_archive)):
        try:
            print(f"class-data archive of the {what}: {make()}")
        except (RuntimeError, OSError, subprocess.TimeoutExpired) as exc:
            print(f"warning: no class-data archive of the {what} (its JVMs start slower): {exc}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
