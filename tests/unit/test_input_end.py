"""Tier 1: the whole-input guard (spark_recoverable_sink/task/input_end.py) outside a Python worker.

Outside a Spark task there is no input to prove; inside one (a ``TaskContext`` set, as PySpark's worker sets it)
without PySpark's worker frame, nothing can be proven and the guard says so instead of stepping aside. The same
under a real Spark application whose workers run a renamed copy of PySpark's worker: tests/spark/test_input_end_guard.py.
"""

from __future__ import annotations

import pyspark
import pytest
from pyspark import TaskContext

from spark_recoverable_sink.errors import SparkVersionError
from spark_recoverable_sink.task.input_end import input_complete


@pytest.fixture
def task_context():
    TaskContext._setTaskContext(TaskContext())
    yield
    TaskContext._setTaskContext(None)


def test_outside_a_spark_task_there_is_nothing_to_prove():
    assert TaskContext.get() is None
    assert input_complete() is None


def test_in_a_spark_task_without_pyspark_s_worker_frame_it_refuses_naming_the_build(task_context):
    with pytest.raises(SparkVersionError) as ei:
        input_complete()
    assert ei.value.version == pyspark.__version__ and ei.value.option == "guarantee"
    assert f"PySpark {pyspark.__version__}" in str(ei.value) and "worker.py" in str(ei.value)
