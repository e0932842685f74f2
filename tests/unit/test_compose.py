"""Tier 1 (pure): docker-compose.yml, the job confs and the jobs' settings agree.

No broker, no Spark: the compose file is parsed with PyYAML and the conf
files with the jobs' own loaders, so a setting added to a job but not to a
conf file (or a conf key the job does not read) fails here.
"""

from __future__ import annotations

import json
import os
import shlex
from typing import Any

import pytest
import yaml

from spark_recoverable_sink import jobs

from ..job_files import load_job

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
COMPOSE = os.path.join(ROOT, "docker-compose.yml")
JOB_SCRIPT = "templates/stream_to_kafka.py"


job = load_job("stream_to_kafka", "stream_to_kafka.py")  # the template: its Source and build_source
demo = load_job("rks_demo_job", "demo.py")


def _flat_keys(raw: dict[str, Any]) -> set[str]:
    return {f"{section}.{key}" for section, body in raw.items() if isinstance(body, dict) for key in body}


def _env(service: dict[str, Any]) -> dict[str, str]:
    env = service.get("environment") or {}
    if isinstance(env, list):
        env = dict(item.split("=", 1) if "=" in item else (item, "") for item in env)
    return {k: "" if v is None else str(v) for k, v in env.items()}


def _command_text(service: dict[str, Any]) -> str:
    cmd = service.get("command") or ""
    return "\n".join(cmd) if isinstance(cmd, list) else str(cmd)


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    with open(COMPOSE, encoding="utf-8") as fh:
        return yaml.safe_load(fh)


@pytest.fixture(scope="module")
def kafka_service(compose: dict[str, Any]) -> dict[str, Any]:
    found = [s for s in compose["services"].values() if str(s.get("image", "")).startswith("apache/kafka:")]
    assert len(found) == 1, "exactly one service must run the official apache/kafka image"
    return found[0]


@pytest.fixture(scope="module")
def kafka_name(compose: dict[str, Any], kafka_service: dict[str, Any]) -> str:
    return next(n for n, s in compose["services"].items() if s is kafka_service)


@pytest.fixture(scope="module")
def job_service(compose: dict[str, Any]) -> dict[str, Any]:
    found = [s for s in compose["services"].values() if JOB_SCRIPT in _command_text(s)]
    assert len(found) == 1, f"exactly one service must run {JOB_SCRIPT}"
    return found[0]


@pytest.fixture(scope="module")
def submit_argv(job_service: dict[str, Any]) -> list[str]:
    """The spark-submit command line of the job service, split like a shell would."""
    lines = [ln for ln in _command_text(job_service).splitlines() if "spark-submit" in ln]
    assert len(lines) == 1, "the job service must run spark-submit exactly once"
    argv = shlex.split(lines[0])
    return argv[argv.index("spark-submit"):]


def _host_path(service: dict[str, Any], container_path: str) -> str | None:
    """The repo file a container path comes from, through the service's bind mounts."""
    if not os.path.isabs(container_path):
        container_path = os.path.join(service.get("working_dir", "/"), container_path)
    best: tuple[int, str] | None = None
    for vol in service.get("volumes", []):
        src, dst = (vol["source"], vol["target"]) if isinstance(vol, dict) else vol.split(":")[:2]
        if not src.startswith((".", "/")):
            continue  # a named volume
        dst = dst.rstrip("/") or "/"
        if container_path == dst or container_path.startswith(dst + "/"):
            if best is None or len(dst) > best[0]:
                rel = os.path.relpath(container_path, dst)
                best = (len(dst), os.path.normpath(os.path.join(ROOT, src, rel)))
    return best[1] if best else None


def _named_volume_for(service: dict[str, Any], container_path: str) -> str | None:
    for vol in service.get("volumes", []):
        src, dst = (vol["source"], vol["target"]) if isinstance(vol, dict) else vol.split(":")[:2]
        if not src.startswith((".", "/")) and (container_path == dst or container_path.startswith(dst + "/")):
            return src
    return None


@pytest.fixture(scope="module")
def compose_conf_path(job_service: dict[str, Any], submit_argv: list[str]) -> str:
    script = next(i for i, a in enumerate(submit_argv) if a.endswith(JOB_SCRIPT))
    rest = submit_argv[script + 1:]
    assert "--conf" in rest, "the job must be given its settings file with --conf after the script"
    host = _host_path(job_service, rest[rest.index("--conf") + 1])
    assert host is not None, "the --conf file must come from the repo through a bind mount"
    return host


# -- Kafka ------------------------------------------------------------------------


def test_kafka_is_official_image_in_kraft_mode(kafka_service: dict[str, Any], kafka_name: str) -> None:
    env = _env(kafka_service)
    roles = {r.strip() for r in env.get("KAFKA_PROCESS_ROLES", "").split(",")}
    assert roles == {"broker", "controller"}, "a single KRaft node is broker and controller"
    assert "KAFKA_ZOOKEEPER_CONNECT" not in env
    node = env["KAFKA_NODE_ID"]
    voters = env["KAFKA_CONTROLLER_QUORUM_VOTERS"].split(",")
    assert any(v.startswith(f"{node}@") for v in voters), "the node must be a voter of its own quorum"
    ctl = env["KAFKA_CONTROLLER_LISTENER_NAMES"]
    listeners = {item.split("://")[0]: item.split("://")[1] for item in env["KAFKA_LISTENERS"].split(",")}
    assert ctl in listeners
    protocols = dict(item.split(":") for item in env["KAFKA_LISTENER_SECURITY_PROTOCOL_MAP"].split(","))
    assert set(listeners) <= set(protocols)
    voter_port = voters[0].rsplit(":", 1)[1]
    assert listeners[ctl].endswith(f":{voter_port}")
    assert "healthcheck" in kafka_service
    assert kafka_name


def test_kafka_image_is_the_release_the_tests_run(kafka_service: dict[str, Any]) -> None:
    from devtools.kafka_broker import kafka_version

    assert kafka_service["image"] == f"apache/kafka:{kafka_version()}", "devtools/kafka/pom.xml pins the release"


def test_job_reaches_kafka_through_an_advertised_listener(
    kafka_service: dict[str, Any], kafka_name: str, job_service: dict[str, Any], compose_conf_path: str,
) -> None:
    settings = jobs.load_settings(compose_conf_path, job.Source, environ=_env(job_service))
    advertised = {item.split("://")[1] for item in _env(kafka_service)["KAFKA_ADVERTISED_LISTENERS"].split(",")}
    for server in settings.kafka.bootstrap_servers.split(","):
        assert server in advertised
        host = server.rsplit(":", 1)[0]
        assert host in (kafka_name, kafka_service.get("hostname")), "other containers reach Kafka by its name"
    dep = job_service.get("depends_on")
    assert dep is not None and kafka_name in dep
    if isinstance(dep, dict):
        assert dep[kafka_name].get("condition") == "service_healthy"


# -- the job service --------------------------------------------------------------


def test_job_service_runs_the_job_with_spark_submit(
    job_service: dict[str, Any], submit_argv: list[str],
) -> None:
    assert submit_argv[0] == "spark-submit"
    scripts = [a for a in submit_argv if a.endswith(".py")]
    assert len(scripts) == 1 and scripts[0].endswith(JOB_SCRIPT)
    host = _host_path(job_service, scripts[0])
    assert host == os.path.join(ROOT, JOB_SCRIPT), "the script must be the repo's job, mounted in"
    assert "--master" in submit_argv


def test_compose_conf_exists_and_sets_every_key_the_job_reads(compose_conf_path: str) -> None:
    assert os.path.isfile(compose_conf_path), compose_conf_path
    with open(compose_conf_path, encoding="utf-8") as fh:
        raw = json.load(fh)
    missing = sorted(set(jobs.setting_keys(job.Source)) - _flat_keys(raw))
    assert not missing, f"{os.path.relpath(compose_conf_path, ROOT)} lacks {missing}"
    jobs.load_settings(compose_conf_path, job.Source, environ={})  # and nothing it does not read (strict loader)


def test_wal_and_checkpoint_live_on_named_volumes(
    compose: dict[str, Any], job_service: dict[str, Any], compose_conf_path: str,
) -> None:
    """A restarted container must find the WAL (unacked records) and the checkpoint again."""
    settings = jobs.load_settings(compose_conf_path, job.Source, environ={})
    declared = set((compose.get("volumes") or {}).keys())
    for path in (settings.sink.wal_dir, settings.query.checkpoint_location):
        vol = _named_volume_for(job_service, path)
        assert vol is not None, f"{path} is not on a named volume"
        assert vol in declared


# -- the conf files and the loaders -------------------------------------------------


@pytest.mark.parametrize("conf", ["conf/stream_to_kafka.json", "conf/stream_to_kafka.compose.json"])
def test_stream_confs_load_and_set_every_key(conf: str) -> None:
    path = os.path.join(ROOT, conf)
    with open(path, encoding="utf-8") as fh:
        raw = json.load(fh)
    assert sorted(set(jobs.setting_keys(job.Source)) - _flat_keys(raw)) == []
    settings = jobs.load_settings(path, job.Source, environ={})
    assert settings.kafka.topic and settings.sink.name and settings.sink.wal_dir
    assert settings.query.run_seconds == 0, "the shipped job runs until stopped"


def test_demo_conf_loads_and_sets_every_key() -> None:
    path = os.path.join(ROOT, "conf/demo.json")
    with open(path, encoding="utf-8") as fh:
        raw = json.load(fh)
    assert sorted(set(demo.setting_keys()) - _flat_keys(raw)) == []
    s = demo.load_settings(path)
    assert s.spark.master and s.spark.master.startswith("local")
    assert s.kafka.partitions == 3
    assert s.run.work_dir == ".demo", "the demo writes under .demo/ (gitignored)"
    assert 100_000 <= s.source.rows_per_batch * s.source.batches <= 1_000_000
    with open(os.path.join(ROOT, ".gitignore"), encoding="utf-8") as fh:
        assert "/.demo/" in fh.read().split()


def test_jobs_exit_2_on_a_bad_conf(tmp_path: Any) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"sink": {"nme": "x"}}))
    assert jobs.run_template(job.Source, job.build_source, ["--conf", str(bad)]) == 2  # the template
    assert demo.main(["--conf", str(bad)]) == 2
    assert jobs.run_template(job.Source, job.build_source, ["--conf", str(tmp_path / "absent.json")]) == 2
