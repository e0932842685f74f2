"""Writing the class-data-sharing archives of :mod:`devtools.cds` (``make jars``, :mod:`devtools.fetch_jars`).

1. Kafka's, by a broker that formats, serves a transactional producer and a
   read_committed consumer, and stops cleanly (the JVM writes the archive as it exits);
2. Spark's, by a PySpark session of the venv running jobs of the shapes the
   tests run (a shuffle, an Arrow and a row Python UDF, a Python data source,
   a streaming query), then stopped.

Each is written to a temporary name and renamed once complete, by one process
at a time (a lock beside it); an archive that exists is kept.
``python -m devtools.cds_make kafka|spark`` writes one. The Spark archive is
written before the tests start, not beside them: a session's SparkSession
started without it runs the whole session without it (a make test that
wrote it in the background took longer than one that waited for it).
"""

from __future__ import annotations

import contextlib
import fcntl
import glob
import os
import subprocess
import sys
import tempfile

from .cds import kafka_archive
from .jvm import java
from .kafka_broker import KafkaBroker, kafka_jars
from .processes import stop_process

__all__ = ["make_kafka_archive", "make_spark_archive"]


#: The first bytes of a JDK 17 dynamic archive; the JVM writes its header last, so a dump cut short lacks them.
_DYNAMIC_MAGIC = 0xF00BABA8


def _written(tmp: str, archive: str, what: str, source: str) -> str:
    """``tmp`` renamed ``archive``, beside a note of the directory it maps; archives of directories gone removed.

    Raises:
        RuntimeError: ``tmp`` is missing or not a whole dynamic archive (a dump cut short).
    """
    try:
        with open(tmp, "rb") as f:
            head = f.read(4)
    except OSError as exc:
        raise RuntimeError(f"the {what} JVM wrote no class-data archive ({tmp}): {exc}") from exc
    if len(head) < 4 or int.from_bytes(head, "little") != _DYNAMIC_MAGIC:
        raise RuntimeError(f"the {what} JVM's class-data archive {tmp} is not whole (a dump cut short?)")
    note = f"{archive}.source"
    with open(f"{note}.{os.getpid()}", "w") as f:
        f.write(source)
    os.replace(f"{note}.{os.getpid()}", note)  # never seen empty by another process's pruning
    os.replace(tmp, archive)
    for other in glob.glob(os.path.join(os.path.dirname(archive), "*.jsa.source")):
        try:
            with open(other) as f:
                gone_source = f.read().strip()
        except OSError:  # another process pruned it meanwhile
            continue
        if gone_source and not os.path.isdir(gone_source):  # a venv or a jar cache deleted since: never usable
            stem = other[:-len(".source")]
            for path in (stem, f"{stem}.lock", other):
                with contextlib.suppress(OSError):
                    os.unlink(path)
    return archive


def make_kafka_archive(timeout_s: float = 120.0) -> str:
    """Step 1: write Kafka's archive unless it exists; returns its path.

    Raises:
        RuntimeError: the broker did not stop cleanly or wrote no archive.
        devtools.kafka_broker.BrokerSetupError: the broker did not start.
    """
    archive = kafka_archive(java(), kafka_jars())
    if os.path.isfile(archive):
        return archive
    tmp = f"{archive}.{os.getpid()}.tmp"
    broker = KafkaBroker(jvm_options=("-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Xss1m",
                                      f"-XX:ArchiveClassesAtExit={tmp}"))
    try:
        broker.start()
        try:
            _exercise_broker(broker.bootstrap)
        except Exception as exc:  # noqa: BLE001 - a client error of the warm-up: no archive, said by the caller
            raise RuntimeError(f"the broker's warm-up failed: {exc}") from exc
        stop_process(broker.proc, timeout_s=timeout_s)
        if broker.proc is not None and broker.proc.returncode not in (0, 143, -15):
            raise RuntimeError(f"the broker did not stop cleanly (exit {broker.proc.returncode}): no whole archive")
        return _written(tmp, archive, "Kafka broker", kafka_jars())
    finally:
        broker.stop()
        if os.path.exists(tmp):
            os.unlink(tmp)


def _exercise_broker(bootstrap: str) -> None:
    """A topic, a transaction of 1,000 records and a read_committed group read: the broker's paths the tests use."""
    from confluent_kafka import Consumer, Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic("cds-warmup", 2, 1)])["cds-warmup"].result(60)
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": "cds-warmup", "linger.ms": 5})
    p.init_transactions(60)
    p.begin_transaction()
    for i in range(1000):
        p.produce("cds-warmup", value=b"x" * 100, key=str(i).encode())
    p.commit_transaction(60)
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "cds-warmup", "auto.offset.reset": "earliest",
                  "isolation.level": "read_committed", "enable.auto.commit": False})
    c.subscribe(["cds-warmup"])
    got = 0
    for _ in range(60):  # at most 30 s
        got += sum(1 for m in c.consume(1000, 0.5) if m.error() is None)
        if got >= 1000:
            c.commit(asynchronous=False)
            break
    c.close()


_SPARK_WARMUP = r"""
from pyspark.sql import SparkSession

spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
         .config("spark.sql.shuffle.partitions", "4").getOrCreate())
df = spark.range(20000).selectExpr("id", "cast(id % 97 as string) as key", "repeat('v', 100) as value")
df.groupBy("key").count().collect()
df.repartition(4, "key").sortWithinPartitions("id").selectExpr("hash(key) % 8 as lane").distinct().collect()

def passthrough(it):
    for b in it:
        yield b

df.mapInArrow(passthrough, df.schema).count()
from pyspark.sql.functions import udf
spark.range(10).select(udf(lambda x: x + 1, "long")("id")).collect()
try:
    from pyspark.sql.datasource import DataSource, DataSourceWriter, WriterCommitMessage

    class W(DataSourceWriter):
        def write(self, it):
            for _ in it:
                pass
            return WriterCommitMessage()

    class D(DataSource):
        @classmethod
        def name(cls):
            return "cdswarmup"

        def writer(self, schema, overwrite):
            return W()

    spark.dataSource.register(D)
    df.write.format("cdswarmup").mode("append").save()
except ImportError:  # PySpark 3.5: no Python data source
    pass
df.write.parquet("input")
q = (spark.readStream.schema(df.schema).parquet("input").writeStream.trigger(availableNow=True)
     .option("checkpointLocation", "checkpoint").foreachBatch(lambda b, i: b.count()).start())
q.awaitTermination(300)
spark.stop()
"""


def make_spark_archive(python: str = sys.executable, timeout_s: float = 600.0) -> str:
    """Step 2: write the archive of ``python``'s PySpark driver unless it exists; returns its path.

    Raises:
        RuntimeError: the warm-up failed or its JVM wrote no archive.
    """
    jvm = java()
    out = subprocess.run([python, "-c", "import os, pyspark; from devtools.cds import spark_archive; "
                          f"print(spark_archive({jvm!r})); print(os.path.dirname(pyspark.__file__))"],
                         capture_output=True, text=True, timeout=120, cwd=os.path.dirname(os.path.dirname(
                             os.path.abspath(__file__))))
    if out.returncode != 0:
        raise RuntimeError(f"cannot name the Spark archive: {out.stderr[-2000:]}")
    lines = out.stdout.strip().splitlines()
    if len(lines) < 2:
        raise RuntimeError(f"cannot name the Spark archive: {out.stdout[-500:]!r}")
    archive, home = lines[-2:]
    with open(f"{archive}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one writer; another process waits and takes its archive
        if os.path.isfile(archive):
            return archive
        return _warm_up(python, archive, home, timeout_s)


def _warm_up(python: str, archive: str, home: str, timeout_s: float) -> str:
    tmp = f"{archive}.{os.getpid()}.tmp"
    env = dict(os.environ, PYSPARK_PYTHON=python, PYSPARK_DRIVER_PYTHON=python,
               PYSPARK_SUBMIT_ARGS=f"--driver-java-options -XX:ArchiveClassesAtExit={tmp} pyspark-shell")
    env["JDK_JAVA_OPTIONS"] = "-XX:TieredStopAtLevel=1"  # as the tests run it, and no archive of another
    try:
        with tempfile.TemporaryDirectory(prefix="rks-cds-") as cwd:
            run = subprocess.run([python, "-c", _SPARK_WARMUP], capture_output=True, text=True, timeout=timeout_s,
                                 env=env, cwd=cwd)
        if run.returncode != 0:
            raise RuntimeError(f"the Spark warm-up failed (rc={run.returncode}): {run.stderr[-2000:]}")
        return _written(tmp, archive, "Spark driver", home)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def main(argv: list[str]) -> int:
    """``python -m devtools.cds_make kafka|spark``: write that archive unless it exists; 1 (and why) if it cannot."""
    make = {"kafka": make_kafka_archive, "spark": make_spark_archive}.get(argv[0] if argv else "")
    if make is None:
        print("usage: python -m devtools.cds_make kafka|spark", file=sys.stderr)
        return 2
    try:
        print(make())
    except (RuntimeError, OSError, subprocess.TimeoutExpired) as exc:
        print(f"no class-data archive: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
