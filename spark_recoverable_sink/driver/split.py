"""How a batch becomes tasks, and how each task names its records: the driver's one decision per batch.

A record's id must be the same in every run of its batch, whatever split and
order the run has, and never another record's (:mod:`..ids`). Spark's Kafka
source re-runs a batch from its offset log with the same offset ranges at
other partition indexes; a shuffle brings a partition's rows in another
order; a task's retry reads its partition again. :func:`plan_batch` reads
how the batch's partitions get their rows (:mod:`.lineage`, without running
anything) and picks, in this order:

1. exactly-once: its units are lanes, each one transaction per batch.
   With ``exactly_once_lanes`` a count, the batch is re-split into that many
   lanes by each record's key (:mod:`.resplit`, a shuffle): CONTENT ids in
   each lane's scope. With ``0`` (and with ``"auto"`` at a run's first batch
   when each partition reads one named input, at most
   :data:`INPUT_LANES_PER_CORE` per core, which it then pins), each Spark
   partition is a lane, named by its input's rank among the batch's inputs
   (the same set in every run of the batch: a re-run's range lands at another
   index, never in another lane): POSITION ids, no shuffle; a partition whose
   input has no name is its lane by index (sources that keep their split),
   with POSITION ids in a run never run again whose inputs are read in a
   fixed order (``write()`` without ``run_id``: only a task's retry reads the
   partition again, in the same order), CONTENT ids otherwise;
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

__all__ = ["IdPlan", "plan_ids", "plan_batch", "auto_lanes", "INPUT_LANES_PER_CORE"]

log = logging.getLogger("spark_recoverable_sink.sink")

#: How a task names its records: by position, by content in its partition's scope, by content and place, by key.
BY_POSITION, BY_CONTENT, BY_PLACE, BY_KEY = "position", "content", "place", "key"
_SAID: set[tuple[str, str]] = set()
#: Exactly-once "auto": a batch of named inputs gets a lane per input when it has at most this many per core (a
#: lane is a task and a transactional producer per worker that runs it; more would only add waves and producers).
INPUT_LANES_PER_CORE = 4
_UNKNOWN_CORES_LANES = 8


@dataclass(frozen=True)
class IdPlan:
    """How the tasks of one batch name their records; picklable (a few bytes per Spark partition).

    ``scopes``: with :data:`BY_POSITION`, each Spark partition's scope by its
    index (empty: the index itself); ``lanes``: exactly-once, each Spark
    partition's lane by its index (empty: the index itself); ``why``: the
    reason, for the log.
    """

    how: str
    scopes: tuple[int, ...] = ()
    why: str = field(default="", compare=False)
    lanes: tuple[int, ...] = ()

    def lane(self, partition: int) -> int:
        """Exactly-once: the lane of Spark partition ``partition`` (its unit, its transactional id)."""
        return self.lanes[partition] if self.lanes else partition

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


def plan_ids(df: "DataFrame", config: SinkConfig, fresh: bool, lanes: int = 0) -> IdPlan:
    """How the tasks of ``df`` name their records (the module's docstring); ``fresh``: the run is never run again
    (``write()`` without ``run_id``); ``lanes``: exactly-once, the run's pinned lane count (0: Spark's split)."""
    return _decide(df, config, fresh, lanes)[0]


def auto_lanes(df: "DataFrame", cores: int | None, fresh: bool) -> int | None:
    """Exactly-once ``"auto"``, at a run's first batch: 0 (a lane per Spark partition, named by its input) when each
    partition of ``df`` reads one named input (or, in a run never run again, one input read in a fixed order) and
    there are at most :data:`INPUT_LANES_PER_CORE` per core; else ``cores`` (``None``: not known)."""
    lineage = describe(df)
    if lineage is None or lineage.path != NARROW:
        return cores
    if not (all(leaf.identity for leaf in lineage.leaves) or fresh and all(leaf.ordered for leaf in lineage.leaves)):
        return cores
    return 0 if lineage.partitions <= INPUT_LANES_PER_CORE * (cores or _UNKNOWN_CORES_LANES // 2) else cores


def _exactly_once(df: "DataFrame", lanes: int, fresh: bool) -> IdPlan:
    """Exactly-once ids: CONTENT in each lane's scope after a re-split (``lanes`` > 0); with Spark's split, POSITION
    ids and lanes named by each input's rank among the batch's inputs; POSITION ids and lanes by index in a run
    never run again whose inputs are read in a fixed order (a task's retry reads its partition's rows in the same
    order, as at-least-once's ids there); else CONTENT and lanes by index."""
    if lanes:
        return IdPlan(BY_CONTENT, why=f"{lanes} lanes, re-split by key")
    lineage = describe(df)
    if lineage is not None and lineage.path == NARROW:
        leaves = lineage.leaves
        if all(leaf.identity for leaf in leaves):
            names = [leaf.identity or "" for leaf in leaves]
            rank = {name: i for i, name in enumerate(sorted(set(names)))}
            return IdPlan(BY_POSITION, tuple(scope_of(n) for n in names),
                          why="a lane per named input (Kafka ranges, files)", lanes=tuple(rank[n] for n in names))
        if fresh and all(leaf.ordered for leaf in leaves):
            return IdPlan(BY_POSITION, why="a lane per Spark partition, a run never run again, its inputs read in "
                                           "a fixed order")
    return IdPlan(BY_CONTENT, why="a lane per Spark partition, by index")


def _decide(df: "DataFrame", config: SinkConfig, fresh: bool, lanes: int = 0) -> tuple[IdPlan, int | None]:
    """:func:`plan_ids`, and ``df``'s partition count where the lineage tells it."""
    if config.guarantee == EXACTLY_ONCE:
        return _exactly_once(df, lanes, fresh), None
    if config.record_ids == PARTITION_IDS:
        return IdPlan(BY_CONTENT, why="record_ids=partition"), None
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


def plan_batch(df: "DataFrame", config: SinkConfig, fresh: bool, lanes: int = 0) -> tuple["DataFrame", IdPlan]:
    """``df`` split into the at-least-once batch's tasks (coalesced or re-split), and how they name their records.

    ``df`` holds the columns the sink selected (:class:`..schema.Columns`).
    Exactly-once batches come back as they are (a re-split into ``lanes``
    lanes was done by :mod:`.resplit`).
    """
    ids, partitions = _decide(df, config, fresh, lanes)
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
