"""Tier 1: when a batch is coalesced to the cluster's cores, for both guarantees' passes (driver/split.py)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from spark_recoverable_sink.config import SinkConfig
from spark_recoverable_sink.driver import split
from spark_recoverable_sink.driver.split import LANE_COLUMN
from spark_recoverable_sink.task.coalesced import SOURCE_PARTITION


class FakeFrame:
    """Just what the coalesce rule reads of a DataFrame: the core count and one setting; each step a new frame."""

    def __init__(self, cores: int | None, dynamic: bool = False, steps: tuple[str, ...] = ()) -> None:
        self.cores, self.dynamic, self.steps = cores, dynamic, steps
        conf = {"spark.dynamicAllocation.enabled": "true" if dynamic else "false"}
        self.sparkSession = SimpleNamespace(conf=SimpleNamespace(get=lambda k, d=None: conf.get(k, d)))
        if cores is not None:  # Spark Connect: no SparkContext
            self.sparkSession.sparkContext = SimpleNamespace(defaultParallelism=cores)

    def coalesce(self, n: int) -> "FakeFrame":
        return FakeFrame(self.cores, self.dynamic, self.steps + (f"coalesce({n})",))

    def withColumn(self, name: str, col: Any) -> "FakeFrame":  # noqa: N802 - DataFrame's name
        return FakeFrame(self.cores, self.dynamic, self.steps + (f"withColumn({name})",))

    def repartition(self, n: int, col: str) -> "FakeFrame":
        return FakeFrame(self.cores, self.dynamic, self.steps + (f"repartition({n}, {col})",))

    def drop(self, col: str) -> "FakeFrame":
        return FakeFrame(self.cores, self.dynamic, self.steps + (f"drop({col})",))


@pytest.fixture
def known(monkeypatch: pytest.MonkeyPatch) -> dict[str, int | None]:
    """The partition count _partitions_of reports (it reads the JVM's plan, absent here)."""
    box: dict[str, int | None] = {"n": None}
    monkeypatch.setattr(split, "_partitions_of", lambda df: box["n"])
    monkeypatch.setattr("pyspark.sql.functions.spark_partition_id", lambda: "spark_partition_id()")
    return box


def test_a_batch_is_coalesced_to_the_cores_only_where_they_are_known_fixed_and_fewer(known: dict) -> None:
    assert split._coalesce_width(FakeFrame(cores=4)) == 4  # partitions not known: coalesce (a no-op if fewer)
    known["n"] = 8
    assert split._coalesce_width(FakeFrame(cores=4)) == 4
    known["n"] = 4
    assert split._coalesce_width(FakeFrame(cores=4)) is None  # no more partitions than cores: left as Spark split it
    known["n"] = 8
    assert split._coalesce_width(FakeFrame(cores=None)) is None  # Spark Connect: no core count
    assert split._coalesce_width(FakeFrame(cores=4, dynamic=True)) is None


@pytest.mark.parametrize("dynamic,partitions", [(False, None), (False, 64), (False, 2), (True, 64)])
def test_both_guarantees_passes_follow_the_one_rule(known: dict, dynamic: bool, partitions: int | None) -> None:
    known["n"] = partitions
    coalesced = not dynamic and partitions != 2
    eo = SinkConfig.build("c", {"bootstrap.servers": "127.0.0.1:1"}, "/tmp/unused-coalesce", topic="t",
                          guarantee="exactly_once", exactly_once_lanes=4)
    lane_pass = split._by_lane(FakeFrame(cores=2, dynamic=dynamic), eo, 4)  # the stage before the lane shuffle
    assert lane_pass.steps == (("coalesce(2)",) if coalesced else ()) + (f"repartition(4, {LANE_COLUMN})",
                                                                         f"drop({LANE_COLUMN})")
    config = SinkConfig.build("c", {"bootstrap.servers": "127.0.0.1:1"}, "/tmp/unused-coalesce", topic="t")
    written = split._one_task_per_core(FakeFrame(cores=2, dynamic=dynamic), config)
    # at-least-once tags each row with its own partition before the coalesce (ids keep their partition)
    assert written.steps == ((f"withColumn({SOURCE_PARTITION})", "coalesce(2)") if coalesced else ())


def test_auto_lanes_are_the_cores_and_not_told_under_dynamic_allocation() -> None:
    assert split._lane_cores(FakeFrame(cores=6)) == 6
    assert split._lane_cores(FakeFrame(cores=6, dynamic=True)) is None  # registered cores, not the cluster's
    assert split._lane_cores(FakeFrame(cores=None)) is None  # Connect, master not told: AUTO_LANES
