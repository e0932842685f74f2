"""Tier 1 (pure): one word per idea, in file names, code, errors, logs and docs (issue 62; docs/DESIGN.md, "Words").

Fails when a word drifts back: two package modules of one file name, a module or folder of a retired name, an
option, attribute or log word that meant two things. What is scanned: the repository's own text (the package, the
tests, templates/, conf/, devtools/, docs/, README, Makefile, docker-compose.yml); not bench/ (its own tree), not
docs/CHANGELOG.md (it names the old words to say what changed), not this file.
"""

from __future__ import annotations

import collections
import dataclasses
import inspect
import os
import re

import spark_recoverable_sink
from spark_recoverable_sink import BatchReport, ExactlyOnceMismatchError, SinkConfig, TaskReport
from spark_recoverable_sink.delivery.chunks import State
from spark_recoverable_sink.delivery.exactly_once.lane import Unit
from spark_recoverable_sink.delivery.publisher import Publisher
from spark_recoverable_sink.delivery.rounds import Round
from spark_recoverable_sink.wal.format import AttemptKey, ChunkKey

PKG = os.path.dirname(spark_recoverable_sink.__file__)
REPO = os.path.dirname(PKG)
_SKIP_DIRS = {".git", ".venv", "bench", "__pycache__", "build", "dist", ".mypy_cache", ".ruff_cache",
              ".pytest_cache", "node_modules"}
_TEXT = (".py", ".md", ".json", ".toml", ".yml", ".yaml", ".c", ".h", ".ddl", ".cfg", ".txt", ".sh")
_SKIP_FILES = {os.path.join("docs", "CHANGELOG.md"), os.path.join("tests", "unit", "test_words.py")}

_TEMPLATES = r"(?:databricks_notebook|demo|demo_readback|demo_settings|file_to_kafka|kafka_to_kafka|stream_to_kafka)"

#: Retired words: pattern -> what says it now.
RETIRED = {
    r"checkpoint_interval": "prune_interval_s (pruning; 'checkpoint' is Spark's checkpointLocation)",
    r"poller\.checkpoint|checkpoint\.prune|publisher\.checkpoint\(": "poller.prune, prune.slot, Publisher.prune()",
    r"delivery[./]checkpoint\b": "delivery/prune.py",
    r"task[./]parts\b": "task/coalesced.py (exactly_once/parts.py is a unit's transactions)",
    r"delivery[./]producer\b": "delivery/client.py (native/producer.py is the producer)",
    r"ops[./]dead_letters\b(?!_)": "ops/dead_letters_cmd.py (delivery/dead_letters.py stores and forwards them)",
    rf"(?<![\w/.])jobs/{_TEMPLATES}\b|/opt/rks/jobs/": "templates/ (spark_recoverable_sink/jobs/ is the runner)",
    r"\b(?:unit|u|key|akey|ak|ck|dk|self\._key|t\.key)\.partition\b(?!\()": ".lane (a unit) or .origin (a WAL key)",
    r"\bsettle_open\b": "finalize_open",
    r"\bsettle_rounds\b|\b_settle_one\b|\bsettle_sync_failures\b|State\.SETTLED\b|poller\.settle\b":
        "account_rounds, State.REPORTED, poller.account ('settle' is the driver's wait for lanes)",
    r"\bsettle_space\b": "write_deferred",
    r"producer settles it": "a new producer finalizes it",
    r"\bPartitionReport\b|\bpartition_reports\b|\bfrom_partitions\b|\bpartition_rows\b":
        "TaskReport, task_reports, from_tasks, task_rows (a task's report; its origin is a Spark partition or a lane)",
}


def _repo_files() -> list[str]:
    out = []
    for dirpath, dirnames, filenames in os.walk(REPO):
        dirnames[:] = [d for d in dirnames if d not in _SKIP_DIRS and not d.endswith(".egg-info")]
        for f in filenames:
            rel = os.path.relpath(os.path.join(dirpath, f), REPO)
            if (f.endswith(_TEXT) or f in ("Makefile", "run")) and rel not in _SKIP_FILES:
                out.append(rel)
    return sorted(out)


def _package_modules() -> list[str]:
    """Every module of the package, relative to it (``delivery/steps.py``), ``__init__.py`` left out."""
    out = []
    for dirpath, dirnames, filenames in os.walk(PKG):
        dirnames[:] = [d for d in dirnames if d != "__pycache__"]
        out += [os.path.relpath(os.path.join(dirpath, f), PKG) for f in filenames
                if f.endswith(".py") and f != "__init__.py"]
    return sorted(out)


def test_no_two_package_modules_share_a_file_name():
    by_name = collections.defaultdict(list)
    for rel in _package_modules():
        by_name[os.path.basename(rel)].append(rel)
    shared = {name: paths for name, paths in by_name.items() if len(paths) > 1}
    assert not shared, f"one file name, two modules (name one of them after what it holds): {shared}"


def test_retired_module_and_folder_names_are_gone():
    modules = set(_package_modules())
    assert not modules & {os.path.join("delivery", "checkpoint.py"), os.path.join("task", "parts.py"),
                          os.path.join("delivery", "producer.py"), os.path.join("ops", "dead_letters.py")}
    assert not os.path.exists(os.path.join(REPO, "jobs")), "the spark-submit templates live in templates/"
    assert os.path.isdir(os.path.join(REPO, "templates"))


def test_no_file_uses_a_retired_word():
    patterns = {re.compile(p): now for p, now in RETIRED.items()}
    found = []
    for rel in _repo_files():
        with open(os.path.join(REPO, rel), encoding="utf-8", errors="replace") as fh:
            for n, line in enumerate(fh, 1):
                found += [f"{rel}:{n}: {m.group(0)!r} -> {now}" for p, now in patterns.items()
                          for m in p.finditer(line)]
    assert not found, "retired words (docs/DESIGN.md, 'Words'):\n" + "\n".join(found)


#: The exactly-once modules, whose numbered stream is a lane: their log lines and errors never say partition=.
_LANE_MODULES = [os.path.join("delivery", "exactly_once", f) for f in ("commit.py", "lane.py", "parts.py",
                                                                        "units.py")] + [
    os.path.join("task", "exactly_once.py")]
_PARTITION_WORD = re.compile(r"""["'][^"'\n]*\bpartition[=:]\s*(?:%d|%s|\{)""")


def test_lane_log_lines_say_lane():
    found = []
    for rel in _LANE_MODULES:
        with open(os.path.join(PKG, rel), encoding="utf-8") as fh:
            found += [f"{rel}:{n}: {line.strip()}" for n, line in enumerate(fh, 1) if _PARTITION_WORD.search(line)]
    assert not found, "a lane is printed as lane=, not partition=:\n" + "\n".join(found)


def test_names_of_the_code_say_one_thing():
    assert [f.name for f in dataclasses.fields(ChunkKey)] == ["batch", "origin", "first_seq", "gen"]
    assert [f.name for f in dataclasses.fields(AttemptKey)] == ["batch", "origin", "gen"]
    assert "lane" in inspect.signature(ExactlyOnceMismatchError).parameters
    assert not hasattr(ExactlyOnceMismatchError("m", 1, 2, 3, None), "partition")
    assert isinstance(inspect.getattr_static(Unit, "lane"), property) and not hasattr(Unit, "partition")
    assert "prune_interval_s" in {f.name for f in dataclasses.fields(SinkConfig)}
    assert not [f.name for f in dataclasses.fields(SinkConfig) if "checkpoint" in f.name]
    assert hasattr(Publisher, "prune") and not hasattr(Publisher, "checkpoint")
    assert State.REPORTED.value == "reported" and "SETTLED" not in State.__members__
    assert "reported" in Round.__slots__ and "settled" not in Round.__slots__
    assert [f.name for f in dataclasses.fields(TaskReport)][0] == "origin"
    assert {"task_reports", "tasks"} <= {f.name for f in dataclasses.fields(BatchReport)}
    assert not [f.name for f in dataclasses.fields(BatchReport) if "partition" in f.name]
