"""How a batch becomes tasks, and how each task names its records: the driver's one decision per batch.

A record's id must be the same in every run of its batch, whatever split and
order the run has, and never another record's (:mod:`..ids`). Spark's Kafka
source re-runs a batch from its offset log with the same offset ranges at
other partition indexes; a shuffle brings a partition's rows in another
order; a task's retry reads its partition again. :func:`plan_batch` reads
how the batch's partitions get their rows (:mod:`.lineage`, without running
anything) and picks, in this order:

1. exactly-once: its lanes (:mod:`.resplit`), CONTENT ids in each lane's
   scope (unchanged by this module);
2. ``record_ids="columns"``: KEY ids of the user's ``id_columns``; the batch
   coalesced to the cores, untagged;
3. ``record_ids="partition"``: CONTENT ids in each Spark partition's scope;
4. ``record_ids="content"`` (the default):

   * each partition reads one scan input that has a name for good (a Kafka
     offset range: topic, partition, first offset; a file split: its files'
     paths, starts and lengths) through narrow steps: POSITION ids, the
     scope the name's 64-bit hash, the position the row's rank in its
     partition. A re-run reads every range in the same order whatever index
     it lands at; nothing is hashed or counted per record;
   * a run that is never run again (``write()`` without ``run_id``) and
     reads inputs in a fixed order (Kafka ranges, files, local rows,
     ``spark.range``) through narrow steps: POSITION ids in the scope of the
     Spark partition (a task's retry reads its partition in the same order);
   * each partition reads one output partition of a hash or single
     exchange (a user's ``groupBy``, ``repartition(n, col)``): the index
     names the same rows in every run, in some order: CONTENT ids in the
     scope of the partition; so too for anything else in a run never run
     again (a retry reads its partition's rows again);
   * anything else (a round-robin or range exchange, adaptive execution's
     reads, a join, an input without a name, Spark Connect, where no lineage
     can be read): the batch is re-split by each record's place
     (:mod:`.placement`): CONTENT ids named by the place, at the cost of a
     shuffle. Said once per sink, at INFO.

   A batch of more partitions than the cluster has cores is coalesced to one
   task per core, each row tagged with its own partition (:mod:`.coalesce`),
   so ids do not depend on the grouping.

Where it runs: the driver, once per batch; :class:`IdPlan` pickles into the tasks.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..config import COLUMN_IDS, EXACTLY_ONCE, PARTITION_IDS, SinkConfig
from ..ids import CONTENT, KEY, POSITION, IdScheme, scheme_for, scope_of
from .coalesce import coalesce_width, one_task_per_core
from .lineage import NARROW, SHUFFLE, Lineage, describe
from .placement import place_for_ids

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import DataFrame

__all__ = ["IdPlan", "plan_ids", "plan_batch"]

log = logging.getLogger("spark_recoverable_sink.sink")

#: How a task names its records: by position, by content in its partition's scope, by content and place, by key.
BY_POSITION, BY_CONTENT, BY_PLACE, BY_KEY = "position", "content", "place", "key"
_SAID: set[tuple[str, str]] = set()


@dataclass(frozen=True)
class IdPlan:
    """How the tasks of one batch name their records; picklable (a few bytes per Spark partition).

    ``scopes``: with :data:`BY_POSITION`, each Spark partition's scope by its
    index (empty: the index itself); ``why``: the reason, for the log.
    """

    how: str
    scopes: tuple[int, ...] = ()
    why: str = field(default="", compare=False)

    def scheme(self, sink: str, run: str, batch: int, partition: int) -> IdScheme:
        """The id scheme of the rows of Spark partition ``partition`` (:mod:`..ids`).

        Raises:
            ValueError: a partition the plan has no scope for (the batch was planned for fewer partitions).
        """
        if self.how == BY_KEY:
            return scheme_for(KEY, sink, run, batch)
        if self.how == BY_PLACE:
            return scheme_for(CONTENT, sink, run, batch)
        if self.how == BY_CONTENT:
            return scheme_for(CONTENT, sink, run, batch, partition)
        if self.scopes and not 0 <= partition < len(self.scopes):
            raise ValueError(f"Spark partition {partition} of a batch planned with {len(self.scopes)} partitions")
        return scheme_for(POSITION, sink, run, batch, self.scopes[partition] if self.scopes else partition)


def plan_ids(df: "DataFrame", config: SinkConfig, fresh: bool) -> IdPlan:
    """How the tasks of ``df`` name their records (steps 2 to 4 of the module's docstring); ``fresh``: the run is
    never run again (``write()`` without ``run_id``)."""
    return _decide(df, config, fresh)[0]


def _decide(df: "DataFrame", config: SinkConfig, fresh: bool) -> tuple[IdPlan, int | None]:
    """:func:`plan_ids`, and ``df``'s partition count where the lineage tells it."""
    if config.guarantee == EXACTLY_ONCE or config.record_ids == PARTITION_IDS:
        return IdPlan(BY_CONTENT, why="record_ids=partition" if config.guarantee != EXACTLY_ONCE else "lanes"), None
    if config.record_ids == COLUMN_IDS:
        return IdPlan(BY_KEY, why="record_ids=columns"), None
    lineage = describe(df)
    ids = _from_lineage(lineage, fresh)
    return ids, lineage.partitions if lineage is not None else None


def _from_lineage(lineage: Lineage | None, fresh: bool) -> IdPlan:
    if lineage is None:
        return IdPlan(BY_CONTENT, why="a run never run again") if fresh else \
            IdPlan(BY_PLACE, why="the batch's lineage cannot be read (Spark Connect)")
    if lineage.path == NARROW:
        if all(leaf.identity for leaf in lineage.leaves):
            return IdPlan(BY_POSITION, tuple(scope_of(leaf.identity or "") for leaf in lineage.leaves),
                          why="each partition reads one named input (Kafka ranges, file splits)")
        if fresh and all(leaf.ordered for leaf in lineage.leaves):
            return IdPlan(BY_POSITION, why="a run never run again, its inputs read in a fixed order")
    if lineage.path == SHUFFLE and lineage.exchange in ("hash", "single"):
        return IdPlan(BY_CONTENT, why=f"each partition is one of a {lineage.exchange} exchange's")
    if fresh:
        return IdPlan(BY_CONTENT, why="a run never run again")
    what = f"a {lineage.exchange} exchange" if lineage.path == SHUFFLE else \
        "inputs without a name" if lineage.path == NARROW else "several inputs per partition, or a join"
    return IdPlan(BY_PLACE, why=f"the batch's partitions read {what}")


def plan_batch(df: "DataFrame", config: SinkConfig, fresh: bool) -> tuple["DataFrame", IdPlan]:
    """``df`` split into the at-least-once batch's tasks (coalesced or re-split), and how they name their records.

    ``df`` holds the columns the sink selected (:class:`..schema.Columns`).
    Exactly-once batches come back as they are (their lanes are split by
    :mod:`.resplit`).
    """
    ids, partitions = _decide(df, config, fresh)
    key = (config.name, ids.how)
    if key not in _SAID:
        _SAID.add(key)
        log.info("sink=%s ids=%s why=%r%s", config.name, ids.how, ids.why,
                 " (a shuffle of every batch)" if ids.how == BY_PLACE else "")
    if config.guarantee == EXACTLY_ONCE:
        return df, ids
    if ids.how == BY_PLACE:
        return place_for_ids(df, config), ids
    if ids.how == BY_KEY:
        width = coalesce_width(df, partitions) if config.coalesce_tasks else None
        return (df if width is None else df.coalesce(width)), ids
    return one_task_per_core(df, config, partitions), ids
