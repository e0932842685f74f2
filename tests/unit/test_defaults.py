"""Every default of a sink option is SinkConfig's: the job templates, the sink's signature and ``rks`` take theirs
from :func:`config.default_of`, so a default changed in SinkConfig changes everywhere (issue 62.5)."""

from __future__ import annotations

import dataclasses
import inspect

import pytest

from spark_recoverable_sink import config
from spark_recoverable_sink.config import SinkConfig, default_of
from spark_recoverable_sink.driver.sink import RecoverableKafkaSink
from spark_recoverable_sink.jobs.settings import SinkSettings
from spark_recoverable_sink.ops.cli import main


def _defaults(cls: type) -> dict:
    out = {}
    for f in dataclasses.fields(cls):
        if f.default is not dataclasses.MISSING:
            out[f.name] = f.default
        elif f.default_factory is not dataclasses.MISSING:
            out[f.name] = f.default_factory()
    return out


def test_the_job_settings_defaults_are_sink_configs():
    shared = [n for n in _defaults(SinkSettings) if n in {f.name for f in dataclasses.fields(SinkConfig)}]
    assert len(shared) >= 12, shared  # the settings a template passes on
    for name in shared:
        got = _defaults(SinkSettings)[name]
        assert (tuple(got) if isinstance(got, list) else got) == default_of(name), name


def test_the_sinks_signature_defaults_are_sink_configs():
    params = inspect.signature(RecoverableKafkaSink.__init__).parameters
    named = [n for n, p in params.items() if n in _defaults(SinkConfig) and p.default is not inspect.Parameter.empty]
    for name in named:  # topic=None (no topic): the only one it names; the rest reach SinkConfig as **options
        assert params[name].default == default_of(name), name


def test_the_commands_defaults_are_sink_configs():
    seen = 0
    for command in main.commands.values():
        for param in command.params:
            name = (param.name or "").replace("-", "_")
            if name in ("id_header", "marker_topic"):
                assert param.default == default_of(name), f"rks {command.name} --{name}"
                seen += 1
    assert seen >= 2, "no rks command has --id-header / --marker-topic"


CHANGED = """
import dataclasses, inspect, json
from spark_recoverable_sink.config import SinkConfig
f = {f.name: f for f in dataclasses.fields(SinkConfig)}
f["ack_timeout_s"].default, f["record_ids"].default, f["max_wal_bytes"].default = 12.5, "partition", 7
f["marker_topic"].default, f["id_header"].default = "other-markers", "other-id"
from spark_recoverable_sink.jobs.settings import SinkSettings
from spark_recoverable_sink.ops.cli import main
s = SinkSettings(name="n", wal_dir="w")
opts = {p.name: p.default for c in main.commands.values() for p in c.params if p.name in ("marker_topic", "id_header")}
print(json.dumps([s.ack_timeout_s, s.record_ids, s.max_wal_bytes, opts]))
"""


def test_a_default_changed_in_sink_config_changes_every_copy():
    """SinkConfig's defaults changed before the templates' settings and rks load: both follow (the sink's own
    options reach SinkConfig as keywords, with no default of their own)."""
    import json
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", CHANGED], capture_output=True, text=True, timeout=120, check=True)
    assert json.loads(out.stdout) == [12.5, "partition", 7,
                                      {"marker_topic": "other-markers", "id_header": "other-id"}]


def test_default_of_refuses_an_unknown_option():
    with pytest.raises(KeyError):
        default_of("no_such_option")
    assert "default_of" in config.__all__
