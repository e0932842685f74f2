"""Tier 1: when a batch is coalesced to the cluster's cores, for both guarantees' passes (driver/coalesce.py)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from spark_recoverable_sink.driver.coalesce import coalesce_width
from spark_recoverable_sink.driver.resplit import _at_most_one_task_per_core


class FakeFrame:
    """Just what coalesce_width reads of a DataFrame: the core count, one setting, and the plan's handle."""

    def __init__(self, cores: int | None, dynamic: bool = False, partitions: int | None = None) -> None:
        context = SimpleNamespace(defaultParallelism=cores) if cores is not None else None
        conf = {"spark.dynamicAllocation.enabled": "true" if dynamic else "false"}
        self.sparkSession = SimpleNamespace(conf=SimpleNamespace(get=lambda k, d=None: conf.get(k, d)))
        if context is not None:
            self.sparkSession.sparkContext = context
        self.partitions = partitions
        self.coalesced_to: int | None = None

    @property
    def _jdf(self) -> Any:
        raise AttributeError("no JVM here: partitions not known")  # what partitions_of reads on Spark Connect

    def coalesce(self, n: int) -> "FakeFrame":
        self.coalesced_to = n
        return self


def test_a_batch_is_coalesced_to_the_cores_only_where_they_are_known_and_fixed() -> None:
    assert coalesce_width(FakeFrame(cores=4)) == 4  # partitions not known: coalesce (a no-op if fewer)
    assert coalesce_width(FakeFrame(cores=None)) is None  # Spark Connect: no core count
    assert coalesce_width(FakeFrame(cores=4, dynamic=True)) is None


@pytest.mark.parametrize("dynamic", [False, True])
def test_the_exactly_once_lane_pass_follows_the_same_rule_as_at_least_once(dynamic: bool) -> None:
    frame = FakeFrame(cores=2, dynamic=dynamic)
    assert _at_most_one_task_per_core(frame) is frame
    # under dynamic allocation a stage of the registered cores would never ask for more executors
    assert frame.coalesced_to == (None if dynamic else 2)
