"""Tier 1 (pure): spark_recoverable_sink.jobs.settings, the conf files and the templates' source sections.

No broker, no Spark session (pyspark is only imported, and its type
classes used for the JSON schema file).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any

import pytest

from spark_recoverable_sink import jobs

from ..job_files import load_job

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TEMPLATES = {"stream_to_kafka": "conf/stream_to_kafka.json", "file_to_kafka": "conf/file_to_kafka.json",
             "kafka_to_kafka": "conf/kafka_to_kafka.json"}


def _raw(conf: str) -> dict[str, Any]:
    with open(os.path.join(ROOT, conf), encoding="utf-8") as fh:
        return json.load(fh)


@dataclass(frozen=True)
class Src:
    path: str
    every: float = 1.0
    extra: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.every <= 0:
            raise jobs.SettingsError(f"source.every: must be > 0, got {self.every}")


def _minimal(**source: Any) -> dict[str, Any]:
    return {"kafka": {"bootstrap_servers": "b:9092", "topic": "t"}, "sink": {"name": "s", "wal_dir": "/w"},
            "source": {"path": "/in", **source}, "query": {"checkpoint_location": "/c"}}


def test_keys_come_from_the_common_sections_and_the_source() -> None:
    keys = jobs.setting_keys(Src)
    assert keys[:4] == ["spark.app_name", "spark.master", "spark.log_level", "spark.conf"]
    assert {"source.path", "source.every", "source.extra", "query.summary_path", "query.available_now"} <= set(keys)
    assert jobs.required_keys(Src) == ["kafka.bootstrap_servers", "kafka.topic", "sink.name", "sink.wal_dir",
                                       "source.path", "query.checkpoint_location"]


def test_minimal_conf_gets_defaults_and_ints_pass_as_floats() -> None:
    s = jobs.settings_from_dict(_minimal(every=2), Src, environ={})
    assert s.source == Src(path="/in", every=2.0)
    assert isinstance(s.source.every, float)
    assert s.spark.master is None and s.query.trigger_interval_s == 1.0 and s.query.summary_path is None
    assert s.sink.dead_letter_topic is None and s.kafka.create_topic_partitions == 0


@pytest.mark.parametrize("given, lanes", [("auto", None), ("AUTO", None), (None, None), (4, 4)])
def test_exactly_once_lanes_take_auto_null_or_a_count(given: Any, lanes: int | None) -> None:
    raw = _minimal()
    raw["sink"]["exactly_once_lanes"] = given
    assert jobs.settings_from_dict(raw, Src, environ={}).sink.exactly_once_lanes == lanes
    raw["sink"]["exactly_once_lanes"] = "some"
    with pytest.raises(jobs.SettingsError, match="exactly_once_lanes: must be int"):
        jobs.settings_from_dict(raw, Src, environ={})


@pytest.mark.parametrize("edit, message", [
    (lambda r: r["sink"].update(ack_timeout=5), "sink: unknown key"),
    (lambda r: r["kafka"].pop("topic"), "kafka.topic: required"),
    (lambda r: r["source"].pop("path"), "source.path: required"),
    (lambda r: r["source"].update(every="fast"), "source.every: must be float"),
    (lambda r: r["source"].update(every=True), "source.every: must be a number"),
    (lambda r: r["source"].update(every=0), "source.every: must be > 0"),
    (lambda r: r.update(sinks={}), "unknown section"),
    (lambda r: r.update(query=[]), "query: must be an object"),
    (lambda r: r["query"].update(run_seconds=-1), "query.run_seconds: must be >= 0"),
    (lambda r: r["query"].update(available_now="yes"), "query.available_now: must be bool"),
    (lambda r: r["kafka"].update(bootstrap_servers=""), "kafka.bootstrap_servers: must not be empty"),
    (lambda r: r["kafka"].update(producer_conf={"bootstrap.servers": "x"}), "set kafka.bootstrap_servers"),
    (lambda r: r["kafka"].update(producer_conf={"linger.ms": [1]}), r"producer_conf\['linger.ms'\]: must be"),
])
def test_loader_refuses_wrong_settings_naming_the_key(edit: Any, message: str) -> None:
    raw = _minimal()
    edit(raw)
    with pytest.raises(jobs.SettingsError, match=message):
        jobs.settings_from_dict(raw, Src, environ={})


def test_literal_secrets_are_refused_and_never_echoed() -> None:
    raw = _minimal()
    raw["kafka"]["producer_conf"] = {"sasl.password": "hunter2"}
    with pytest.raises(jobs.SettingsError, match="holds a secret") as info:
        jobs.settings_from_dict(raw, Src, environ={})
    assert "hunter2" not in str(info.value)
    with pytest.raises(jobs.SettingsError, match="holds a secret") as info:
        jobs.check_client_conf("source.consumer_conf", {"sasl.jaas.config": "org... password=\"hunter2\";"})
    assert "hunter2" not in str(info.value)


def test_env_overrides_bootstrap_and_secrets_are_never_printed() -> None:
    raw = _raw("conf/stream_to_kafka.json")
    raw["kafka"]["producer_conf"]["sasl.password"] = {"env": "RKS_TEST_SECRET"}
    env = {"KAFKA_BOOTSTRAP": "broker-1:9093", "RKS_TEST_SECRET": "s3cr3t-value"}
    settings = jobs.settings_from_dict(raw, load_job("stream_to_kafka").Source, environ=env)
    assert settings.kafka.bootstrap_servers == "broker-1:9093"
    assert "s3cr3t-value" not in repr(settings)
    conf = jobs.producer_conf(settings.kafka, env)
    assert conf["sasl.password"] == "s3cr3t-value" and conf["bootstrap.servers"] == "broker-1:9093"
    sink = jobs.build_sink(settings, env)
    assert "s3cr3t-value" not in repr(sink) and "broker-1:9093" in repr(sink)
    with pytest.raises(jobs.SettingsError, match="RKS_TEST_SECRET is not set") as info:
        jobs.producer_conf(settings.kafka, {})
    assert "s3cr3t" not in str(info.value)


@pytest.mark.parametrize("name", sorted(TEMPLATES))
def test_template_confs_load_and_set_every_key(name: str) -> None:
    mod = load_job(name)
    raw = _raw(TEMPLATES[name])
    flat = {f"{section}.{key}" for section, body in raw.items() for key in body}
    assert sorted(set(jobs.setting_keys(mod.Source)) - flat) == []
    settings = jobs.load_settings(os.path.join(ROOT, TEMPLATES[name]), mod.Source, environ={})
    assert settings.query.run_seconds == 0, "a shipped job runs until stopped"
    assert settings.query.summary_path is None
    assert isinstance(settings.source, mod.Source)


@pytest.mark.parametrize("name", sorted(TEMPLATES))
def test_template_confs_keep_the_wal_on_a_persistent_private_disk(name: str) -> None:
    wal_dir = _raw(TEMPLATES[name])["sink"]["wal_dir"]
    assert not wal_dir.startswith(("/tmp", "/var/tmp", "/dev/shm", "/run")), \
        f"{wal_dir}: often tmpfs or cleaned at boot: the WAL must outlive the worker and the machine's restart"


@pytest.mark.parametrize("name, edit, message", [
    ("stream_to_kafka", {"format": "csv"}, "source.format: must be one of"),
    ("stream_to_kafka", {"rows_per_second": 0}, "source.rows_per_second: must be > 0"),
    ("file_to_kafka", {"format": "csv"}, "source.format: must be one of"),
    ("file_to_kafka", {"max_files_per_trigger": 0}, "source.max_files_per_trigger: must be > 0"),
    ("kafka_to_kafka", {"consumer_conf": {"sasl.jaas.config": "x"}}, "holds a secret"),
    ("kafka_to_kafka", {"subscribe": 3}, "source.subscribe: must be str"),
])
def test_template_sources_check_their_values(name: str, edit: dict[str, Any], message: str) -> None:
    raw = _raw(TEMPLATES[name])
    raw["source"].update(edit)
    with pytest.raises(jobs.SettingsError, match=message):
        jobs.settings_from_dict(raw, load_job(name).Source, environ={})


def test_consumer_secrets_resolve_from_the_environment() -> None:
    conf = {"security.protocol": "SASL_SSL", "sasl.jaas.config": {"env": "RKS_JAAS"}}
    jobs.check_client_conf("source.consumer_conf", conf)
    assert jobs.resolve_client_conf("x", conf, {"RKS_JAAS": "j"}) == {"security.protocol": "SASL_SSL",
                                                                    "sasl.jaas.config": "j"}
    with pytest.raises(jobs.SettingsError, match=r"x\['sasl.jaas.config'\]: environment variable RKS_JAAS"):
        jobs.resolve_client_conf("x", conf, {})


def test_schema_file_is_ddl_or_structtype_json(tmp_path: Any) -> None:
    from pyspark.sql.types import LongType, StringType, StructField, StructType

    ddl = tmp_path / "s.ddl"
    ddl.write_text("id bigint, name string\n")
    assert jobs.load_schema(str(ddl)) == "id bigint, name string"
    st = StructType([StructField("id", LongType()), StructField("name", StringType())])
    js = tmp_path / "s.json"
    js.write_text(st.json())
    assert jobs.load_schema(str(js)) == st
    (tmp_path / "bad.json").write_text('{"type": "struct"}')
    with pytest.raises(jobs.SettingsError, match="not a Spark StructType"):
        jobs.load_schema(str(tmp_path / "bad.json"))
    (tmp_path / "empty.ddl").write_text("  \n")
    with pytest.raises(jobs.SettingsError, match="empty"):
        jobs.load_schema(str(tmp_path / "empty.ddl"))
    assert os.path.isfile(os.path.join(ROOT, "conf/file_to_kafka.schema.ddl"))


@pytest.mark.parametrize("name", sorted(TEMPLATES))
def test_templates_exit_2_on_a_bad_conf(name: str, tmp_path: Any, caplog: pytest.LogCaptureFixture) -> None:
    mod = load_job(name)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"sink": {"nme": "x"}}))
    assert jobs.run_template(mod.Source, mod.build_source, ["--conf", str(bad)], job=name) == 2
    assert jobs.run_template(mod.Source, mod.build_source, ["--conf", str(tmp_path / "absent.json")]) == 2
    assert any(f"job={name} conf=" in r.getMessage() and "error=kafka.bootstrap_servers: required" in r.getMessage()
               for r in caplog.records)


def test_templates_stay_short() -> None:
    """A template is copied by users: its source and transform only, the rest is in the package."""
    for name in TEMPLATES:
        with open(os.path.join(ROOT, "templates", f"{name}.py"), encoding="utf-8") as fh:
            assert len(fh.read().splitlines()) <= 80, name
