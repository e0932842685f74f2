"""The scaling section's ``local-cluster`` run: its own Spark app, in a child process of ``bench/run.py``.

``local-cluster[2,1,1024]`` starts a standalone master, two worker JVMs and
two executor JVMs (one core, 1 GiB each) on this machine: tasks run in
executor processes apart from the driver, rows cross process boundaries as
in a real cluster, and each executor has its own Python workers. A master
cannot be changed inside a running JVM, so this runs in a process of its
own (like tests/programs/cluster_app.py), against the bench's broker, and
measures the same things as one point of the scaling section
(:func:`bench.spark_scaling.scaling_point`).

Usage: python bench/cluster.py '<json arguments>'; prints one line ``RESULT <json>``.

Arguments: ``bootstrap``, ``scratch``, ``master``, ``partitions``, ``rows``,
``value_bytes``, ``rounds``, ``rows_per_s`` (rows per micro-batch), ``duration_s``
(micro-batches measured), ``warmup_batches``, ``max_s``, ``topic_partitions``, ``verify``, ``tp_writers``,
``lat_writers``, ``cpu_root`` (the bench process: its tree holds the broker
and this app, so CPU seconds count both).
"""

from __future__ import annotations

import json
import os
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)


def spark_home(home: str) -> str:
    """A SPARK_HOME of links to pyspark's files: the workers' logs and scratch go to ``home/work``, not site-packages."""
    import pyspark

    os.makedirs(home, exist_ok=True)
    pdir = os.path.dirname(pyspark.__file__)
    for entry in os.listdir(pdir):
        if entry != "work" and not os.path.exists(os.path.join(home, entry)):
            os.symlink(os.path.join(pdir, entry), os.path.join(home, entry))
    return home


def main() -> None:
    a = json.loads(sys.argv[1])
    # Before the JVM starts: the workers and executors inherit this environment (the executors' Python
    # workers need this interpreter, and bench/ and the package on their path).
    os.environ["SPARK_HOME"] = spark_home(os.path.join(a["scratch"], "spark_home"))
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (REPO, os.environ.get("PYTHONPATH")) if p)

    from bench import spark_bench as sb
    from bench.spark_scaling import scaling_point

    t = time.monotonic()
    spark = sb.build_spark(1, a["partitions"], a.get("driver_memory", "2g"), master=a["master"],
                           app_name="rks-bench-cluster",
                           extra_conf={"spark.driver.host": "127.0.0.1", "spark.driver.bindAddress": "127.0.0.1"})
    up = time.monotonic() - t
    sb.log(f"cluster: {a['master']} up in {up:.1f}s")
    try:
        # every executor registered before anything is timed (local-cluster starts them in the background)
        want = int(a.get("executors", 2))
        end = time.monotonic() + 120
        while time.monotonic() < end:
            n = spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size() - 1  # minus the driver
            if n >= want:
                break
            time.sleep(0.5)
        executors = spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size() - 1
        settings = sb.spark_settings(spark)
        point = scaling_point(
            spark, a["bootstrap"], partitions=a["partitions"], rows=a["rows"], value_bytes=a["value_bytes"],
            rounds=a["rounds"], rows_per_s=a["rows_per_s"], duration_s=a["duration_s"],
            warmup_batches=a["warmup_batches"], topic_partitions=a["topic_partitions"], scratch=a["scratch"],
            verify=a["verify"], tp_writers=tuple(a["tp_writers"]), lat_writers=tuple(a["lat_writers"]),
            max_s=a.get("max_s"), cpu_root=a.get("cpu_root"), tag="scaling cluster", warm_rows=a.get("warm_rows"))
    finally:
        spark.stop()
    point.update(master=a["master"], spark=settings, executors=executors, startup_s=up)
    print("RESULT " + json.dumps(point, default=str), flush=True)


if __name__ == "__main__":
    main()
