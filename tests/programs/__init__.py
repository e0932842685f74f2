"""Programs the tests start as separate processes; none of them is a test module.

Each runs as ``python -m tests.programs.NAME`` (the repository root on
``PYTHONPATH``):

* ``writer_proc``, ``cli_writer`` -- a worker writing one partition, then dying (tests/broker);
* ``raise_once`` -- a test-hooks module (``RKS_TEST_HOOKS``) the writer processes load (tests/broker);
* ``writer_cli`` -- ``write_partition`` without Spark: task, crash-test writer, drain (tests/faults);
* ``cluster_app`` -- a streaming app in ``local-cluster`` mode (tests/faults, scenario 3);
* ``entry_points_app`` -- a fresh Spark application through every entry point (tests/spark);
* ``soak``, ``idle_worker`` -- long fault runs started by hand or by ``make soak``, not by pytest.

The rows the writers write come from test-helper modules (tests/broker/rows.py,
tests/faults/streams.py), which the tests import instead of a program.
"""
