"""The code samples of README.md and docs/*.md cannot rot: each ```python block compiles, imports only what the
package has, and names only options the sink has.

Options are checked where a sample names them: the keywords of a ``RecoverableKafkaSink(...)`` call (the sink's
keywords and :class:`SinkConfig`'s fields), the ``.option("...")`` names of a chain through
``format("recoverable-kafka")`` (the data source's, as :mod:`spark_recoverable_sink.driver.options` parses them) and
the first column of every Markdown table headed ``option``, ``keyword`` or ``setting``. Marked blocks
(``<!-- runnable: spark -->``, ...: tests/docs.py) are run by tests/spark/test_doc_quickstart.py.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib
import inspect
import re

import pytest

from spark_recoverable_sink.config import SinkConfig
from spark_recoverable_sink.driver import options as ds_options
from spark_recoverable_sink.driver.sink import RecoverableKafkaSink

from ..docs import MARKERS, REPO, Block, code_blocks, doc_paths, split_blocks, tables

PACKAGE = "spark_recoverable_sink"
DATA_SOURCE = "recoverable-kafka"
#: SinkConfig's fields under the names users give them.
FIELDS = {"kafka_conf" if f.name == "kafka_conf_items" else f.name for f in dataclasses.fields(SinkConfig)}
#: Keywords a RecoverableKafkaSink(...) call may name.
SINK_KEYWORDS = FIELDS | {n for n, p in inspect.signature(RecoverableKafkaSink.__init__).parameters.items()
                          if n != "self" and p.kind is not inspect.Parameter.VAR_KEYWORD}
#: Sink options a data-source option may name (kafka_conf comes as kafka.* options).
DATA_SOURCE_OPTIONS = (FIELDS - {"kafka_conf"}) | {"run_id"}
OPTION_TABLE_HEADS = {"option", "keyword", "setting"}


def python_blocks() -> list[Block]:
    return [b for path in doc_paths() for b in code_blocks(path) if b.lang in ("python", "py")]


def _ids(blocks: list[Block]) -> list[str]:
    return [b.where for b in blocks]


BLOCKS = python_blocks()


def data_source_option_ok(name: str) -> bool:
    """Whether the data source takes option ``name`` (:func:`..driver.options.parse_options`'s rules)."""
    key = name.lower()
    return key in ds_options.SPARK_OPTIONS or key.startswith(ds_options.KAFKA_PREFIX) or key in DATA_SOURCE_OPTIONS


def _chain_format(call: ast.Call) -> str | None:
    """The ``format("...")`` a method chain ending in ``call`` went through, if any."""
    node: ast.AST = call.func
    while True:
        if isinstance(node, ast.Call):
            f = node.func
            if isinstance(f, ast.Attribute) and f.attr == "format" and node.args \
                    and isinstance(node.args[0], ast.Constant):
                return node.args[0].value
            node = f
        elif isinstance(node, ast.Attribute):
            node = node.value
        else:
            return None


def option_problems(tree: ast.AST) -> list[str]:
    """Options a sample's code names that the sink or the data source does not have."""
    problems = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        f = node.func
        name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else None
        if name == "RecoverableKafkaSink":
            problems += [f"RecoverableKafkaSink({k.arg}=...)" for k in node.keywords
                         if k.arg is not None and k.arg not in SINK_KEYWORDS]
        elif name == "option" and node.args and isinstance(node.args[0], ast.Constant) \
                and _chain_format(node) == DATA_SOURCE and not data_source_option_ok(str(node.args[0].value)):
            problems.append(f'.option("{node.args[0].value}")')
    return problems


def import_problems(tree: ast.AST) -> list[str]:
    """Names a sample imports from the package that it does not have."""
    problems = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == PACKAGE:
            try:
                module = importlib.import_module(node.module)
            except ImportError as exc:
                problems.append(f"from {node.module}: {exc}")
                continue
            problems += [f"from {node.module} import {a.name}" for a in node.names
                         if a.name != "*" and not hasattr(module, a.name)]
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] == PACKAGE:
                    try:
                        importlib.import_module(a.name)
                    except ImportError as exc:
                        problems.append(f"import {a.name}: {exc}")
    return problems


def test_the_docs_have_python_samples():
    assert len(BLOCKS) >= 10
    assert any(b.marker == "spark" for b in BLOCKS)


@pytest.mark.parametrize("block", BLOCKS, ids=_ids(BLOCKS))
def test_a_sample_compiles_imports_what_exists_and_names_real_options(block: Block):
    tree = compile(block.source, block.where, "exec", ast.PyCF_ONLY_AST)
    compile(tree, block.where, "exec")
    assert import_problems(tree) == []
    assert option_problems(tree) == []


def _option_names(cell: str) -> list[str]:
    return [n for n in re.findall(r"`([^`]+)`", cell) if re.fullmatch(r"[a-z_][a-z0-9_]*", n)]


def test_every_option_a_table_names_exists():
    checked, problems = 0, []
    for path in doc_paths():
        for table in tables(path):
            if table[0][0].strip("` ").lower() not in OPTION_TABLE_HEADS:
                continue
            for row in table[1:]:
                for name in _option_names(row[0]):
                    checked += 1
                    if name not in SINK_KEYWORDS:
                        problems.append(f"{path[len(REPO) + 1:]}: {name}")
    assert checked >= 40, "no options table found"
    assert problems == []


def test_the_readme_quickstart_is_the_readme_s_one_spark_sample_and_reads_its_broker_from_the_environment():
    blocks, _prose = split_blocks(open(f"{REPO}/README.md", encoding="utf-8").read(), f"{REPO}/README.md")
    spark = [b for b in blocks if b.marker == "spark"]
    assert len(spark) == 1 and spark[0].lang == "python"
    assert 'os.environ.get("KAFKA_BOOTSTRAP"' in spark[0].source and "RecoverableKafkaSink(" in spark[0].source
    assert spark[0].line < 100, "the quickstart is in the README's first 100 lines"


def test_every_marker_is_known_and_every_entry_point_screen_is_run_or_compiled():
    marked = [b for path in doc_paths() for b in code_blocks(path) if b.marker is not None]
    assert {b.marker for b in marked} <= set(MARKERS), sorted({b.marker for b in marked} - set(MARKERS))
    screens = code_blocks(f"{REPO}/docs/entry-points.md")
    assert [b.where for b in screens if b.marker is None] == [], "every screen says how the tests run it"
    assert {b.marker for b in screens} == {"spark", "connect", "spark-submit", "databricks"}
    for b in screens:  # a script the tests run reads its broker as a user's would
        if b.marker in ("spark", "connect"):
            assert 'os.environ.get("KAFKA_BOOTSTRAP"' in b.source, b.where
    assert all(b.lang == "sh" for b in screens if b.marker == "spark-submit")


def test_the_checks_find_a_wrong_import_and_wrong_options():
    bad = ast.parse('from spark_recoverable_sink import RecoverableKafkaSink, NoSuchThing\n'
                    'import spark_recoverable_sink.no_such_module\n'
                    'RecoverableKafkaSink(name="n", kafka_conf={}, wal_sinc="commit", max_wal_bytes=1)\n'
                    'df.writeStream.format("recoverable-kafka").option("kafka.acks", "all").option("name", "n")'
                    '.option("checkpointLocation", "/c").option("ack_timout_s", "3").start()\n'
                    'df.writeStream.format("kafka").option("subscribe", "t").start()\n')
    assert import_problems(bad) == ["from spark_recoverable_sink import NoSuchThing",
                                    "import spark_recoverable_sink.no_such_module: No module named "
                                    "'spark_recoverable_sink.no_such_module'"]
    assert option_problems(bad) == ["RecoverableKafkaSink(wal_sinc=...)", '.option("ack_timout_s")']
