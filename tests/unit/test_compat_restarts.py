"""The compatibility tier restarts a query only for Spark 4.1's Kafka-source metrics bug, told by either text."""

from __future__ import annotations

from tests.compat.scenarios import _spark_kafka_metrics_bug

# str(query.exception()) under PySpark 4.1.1 (the NullPointerException's message alone, no class, no frame)
PYSPARK_41 = ('Cannot invoke "scala.collection.IterableOps.map(scala.Function1)" because the return value of '
              '"scala.Option.get()" is null\n=== Streaming Query ===\nIdentifier: [id = 0a6ff103]\n')
# the same failure where the Java class and frame are in the text (PySpark's JVM stack trace appended)
WITH_FRAME = ("java.lang.NullPointerException: ...\n\tat org.apache.spark.sql.kafka010.KafkaMicroBatchStream$"
              ".metrics(KafkaMicroBatchStream.scala:520)")


def test_the_kafka_source_metrics_bug_is_told_by_its_message_or_its_frame():
    assert _spark_kafka_metrics_bug(PYSPARK_41)
    assert _spark_kafka_metrics_bug(WITH_FRAME)


def test_a_failure_of_the_sink_or_another_null_is_not_restarted():
    assert not _spark_kafka_metrics_bug("PythonException: ExactlyOnceMismatchError: sink=s run=r batch=3 ...")
    assert not _spark_kafka_metrics_bug('java.lang.NullPointerException: Cannot invoke "String.length()" because '
                                        '"s" is null\n\tat org.apache.spark.sql.execution.Foo.bar(Foo.scala:1)')
