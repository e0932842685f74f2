"""Tier 3: exactly-once through Spark Connect, a batch that only the settle's drain job can end.

A local application (tests/programs/compat_app.py, this checkout, the main
environment's PySpark) starts a Spark Connect server; its client
(compat_client.py) runs ``foreachBatch(sink)`` exactly-once from Spark's
Kafka source. Under Connect the batch function runs in the server's
foreachBatch worker, whose session is a Connect one (no SparkContext). Batch
1's unit is left to the settle (tests/compat/scenarios.py's ``ForcedDrain``:
its task returns with it pending, its worker is SIGKILLed), so the driver's
settle must run a drain job through the Connect session, then the query is
stopped and restarted from its checkpoint. Read back read_committed: every
input record exactly once.
"""

from __future__ import annotations

import secrets
import sys

import pytest

from devtools.jvm import spark_kafka_connector_jars
from devtools.processes import free_port

from ..compat.harness import REPO, ROWS, check_forced_drain, kafka_input, output_topics, run_app
from ..faults.readback import read_back

pytestmark = pytest.mark.spark


def test_connect_exactly_once_batch_settled_by_a_drain_job_through_the_connect_session(broker, tmp_path):
    hook_dir = tmp_path / "hooks"
    hook_dir.mkdir()
    tag = secrets.token_hex(3)
    spec = {"version": "main", "bootstrap": broker.bootstrap, "work": str(tmp_path / "work"), "tag": tag, "rows": 0,
            "jars": spark_kafka_connector_jars(), "connect_port": free_port(), "source": kafka_input(broker.bootstrap),
            "outputs": output_topics(broker.bootstrap, ["cx_eo"]), "scenarios": ["connect"],
            "client_scenarios": ["cx_eo"]}
    results = run_app(sys.executable, [REPO], spec, str(hook_dir), 900)
    assert results["app_rc"] == 0, results["app_log"]
    client = results["connect"]
    assert client["client_rc"] == 0, client.get("client_stderr")
    assert "error" not in client["cx_eo"], f"{client['cx_eo']['error']}\n{client['cx_eo'].get('trace')}"
    check_forced_drain(client["cx_eo"], results["app_log"], f"cx-eo-{tag}")
    t = read_back(broker.bootstrap, spec["outputs"]["cx_eo"], range(ROWS), isolation="read_committed")
    assert (t.lost, t.duplicates, t.foreign) == (0, 0, 0), f"lost {t.lost} (e.g. {t.lost_sample}), duplicates " \
                                                           f"{t.duplicates}"
