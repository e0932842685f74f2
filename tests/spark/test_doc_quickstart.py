"""Tier 3: the README's quickstart and every screen of docs/entry-points.md, run as a user runs them, against the test
broker; then the docs' reader of it.

The block marked ``<!-- runnable: spark -->`` in README.md is written to a file and run by a fresh Python process
(its own SparkSession, ``local[2]``) with ``KAFKA_BOOTSTRAP`` set to the test broker and ``HOME`` to the test's
directory (the WAL's default ``~/.local/state/spark_recoverable_sink`` lands there). The topic ``quickstart`` is read
back: the write's 1000 rows, once each, with the ids and values the README promises. Then the blocks marked
``<!-- runnable: broker -->`` (docs/guarantees.md's de-duplicating reader) run the same way and must print the
number of distinct ids the topic holds.

Each screen of docs/entry-points.md runs the same way, from a directory of its own (its checkpoints are relative
paths): ``spark`` and ``connect`` blocks as Python scripts (with Spark's Kafka connector given as ``--jars``, and
``SPARK_REMOTE=local[2]`` for ``connect``: a local Spark Connect server), ``spark-submit`` blocks by bash beside a
copy of ``templates/`` and ``conf/`` and a landing directory of the quickstart's size; ``databricks`` blocks are only
compiled (tests/unit/test_doc_samples.py). Each screen reads the whole topic ``quickstart`` (or the landing
directory) and must print what its ``# ->`` comment says, with the quickstart's record count for ``1000``, and
leave in its topic that many new records under as many distinct ids (read_committed for exactly-once).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from typing import Any, Callable

import pytest

from ..docs import REPO, Block, code_blocks, doc_paths, section_of
from ..kafka_helpers import create_topic, read_topic
from ..record_ids import POSITION, id_batch, id_kind, id_run, id_scope, run_of

pytestmark = pytest.mark.spark

TOPIC = "quickstart"  # the README's
ENTRY_POINTS = os.path.join(REPO, "docs", "entry-points.md")
#: Runs a sample as a script and says the run of the report it left (``runpy`` returns the script's globals).
_RUNNER = ("import runpy, sys\n"
           "g = runpy.run_path(sys.argv[1], run_name='__main__')\n"
           "if 'report' in g:\n"
           "    print('rks-doc-run=' + g['report'].run, flush=True)\n"
           "if 'spark' in g:\n"
           "    g['spark'].stop()\n")
#: Spark Connect's answer when the Python process of a foreachBatch did not connect back to the JVM within its fixed
#: 10 s (importing PySpark's Connect client can take longer on a loaded machine): nothing ran, the script runs again
#: (tests/programs/entry_points_app.py does the same).
_NOT_STARTED = "to connect back"
_RUNS = 3


def _blocks(marker: str) -> list[Any]:
    return [b for p in doc_paths() for b in code_blocks(p) if b.marker == marker and b.lang == "python"]


def _env(tmp_path: Any, bootstrap: str, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RKS_")}  # no test hooks: a user's run
    env.update(KAFKA_BOOTSTRAP=bootstrap, HOME=str(tmp_path), PYSPARK_PYTHON=sys.executable,
               PYSPARK_DRIVER_PYTHON=sys.executable, SPARK_LOCAL_IP="127.0.0.1", **extra)
    env["PATH"] = os.pathsep.join([os.path.dirname(sys.executable), env.get("PATH", "")])  # spark-submit
    return env


def _run(block: Any, tmp_path: Any, bootstrap: str, timeout_s: float, **extra_env: str) -> str:
    if block.lang == "sh":
        cmd = ["bash", "-euo", "pipefail", "-c", block.source]
    else:
        script = tmp_path / f"sample-{block.line}.py"
        script.write_text(block.source, encoding="utf-8")
        cmd = [sys.executable, "-c", _RUNNER, str(script)]
    for run in range(1, _RUNS + 1):
        proc = subprocess.run(cmd, env=_env(tmp_path, bootstrap, **extra_env), cwd=str(tmp_path), text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout_s)
        (tmp_path / f"sample-{block.line}.{run}.log").write_text(proc.stdout + proc.stderr)  # for a post-mortem
        if proc.returncode == 0 or _NOT_STARTED not in proc.stdout + proc.stderr:
            break
    assert proc.returncode == 0, f"{block.where}: exit {proc.returncode}\n{(proc.stdout + proc.stderr)[-4000:]}"
    return proc.stdout


def _ensure_topic(bootstrap: str, topic: str) -> None:
    from confluent_kafka.admin import AdminClient

    if topic not in AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=15).topics:
        create_topic(bootstrap, topic, partitions=3)  # as the README's docker command creates it


@pytest.fixture(scope="module")
def quickstart(broker, tmp_path_factory) -> tuple[str, str, Any]:
    """The README's quickstart, run once for the module: its output and run, and its directory."""
    (block,) = [b for b in _blocks("spark") if b.path == os.path.join(REPO, "README.md")]
    _ensure_topic(broker.bootstrap, TOPIC)
    home = tmp_path_factory.mktemp("quickstart")
    out = _run(block, home, broker.bootstrap, 300)
    (run,) = [ln.split("=", 1)[1] for ln in out.splitlines() if ln.startswith("rks-doc-run=")]
    return out, run, home


def test_the_readme_quickstart_writes_what_it_says_and_the_docs_reader_counts_it(broker, quickstart, tmp_path):
    out, run, home = quickstart
    printed = [ln for ln in out.splitlines() if not ln.startswith("rks-doc-run=")]
    assert printed[-1].split() == ["1000", "1000", "0"], out  # the block's comment: -> 1000 1000 0
    assert os.path.isdir(home / ".local" / "state" / "spark_recoverable_sink" / "quickstart")  # the default WAL

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


def _landing(tmp_path: Any, rows: int) -> None:
    """What the spark-submit screen reads from the repository's root: templates/, conf/ and landing/ of ``rows`` orders."""
    for d in ("templates", "conf"):
        shutil.copytree(os.path.join(REPO, d), tmp_path / d)
    (tmp_path / "landing").mkdir()
    (tmp_path / "landing" / "orders-0.json").write_text("".join(
        json.dumps({"id": i, "name": f"order-{i}", "amount": i / 2, "ts": "2024-06-01T00:00:00Z"}) + "\n"
        for i in range(rows)))


def _upper(values: list[bytes | None]) -> bool:
    return all(v is not None and v.startswith(b"ORDER-") for v in values)


#: Each runnable screen of docs/entry-points.md (by its heading's anchor): the topic it writes, the isolation level
#: to read it with, and what its values must be.
SCREENS: dict[str, tuple[str, str, Callable[[list[bytes | None]], bool]]] = {
    "foreachbatch-at-least-once": ("orders-upper", "read_uncommitted", _upper),
    "foreachbatch-exactly-once": ("orders-once", "read_committed", _upper),
    "sinkwrite": ("orders-copy", "read_uncommitted", lambda vs: all(v and v.startswith(b"order-") for v in vs)),
    "the-data-source": ("orders-source", "read_uncommitted", _upper),
    "spark-connect": ("orders-remote", "read_uncommitted", _upper),
    "spark-submit-with-a-job-template": ("orders-files", "read_uncommitted",
                                         lambda vs: all(json.loads(v)["name"].startswith("order-") for v in vs)),
}
RUNNABLE = [b for b in code_blocks(ENTRY_POINTS) if b.marker in ("spark", "connect", "spark-submit")]


def test_every_runnable_screen_is_checked():
    assert sorted(section_of(b) for b in RUNNABLE) == sorted(SCREENS)


def _expected(block: Block, count: int) -> str:
    """What the block's last ``# -> ...`` comment says it prints (up to a colon, which starts a remark), the
    quickstart's count for its 1000."""
    said = re.findall(r"#\s*->\s*([^:\n]+)", block.source)
    assert said, f"{block.where}: a screen says what it prints (# -> ...)"
    return said[-1].strip().replace("1000", str(count))


@pytest.mark.parametrize("block", RUNNABLE, ids=[section_of(b) for b in RUNNABLE])
def test_an_entry_point_screen_runs_and_writes_every_record_once(broker, quickstart, tmp_path, block: Block):
    topic, isolation, values_ok = SCREENS[section_of(block)]
    count = len(read_topic(broker.bootstrap, TOPIC).records)  # the screens read it all
    _ensure_topic(broker.bootstrap, topic)
    before = {(r.partition, r.offset) for r in read_topic(broker.bootstrap, topic, isolation=isolation).records}
    extra: dict[str, str] = {}
    if block.marker in ("spark", "connect"):
        from devtools.jvm import spark_kafka_connector_jars

        extra["PYSPARK_SUBMIT_ARGS"] = f"--jars {','.join(spark_kafka_connector_jars())} pyspark-shell"
    if block.marker == "connect":
        extra["SPARK_REMOTE"] = "local[2]"
    if block.marker == "spark-submit":
        _landing(tmp_path, count)

    out = _run(block, tmp_path, broker.bootstrap, 420, **extra)

    lines = [ln for ln in out.splitlines() if ln.strip() and not ln.startswith("rks-doc-run=")]
    if block.marker == "spark-submit":  # the job's log (spark-submit copies the driver's) says its totals
        (stopped,) = [ln for ln in lines if "job=file_to_kafka status=stopped" in ln]
        totals = dict(re.findall(r"(\w+)=(\S+)", stopped))
        assert (int(totals["rows"]), int(totals["pending"])) == (count, 0), stopped
    else:
        assert lines and lines[-1] == _expected(block, count), f"{block.where} printed {lines[-1:]}"
    new = [r for r in read_topic(broker.bootstrap, topic, expected=len(before) + count, isolation=isolation).records
           if (r.partition, r.offset) not in before]
    assert len(new) == count and len({r.rid for r in new}) == count, f"{len(new)} records, {count} expected"
    assert values_ok([r.value for r in new])
