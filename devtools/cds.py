"""Class-data-sharing archives for the tests' JVMs: the classes a Kafka broker or a Spark driver loads, mapped.

A test JVM lives seconds to minutes, and a good part of its CPU is loading
and verifying the same classes every time: a Spark driver that starts, runs
two small jobs and stops used 16 CPU-s on this project's 2-core machine, 9
with an archive of the classes an earlier run loaded (JDK 17's dynamic CDS,
``-XX:ArchiveClassesAtExit`` once, then ``-XX:SharedArchiveFile``); a broker's
format, start and stop 5.3 and 3.7. They are written once (:mod:`devtools.cds_make`);
this module names them and gives the options that use them.

Each archive is named after what it depends on (the ``java`` binary, the
jars' names, sizes and times), so a new JDK, Kafka or PySpark gets a new one;
the JVM checks its class path itself and, when it does not match (another
program, another venv), runs without the archive. Its messages about that are
turned off: ``spark-class`` reads the launcher's standard output, where they
would go. Nothing here changes what a JVM does, only how fast it starts; the
benchmarks (``bench/``) use no archive for Spark (their timing excludes the
broker's start).
"""

from __future__ import annotations

import glob
import hashlib
import os

__all__ = ["kafka_archive", "spark_archive", "use_options"]

#: What a JVM is given with an archive: it, and silence when it does not fit that JVM's class path.
_QUIET = ("-Xshare:auto", "-Xlog:cds*=off")


def _cds_dir() -> str:
    from .jvm import cache_root

    path = os.path.join(cache_root(), "cds")
    os.makedirs(path, exist_ok=True)
    return path


def _key(java: str, jar_dirs: list[str], extra: str = "") -> str:
    h = hashlib.sha256(extra.encode())
    real = os.path.realpath(java)
    st = os.stat(real)
    h.update(f"{real}:{st.st_size}:{int(st.st_mtime)}".encode())
    for d in jar_dirs:
        for jar in sorted(glob.glob(os.path.join(d, "*.jar"))):
            st = os.stat(jar)
            h.update(f"{jar}:{st.st_size}:{int(st.st_mtime)}".encode())
    return h.hexdigest()[:16]


def kafka_archive(java: str, jars: str) -> str:
    """Where the archive of the Kafka broker in ``jars`` run by ``java`` is (it may not exist yet)."""
    return os.path.join(_cds_dir(), f"kafka-{_key(java, [jars])}.jsa")


def spark_archive(java: str) -> str:
    """Where the archive of this interpreter's PySpark driver run by ``java`` is (it may not exist yet)."""
    import pyspark

    home = os.path.dirname(pyspark.__file__)
    return os.path.join(_cds_dir(), f"spark-{_key(java, [os.path.join(home, 'jars')], home)}.jsa")


def use_options(archive: str) -> tuple[str, ...]:
    """The JVM options that use ``archive``; none when it does not exist."""
    return (f"-XX:SharedArchiveFile={archive}", *_QUIET) if os.path.isfile(archive) else ()
