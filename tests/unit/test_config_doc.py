"""The generated reference tables (docs/configuration.md, docs/monitoring.md) are the code's: devtools/config_doc.py."""

from __future__ import annotations

from devtools import config_doc


def test_the_docs_hold_the_tables_the_code_renders():
    for path in config_doc.DOCS:
        with open(path, encoding="utf-8") as f:
            doc = f.read()
        assert config_doc.render(path, doc) == doc, f"{path}: run python -m devtools.config_doc"


def test_every_config_field_and_keyword_has_a_row():
    import dataclasses

    from spark_recoverable_sink.config import SinkConfig

    options = config_doc.options_table()
    for f in dataclasses.fields(SinkConfig):
        assert f"| `{'kafka_conf' if f.name == 'kafka_conf_items' else f.name}` |" in options
    assert "| `run_id` |" in config_doc.keywords_table()
    assert "| `rks_pending_records` | gauge |" in config_doc.metrics_table()


def _meanings(table: str) -> list[tuple[str, str]]:
    return [(row.split(" | ")[0].strip("| `"), row.rsplit(" | ", 1)[1].rstrip(" |"))
            for row in table.splitlines()[2:]]


def test_each_option_has_a_meaning_of_its_own():
    rows = _meanings(config_doc.options_table()) + _meanings(config_doc.keywords_table())
    by_meaning: dict[str, list[str]] = {}
    for name, meaning in rows:
        by_meaning.setdefault(meaning, []).append(name)
    assert [names for names in by_meaning.values() if len(names) > 1] == []
    # the source refuses an entry that gives one text to several names
    import pytest

    with pytest.raises(ValueError, match="retry_backoff_s / retry_backoff_max_s"):
        config_doc.docstring_entries("Doc.\n\nAttributes:\n    retry_backoff_s / retry_backoff_max_s: Backoff.\n",
                                     "Attributes")


def test_the_tables_name_no_internal_module_and_link_the_docs_they_name():
    import pytest

    tables = config_doc.options_table() + config_doc.keywords_table()
    assert ":mod:" not in tables and ":data:" not in tables
    for module in ("javaconf", "wal.slots", "driver.metrics", "driver.split", "delivery.engine", "AUTO_LANES",
                   "`ids`", "`formats`"):
        assert module not in tables, module
    assert "[guarantees](guarantees.md)" in tables  # docs/guarantees.md named in a docstring: a link here
    with pytest.raises(ValueError, match="names a module"):
        config_doc.docstring_entries("Doc.\n\nArgs:\n    a: See :mod:`.driver.metrics`.\n", "Args")


def _data_source_takes(option: str, value: str) -> bool:
    from spark_recoverable_sink.driver.options import parse_options
    from spark_recoverable_sink.errors import ConfigError

    try:
        parse_options({"name": "n", "kafka.bootstrap.servers": "b:9092", option: value})
    except ConfigError as e:
        if e.option == option:
            return False
        raise
    return True


def test_the_keywords_table_says_which_the_data_source_takes_as_it_does():
    values = {"history": "5", "drain_on_failure_s": "1", "run_id": "r1", "value_format": "x", "key_format": "x"}
    rows = {row.split(" | ")[0].strip("| `"): row for row in config_doc.keywords_table().splitlines()[2:]}
    assert set(rows) == set(values)
    head = config_doc.keywords_table().splitlines()[0]
    assert "data source" in head
    column = head.strip("| ").split(" | ").index("data source")
    for name, value in values.items():
        cell = rows[name].strip("| ").split(" | ")[column]
        assert cell.startswith("yes" if _data_source_takes(name, value) else "no"), (name, cell)
    assert rows["run_id"].strip("| ").split(" | ")[column].startswith("yes")


def test_the_methods_are_documented_with_their_signatures():
    import inspect

    from spark_recoverable_sink.driver.sink import RecoverableKafkaSink

    with open(config_doc.CONFIG_DOC, encoding="utf-8") as f:
        doc = f.read()
    for method in ("write", "drain"):
        params = list(inspect.signature(getattr(RecoverableKafkaSink, method)).parameters.values())[1:]
        shown = ", ".join(str(p.replace(annotation=inspect.Parameter.empty)) for p in params)
        assert f"`sink.{method}({shown})`" in doc, method
