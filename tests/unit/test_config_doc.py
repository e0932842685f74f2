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
