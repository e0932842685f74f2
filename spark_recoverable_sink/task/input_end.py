"""Proof that a task read its whole input: the end marker Spark sends after the last Arrow batch.

A Python worker reads a task's rows as an Arrow IPC stream. When the
stream's source fails part-way (a ``FetchFailed`` on a shuffle after an
executor is lost, a cancelled stage, the losing copy of a speculative pair),
the JVM closes the worker's input, and that can happen between two Arrow
messages: pyarrow then reads a clean end of stream, and the code after the
input loop runs as if the task had read everything. An exactly-once task
would commit a unit of part of its records, and the retry (which brings the
whole unit) would find its lane's marker holding another digest.

What tells the two ends apart is what follows: after the last batch of a
complete input, Spark writes the end of the Arrow stream and then
``END_OF_STREAM`` (-4) on the same socket, before it waits for the worker's
output (``BasePythonRunner``; since Spark 3.5 in every runner that feeds
``mapInArrow``). After a cut there is nothing: the socket is at its end. So
once the rows are read, :func:`input_complete` looks at the next bytes of the
worker's input without consuming them (``peek``): bytes there prove the
input was whole; the end of the file proves it was cut.

The input file is PySpark's ``worker.main(infile, outfile)`` argument, found
on the call stack (the mapInArrow function is called from there). Outside a
Spark task (no ``TaskContext``: tools, tests calling the writer directly)
there is nothing to prove. In a Spark task without that frame (a vendor's
runtime with a worker of its own, a PySpark whose worker moved) nothing can
be proven either way, so the guard never switches itself off: it raises
:class:`SparkVersionError` naming the PySpark build, and the exactly-once task
commits nothing (tests/spark/test_input_end_guard.py runs tasks under a
renamed copy of PySpark's worker).

Where it runs: the executor, in the task, after its input loop.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import Any

from ..errors import SparkVersionError

__all__ = ["input_complete", "worker_input"]

log = logging.getLogger(__name__)


def worker_input() -> Any | None:
    """The Python worker's input stream (``infile`` of PySpark's ``worker.main``), or ``None`` outside one."""
    frame: Any = sys._getframe(1)
    while frame is not None:
        code = frame.f_code
        if code.co_name == "main" and code.co_filename.endswith("worker.py") and "infile" in frame.f_locals:
            infile = frame.f_locals["infile"]
            return infile if hasattr(infile, "peek") else None
        frame = frame.f_back
    return None


def input_complete() -> bool | None:
    """Whether the task's input stream went on past its last Arrow batch (``None``: not in a Spark task).

    Blocks only until the next bytes arrive: Spark sends them with the last
    batch, before it reads any output of the worker.

    Raises:
        SparkVersionError: in a Spark task whose PySpark worker's input cannot be found (naming the build).
    """
    infile = worker_input()
    if infile is None:
        if not _in_spark_task():
            return None
        raise _unprovable()
    try:
        return bool(infile.peek(4))
    except (OSError, ValueError):  # a closed or broken socket: the input did not end well
        return False


def _in_spark_task() -> bool:
    """Whether this thread runs a Spark task (PySpark's worker sets its ``TaskContext`` before calling the task)."""
    try:
        from pyspark import TaskContext
    except ImportError:  # no PySpark here: not a Spark task
        return False
    return TaskContext.get() is not None


def _unprovable() -> SparkVersionError:
    """The error of a Spark task whose worker input cannot be read: which PySpark, and what runs the task."""
    import pyspark

    frame: Any = sys._getframe(1)
    outer = None
    while frame is not None:  # the outermost frame named main: what this runtime runs tasks from
        if frame.f_code.co_name == "main":
            outer = frame.f_code
        frame = frame.f_back
    runs = f"{outer.co_filename} ({outer.co_name})" if outer is not None else "no frame named main"
    version = getattr(pyspark, "__version__", "?")
    why = (f"exactly-once cannot prove this task read its whole input under PySpark {version} "
           f"({os.path.dirname(pyspark.__file__)}): the input of its Python worker, the infile of PySpark's "
           f"worker.py main(infile, outfile), is not on the task's stack (it runs from {runs}). Nothing of the "
           "unit is committed. Run exactly-once on a PySpark whose worker is PySpark's own (docs/guarantees.md), "
           "or use guarantee='at_least_once' on this runtime")
    log.error("%s", why)  # Spark may never read the task's error
    return SparkVersionError("guarantee", why, version)
