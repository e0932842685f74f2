"""The demo's settings (``conf/demo.json``): one dataclass per section, read and checked by :func:`load_settings`.

Part of ``make demo`` (templates/demo.py, which imports it from this folder).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from spark_recoverable_sink import (
    jobs as job,  # the templates' settings and building blocks
)

__all__ = ["DemoSettings", "DEMO_SECTIONS", "setting_keys", "required_keys", "load_settings"]


@dataclass(frozen=True)
class DemoKafkaSettings:
    """``kafka``: ``topic`` is a prefix (the run id is appended); ``producer_conf`` as in the job templates."""

    topic: str = "rks-demo"
    partitions: int = 3
    producer_conf: dict = field(default_factory=dict, repr=False)


@dataclass(frozen=True)
class DemoSinkSettings:
    """``sink``: the sink's options; its WAL goes to ``<run.work_dir>/wal``."""

    name: str = "demo-to-kafka"
    ack_timeout_s: float = 30.0
    wal_sync: str = "commit"
    max_wal_bytes: int = 1024**3
    max_block_s: float = 60.0
    prune_interval_s: float = 1.0


@dataclass(frozen=True)
class DemoSourceSettings:
    """``source``: ``batches`` x ``rows_per_batch`` rows of ``rate-micro-batch``, in ``num_partitions`` tasks."""

    rows_per_batch: int = 60000
    batches: int = 5
    num_partitions: int = 2


@dataclass(frozen=True)
class RunSettings:
    """``run``: where files go and how long to wait.

    Attributes:
        work_dir: Directory for the WAL, checkpoint and logs (relative to the repo root).
        timeout_s: Longest time the streaming query may take.
        read_idle_s: The read-back ends once the topic was quiet this long.
        read_timeout_s: Longest time the read-back may take.
    """

    work_dir: str = ".demo"
    timeout_s: float = 240.0
    read_idle_s: float = 3.0
    read_timeout_s: float = 180.0


@dataclass(frozen=True)
class DemoSettings:
    """Everything the demo reads, one section per conf-file object."""

    spark: job.SparkSettings
    kafka: DemoKafkaSettings
    sink: DemoSinkSettings
    source: DemoSourceSettings
    run: RunSettings


DEMO_SECTIONS: dict[str, type] = {
    "spark": job.SparkSettings, "kafka": DemoKafkaSettings, "sink": DemoSinkSettings,
    "source": DemoSourceSettings, "run": RunSettings,
}


def setting_keys() -> list[str]:
    """Every dotted key the demo reads."""
    return job.section_keys(DEMO_SECTIONS)


def required_keys() -> list[str]:
    """The dotted keys without a default."""
    return job.section_keys(DEMO_SECTIONS, required_only=True)


def load_settings(path: str) -> DemoSettings:
    """Read and validate the demo's JSON conf.

    Raises:
        SettingsError: invalid JSON, an unknown/missing key or a bad value.
        OSError: the file cannot be read.
    """
    with open(path, encoding="utf-8") as fh:
        try:
            raw = json.load(fh)
        except json.JSONDecodeError as exc:
            raise job.SettingsError(f"{path}: not valid JSON: {exc}") from None
    s = DemoSettings(**job.parse_sections(raw, DEMO_SECTIONS))
    for key, v in (("kafka.partitions", s.kafka.partitions), ("source.rows_per_batch", s.source.rows_per_batch),
                   ("source.batches", s.source.batches), ("source.num_partitions", s.source.num_partitions),
                   ("run.timeout_s", s.run.timeout_s), ("run.read_idle_s", s.run.read_idle_s),
                   ("run.read_timeout_s", s.run.read_timeout_s)):
        if v <= 0:
            raise job.SettingsError(f"{key}: must be > 0, got {v}")
    return s
