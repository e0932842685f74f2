"""``make demo``: a short streaming job through the sink, then a complete read-back.

Steps:

1. start a single-node Apache Kafka broker (devtools/kafka_broker.py, its jars
   fetched once from Maven Central) on free loopback ports, its log under
   ``run.work_dir``, unless ``KAFKA_BOOTSTRAP`` names an existing cluster;
2. create a fresh topic ``<kafka.topic>-<run id>`` with ``kafka.partitions`` partitions;
3. stream ``source.batches`` micro-batches of ``source.rows_per_batch`` rows
   from Spark's ``rate-micro-batch`` source through
   :class:`RecoverableKafkaSink` (key = the row's number, value =
   ``{"n": <number>, "ts": "<time>"}``), then stop the query;
4. read the topic back completely (``assign`` from the beginning of every
   partition, until every expected record came and the topic is quiet) and
   print a summary: rows sent, records received, distinct ``rks-id`` ids and
   values, duplicates, lost, and the table of batch reports.

Exit code: 0 when nothing was lost, 1 when something was lost or the query
failed, 2 when the conf file is wrong.

Everything the demo writes goes under ``run.work_dir`` (``.demo/``,
gitignored). With the embedded broker (a fresh one each run) the WAL and
checkpoint of an earlier run are deleted first: records left in them belong
to a broker that no longer exists. With ``KAFKA_BOOTSTRAP`` the WAL
is kept, so records an interrupted earlier run left there are delivered (to
that run's topic) by this one.
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import sys
import time
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Mapping

from spark_recoverable_sink import (
    jobs as job,  # the templates' settings and building blocks
)

# The test Kafka broker's launcher (devtools/) lives at the repository root, outside the installed package.
_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if _REPO not in sys.path:
    sys.path.append(_REPO)
# The demo's settings and read-back (demo_settings.py, demo_readback.py) sit beside this file in templates/, which is
# not a package; the tests import this file by its path.
_JOBS = os.path.dirname(os.path.abspath(__file__))
if _JOBS not in sys.path:
    sys.path.append(_JOBS)

# Every name these two define stays reachable here (demo.DemoKafkaSettings, demo.ID_HEADER, ...).
from demo_readback import ID_HEADER, ReadBack, expected_units, read_back, summarize, verdict  # noqa: E402, F401
from demo_settings import (  # noqa: E402, F401
    DEMO_SECTIONS,
    DemoKafkaSettings,
    DemoSettings,
    DemoSinkSettings,
    DemoSourceSettings,
    RunSettings,
    load_settings,
    required_keys,
    setting_keys,
)

if TYPE_CHECKING:  # pragma: no cover
    from spark_recoverable_sink import BatchReport, RecoverableKafkaSink

__all__ = ["DemoSettings", "DEMO_SECTIONS", "setting_keys", "required_keys", "load_settings", "ReadBack",
           "read_back", "expected_units", "summarize", "verdict", "run_demo", "main"]

log = logging.getLogger("demo")


# -- the run ----------------------------------------------------------------------------

_LOG4J2 = """\
rootLogger.level = error
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{HH:mm:ss} %p %c{1}: %m%n
"""


def _quiet_spark(spark: job.SparkSettings, work_dir: str) -> job.SparkSettings:
    """``spark`` with a log4j2 config that prints errors only (Spark's start-up noise included)."""
    path = os.path.join(work_dir, "log4j2.properties")
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(_LOG4J2)
    conf = dict(spark.conf)
    opt = f"-Dlog4j2.configurationFile=file:{os.path.abspath(path)}"
    conf["spark.driver.extraJavaOptions"] = f"{conf.get('spark.driver.extraJavaOptions', '')} {opt}".strip()
    return replace(spark, conf=conf)


def _prepare_dirs(s: DemoSettings, embedded: bool) -> tuple[str, str]:
    work = os.path.abspath(s.run.work_dir)
    wal, chk = os.path.join(work, "wal"), os.path.join(work, "checkpoint")
    shutil.rmtree(chk, ignore_errors=True)  # rate-micro-batch starts again at 0, batch ids at 0
    if embedded and os.path.exists(wal):
        log.info("demo=clean wal_dir=%s reason=embedded-broker-of-an-earlier-run-is-gone", wal)
        shutil.rmtree(wal)
    os.makedirs(work, exist_ok=True)
    return wal, chk


def run_stream(s: DemoSettings, sink: "RecoverableKafkaSink", checkpoint: str) -> float:
    """Run the bounded streaming query; returns its seconds.

    Batches after ``source.batches`` are skipped by the ``foreachBatch``
    function (the demo's bound: they are neither written nor counted) and the
    query is stopped as soon as the last wanted batch was reported.

    Raises:
        RuntimeError: the query did not finish within ``run.timeout_s``.
        pyspark StreamingQueryException: the query failed.
    """
    from pyspark.sql import SparkSession

    spark = SparkSession.getActiveSession()
    assert spark is not None
    wanted = s.source.batches

    def bounded(df: Any, batch_id: int) -> None:
        if batch_id < wanted:
            sink(df, batch_id)

    df = (spark.readStream.format("rate-micro-batch").option("rowsPerBatch", s.source.rows_per_batch)
          .option("numPartitions", s.source.num_partitions).load()
          .selectExpr("cast(value as string) as key",
                      "to_json(named_struct('n', value, 'ts', cast(timestamp as string))) as value"))
    t0 = time.monotonic()
    q = df.writeStream.queryName("rks_demo").foreachBatch(bounded).option("checkpointLocation", checkpoint).start()
    seen = 0
    try:
        while q.isActive and len(sink.reports) < wanted:
            if time.monotonic() - t0 > s.run.timeout_s:
                raise RuntimeError(f"the query wrote {len(sink.reports)} of {wanted} batches "
                                   f"within run.timeout_s={s.run.timeout_s}")
            q.awaitTermination(0.2)
            for r in list(sink.reports)[seen:]:
                log.info("demo=batch %s", r.log_line())
            seen = len(sink.reports)
    finally:
        q.stop()
    exc = q.exception()
    if exc is not None:
        raise exc
    return time.monotonic() - t0


def _print_summary(s: DemoSettings, where: str, bootstrap: str, topic: str, reports: list["BatchReport"],
                   got: ReadBack, numbers: dict[str, int], stream_s: float) -> None:
    out = sys.stdout
    print("", file=out)
    print(f"spark_recoverable_sink demo: broker={where} bootstrap={bootstrap} topic={topic} "
          f"partitions={s.kafka.partitions} sink={s.sink.name}", file=out)
    print("", file=out)
    head = ("batch_id", "rows", "acked", "pending", "retried", "dead_lettered", "replayed", "seconds")
    print("  ".join(f"{h:>13}" for h in head), file=out)
    for r in reports:
        cells = [r.batch_id, r.rows, r.acked, r.pending, r.retried, r.dead_lettered, r.replayed]
        print("  ".join(f"{c:>13}" for c in cells) + f"  {r.seconds:>13.2f}", file=out)
    tot = [sum(getattr(r, k) for r in reports) for k in head[1:-1]]
    print("  ".join(f"{c:>13}" for c in ["total", *tot]) + f"  {sum(r.seconds for r in reports):>13.2f}", file=out)
    print("", file=out)
    rate = numbers["rows_sent"] / stream_s if stream_s > 0 else 0.0
    print(f"streaming: seconds={stream_s:.1f} rows_per_second={rate:,.0f}", file=out)
    print(f"read-back: seconds={got.seconds:.1f}", file=out)
    width = max(len(k) for k in numbers)
    for k, v in numbers.items():
        print(f"  {k:<{width}}  {v:>10,}", file=out)
    print("", file=out)
    if verdict(numbers):
        print(f"RESULT: OK, all {numbers['rows_sent']:,} rows arrived (lost=0, duplicates="
              f"{numbers['duplicates']})", file=out)
    else:
        print(f"RESULT: FAILED, lost={numbers['lost']} missing_values={numbers['missing_values']} "
              f"unexpected_ids={numbers['unexpected_ids']} values_under_other_ids="
              f"{numbers['values_under_other_ids']} records_without_id={numbers['records_without_id']} "
              f"of rows_sent={numbers['rows_sent']}", file=out)
    out.flush()


def run_demo(s: DemoSettings, environ: Mapping[str, str] | None = None) -> int:
    """Run the whole demo; returns the exit code (0 = nothing lost)."""
    from devtools.kafka_broker import KafkaBroker
    from spark_recoverable_sink import RecoverableKafkaSink

    environ = os.environ if environ is None else environ
    external = environ.get("KAFKA_BOOTSTRAP", "").strip()
    run_id = time.strftime("%Y%m%d-%H%M%S")
    topic = f"{s.kafka.topic}-{run_id}"
    wal_dir, checkpoint = _prepare_dirs(s, embedded=not external)
    broker = None
    spark = None
    try:
        if external:
            bootstrap, where = external, "external"
        else:
            kafka_dir = os.path.join(os.path.abspath(s.run.work_dir), "kafka")
            shutil.rmtree(kafka_dir, ignore_errors=True)  # a fresh broker: its log is this run's
            broker = KafkaBroker(kafka_dir).start()
            bootstrap, where = broker.bootstrap, "embedded"
        log.info("demo=broker kind=%s bootstrap=%s", where, bootstrap)
        kafka = job.KafkaSettings(bootstrap_servers=bootstrap, topic=topic, producer_conf=s.kafka.producer_conf,
                                  create_topic_partitions=s.kafka.partitions)
        conf = job.producer_conf(kafka, environ)
        sink = RecoverableKafkaSink(
            name=s.sink.name, kafka_conf=conf, topic=topic, wal_dir=wal_dir, ack_timeout_s=s.sink.ack_timeout_s,
            wal_sync=s.sink.wal_sync, max_wal_bytes=s.sink.max_wal_bytes, max_block_s=s.sink.max_block_s,
            prune_interval_s=s.sink.prune_interval_s, history=max(100, s.source.batches),
        )
        log.info("demo=sink %r", sink)
        job.ensure_topic(kafka, conf)
        log.info("demo=topic name=%s partitions=%d", topic, s.kafka.partitions)
        t = time.monotonic()
        spark = job.build_spark(_quiet_spark(s.spark, s.run.work_dir))
        log.info("demo=spark master=%s seconds=%.1f", spark.sparkContext.master, time.monotonic() - t)
        stream_s = run_stream(s, sink, checkpoint)
        reports = list(sink.reports)
        rows = sum(r.rows for r in reports)
        log.info("demo=read-back topic=%s expected=%d", topic, rows)
        got = read_back(bootstrap, topic, rows, s.run.read_idle_s, s.run.read_timeout_s, conf)
        numbers = summarize(s.sink.name, reports, got)
        _print_summary(s, where, bootstrap, topic, reports, got, numbers, stream_s)
        return 0 if verdict(numbers) else 1
    finally:
        if spark is not None:
            spark.stop()
        if broker is not None:
            broker.stop()


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point (``make demo``)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--conf", required=True, help="JSON settings file (conf/demo.json)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr,
                        format="%(asctime)s level=%(levelname)s logger=%(name)s %(message)s")
    log.setLevel(logging.INFO)
    logging.getLogger("spark_recoverable_sink.jobs").setLevel(logging.INFO)
    try:
        settings = load_settings(args.conf)
    except (OSError, job.SettingsError) as exc:
        log.error("demo=failed conf=%s error=%s", args.conf, exc)
        return 2
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # no "hostname resolves to a loopback" warning
    t0 = time.monotonic()
    try:
        code = run_demo(settings)
    except Exception as exc:  # noqa: BLE001 - one line, exit code 1
        log.error("demo=failed error_type=%s error=%s", type(exc).__name__,
                  (str(exc).splitlines() or [""])[0])
        return 1
    log.info("demo=done exit_code=%d seconds=%.1f", code, time.monotonic() - t0)
    return code


if __name__ == "__main__":
    sys.exit(main())
