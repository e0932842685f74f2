"""Tier 3: the README's quickstart, run as a user runs it, against the test broker; then the docs' reader of it.

The block marked ``<!-- runnable: spark -->`` in README.md is written to a file and run by a fresh Python process
(its own SparkSession, ``local[2]``) with ``KAFKA_BOOTSTRAP`` set to the test broker and ``HOME`` to the test's
directory (the WAL's default ``~/.local/state/spark_recoverable_sink`` lands there). The topic ``quickstart`` is read
back: the write's 1000 rows, once each, with the ids and values the README promises. Then the blocks marked
``<!-- runnable: broker -->`` (docs/guarantees.md's de-duplicating reader) run the same way and must print the
number of distinct ids the topic holds.
"""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

import pytest

from ..docs import REPO, code_blocks, doc_paths
from ..kafka_helpers import create_topic, read_topic
from ..record_ids import POSITION, id_batch, id_kind, id_run, id_scope, run_of

pytestmark = pytest.mark.spark

TOPIC = "quickstart"  # the README's
#: Runs a sample as a script and says the run of the report it left (``runpy`` returns the script's globals).
_RUNNER = ("import runpy, sys\n"
           "g = runpy.run_path(sys.argv[1], run_name='__main__')\n"
           "if 'report' in g:\n"
           "    print('rks-doc-run=' + g['report'].run, flush=True)\n"
           "if 'spark' in g:\n"
           "    g['spark'].stop()\n")


def _blocks(marker: str) -> list[Any]:
    return [b for p in doc_paths() for b in code_blocks(p) if b.marker == marker and b.lang == "python"]


def _run(block: Any, tmp_path: Any, bootstrap: str, timeout_s: float) -> str:
    script = tmp_path / f"sample-{block.line}.py"
    script.write_text(block.source, encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith("RKS_")}  # no test hooks: a user's run
    env.update(KAFKA_BOOTSTRAP=bootstrap, HOME=str(tmp_path), PYSPARK_PYTHON=sys.executable,
               PYSPARK_DRIVER_PYTHON=sys.executable, SPARK_LOCAL_IP="127.0.0.1")
    proc = subprocess.run([sys.executable, "-c", _RUNNER, str(script)], env=env, cwd=str(tmp_path), text=True,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout_s)
    (tmp_path / f"sample-{block.line}.log").write_text(proc.stdout + proc.stderr)  # for a failure's post-mortem
    assert proc.returncode == 0, f"{block.where}: exit {proc.returncode}\n{proc.stderr[-4000:]}"
    return proc.stdout


def _ensure_topic(bootstrap: str) -> None:
    from confluent_kafka.admin import AdminClient

    if TOPIC not in AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=15).topics:
        create_topic(bootstrap, TOPIC, partitions=3)  # as the README's docker command creates it


def test_the_readme_quickstart_writes_what_it_says_and_the_docs_reader_counts_it(broker, tmp_path):
    (quickstart,) = [b for b in _blocks("spark") if b.path == os.path.join(REPO, "README.md")]
    _ensure_topic(broker.bootstrap)

    out = _run(quickstart, tmp_path, broker.bootstrap, 300)
    printed = [ln for ln in out.splitlines() if not ln.startswith("rks-doc-run=")]
    assert printed[-1].split() == ["1000", "1000", "0"], out  # the block's comment: -> 1000 1000 0
    (run,) = [ln.split("=", 1)[1] for ln in out.splitlines() if ln.startswith("rks-doc-run=")]
    assert os.path.isdir(tmp_path / ".local" / "state" / "spark_recoverable_sink" / "quickstart")  # the default WAL

    contents = read_topic(broker.bootstrap, TOPIC)
    mine = [r for r in contents.records if r.rid and id_run(r.rid) == run_of("quickstart", run)]
    assert len(mine) == 1000 and len({r.rid for r in mine}) == 1000, f"{len(mine)} records of run {run}"
    # a write() never run again of spark.range: each record named by its Spark partition and position there
    assert {(id_kind(r.rid), id_batch(r.rid)) for r in mine} == {(POSITION, 0)}
    positions = sorted((id_scope(r.rid), int(r.rid[-16:], 16)) for r in mine)
    assert len(positions) == 1000 and all(p < 1000 for _s, p in positions)
    assert sorted((int(r.key), r.value) for r in mine) == [(i, f"order-{i}".encode()) for i in range(1000)]

    distinct = len(contents.distinct_ids())
    readers = _blocks("broker")
    assert readers, "docs/guarantees.md's reader of the quickstart is marked <!-- runnable: broker -->"
    for block in readers:
        said = _run(block, tmp_path, broker.bootstrap, 180).split()
        assert said and said[-1] == str(distinct), f"{block.where} printed {said[-1:]}, the topic has {distinct} ids"
