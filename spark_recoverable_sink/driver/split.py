"""How a batch becomes tasks: the driver's one decision per batch, :func:`split_batch`, and the plan it gives.

A batch's plan (:class:`BatchPlan`) says three things: the tasks (the
DataFrame the sink runs, one task per Spark partition of it), how each task
names its records (:class:`IdPlan`, the id scope), and, under exactly-once,
the units (the run's lanes, each one transaction per batch, and the marker
topic their markers go to). :func:`split_batch` makes it in these steps:

1. **The lane tag** (exactly-once with ``exactly_once_lanes`` not 0): each
   record's lane hash in :data:`LANE_COLUMN`, taken of the batch *before* its
   Schema Registry encoding (:meth:`.encode.Encoded.of` encodes the tagged
   batch as the sink's encoding step did), so that a change of schema id
   between two runs of a batch moves no record to another lane. A record's
   lane is Spark's own hash (Murmur3, seed 42, the function bucketed tables
   rely on: the same in every Spark version, taken in the JVM with no Python
   pass) of its ``(topic, partition)`` when its ``partition`` column is set
   (the records a batch places on a partition go through one lane, in
   order), else of its ``key`` (a key's records from one input partition
   reach Kafka in their input order; records of *different* keys may land on
   one Kafka partition from different lanes, their relative order there not
   kept), else of its ``value`` (equal keyless records share a lane, their
   ids numbered there). It depends on nothing else: not on the topic's
   partition count, the partitioner, nor the Spark split; only the lane count,
   which a run keeps.
2. **The units** (exactly-once): the marker topic checked and the run's lane
   count pinned (:func:`.settle.check_marker_topic`). ``"auto"`` is asked at
   a run's first batch, of the batch's DataFrame: 0 (a lane per Spark
   partition, named by its input) when each partition reads one named input
   (or, in a run never run again, one input read in a fixed order) and there
   are at most :data:`INPUT_LANES_PER_CORE` per core, else the cores
   (:mod:`.cores`; not told under dynamic allocation, where a run's lanes
   would be pinned to the cores registered at its first batch). A run that
   pinned 0 drops the tag.
3. **The columns**: the ones the sink takes (:class:`..schema.Columns`), and
   the lane tag while a re-split needs it.
4. **The id scope**. A record's id must be the same in every run of its
   batch, whatever split and order the run has, and never another record's
   (:mod:`..ids`). Spark's Kafka source re-runs a batch from its offset log
   with the same offset ranges at other partition indexes; a shuffle brings a
   partition's rows in another order; a task's retry reads its partition
   again. The lineage (:mod:`.lineage`, read without running anything) tells
   how the batch's partitions get their rows; in this order:

   * exactly-once: with lanes pinned to a count, CONTENT ids in each lane's
     scope. With ``0``, each Spark partition is a lane, named by its input's
     rank among the batch's inputs (the same set in every run of the batch:
     a re-run's range lands at another index, never in another lane):
     POSITION ids, no shuffle; a partition whose input has no name is its
     lane by index (sources that keep their split), with POSITION ids in a
     run never run again whose inputs are read in a fixed order (``write()``
     without ``run_id``: only a task's retry reads the partition again, in
     the same order), CONTENT ids otherwise;
   * ``record_ids="columns"``: KEY ids of the user's ``id_columns``;
   * ``record_ids="partition"``: CONTENT ids in each Spark partition's scope;
   * ``record_ids="content"`` (the default): POSITION ids where each
     partition reads one scan input that has a name for good (a Kafka offset
     range: topic, partition, first offset; a file split: its files' paths,
     starts and lengths) through narrow steps, the scope the name's 64-bit
     hash (a re-run reads every range in the same order whatever index it
     lands at; nothing is hashed or counted per record); POSITION ids in the
     scope of the Spark partition in a run never run again that reads inputs
     in a fixed order (Kafka ranges, files, local rows, ``spark.range``)
     through narrow steps (a task's retry reads its partition in the same
     order); CONTENT ids in the scope of the partition where each partition
     reads one output partition of a hash or single exchange (a user's
     ``groupBy``, ``repartition(n, col)``: the index names the same rows in
     every run, in some order), and for anything else in a run never run
     again; for anything else (a round-robin or range exchange, adaptive
     execution's reads, a join, an input without a name, Spark Connect,
     where no lineage can be read): CONTENT ids named by each record's
     *place*, at the cost of a shuffle (step 5). Said once per sink, at INFO.

5. **The tasks**:

   * exactly-once with lanes pinned to a count: the batch re-split into that
     many lanes by the tag (Spark's ``repartition(L, tag)`` puts lane
     ``pmod(hash, L)`` in the Spark partition of that index), the tag then
     dropped; else the batch as Spark split it, each partition a lane;
   * at-least-once by place: the batch re-split (a shuffle in the JVM, no
     Python pass) by each record's place, the lane rule's hash of the encoded
     columns, into one partition per core. Every copy of a record lands in the
     same task, so a task numbers the copies of a record (its occurrences)
     over the whole batch; the place goes to the task (a column,
     :data:`..ids.PLACE_INPUT_COLUMN`) and into the id:
     ``sink:run:batch:<place><fingerprint>-<occurrence>``. A re-run with
     another split, order or core count gives every record the same id.
     Order: all records of a destination partition given by a partition
     column, and all records of a key, are written by one task, in the order
     each input partition gave them (Spark's shuffle keeps a map task's order
     within a reduce partition); records of *different* keys from one input
     partition may interleave differently than Spark's sink writes them.
     Where the cores cannot be read (Spark Connect) or under dynamic
     allocation, the shuffle has ``spark.sql.shuffle.partitions``
     partitions, which adaptive execution coalesces;
   * otherwise, a batch of more Spark partitions than the cluster has cores
     is coalesced to one task per core (``coalesce_tasks``). Spark starts a
     Python worker round trip for every task of a ``mapInArrow`` (tens of ms
     on a small machine, docs/PERFORMANCE.md: at 200 partitions on 2 cores
     that alone took 5.6 s per micro-batch); a coalesce (no shuffle) gives
     the same parallelism for one round trip per core. Ids must not change
     with it (a record's id names its Spark partition), so each row carries
     its own partition's index, ``spark_partition_id()`` taken before the
     coalesce (:data:`..task.coalesced.SOURCE_PARTITION`): a coalesced task
     writes each partition's rows as that partition's own WAL attempt and id
     prefix, however Spark groups the partitions. KEY ids need no tag.
     Exactly-once's lane pass (the stage before its shuffle) is coalesced by
     the same rule, untagged. A batch whose partition count is known to be no
     more than the cores is left as it is: the tag costs a JVM projection and
     an Arrow column per batch (20 % of the sink's throughput at 2
     partitions on 2 cores, measured at the time, in the git history:
     ``bench/results/20261126T193755-commits.json``, commit ea79c3d)
     for nothing. The count is read without running anything for a
     foreachBatch micro-batch (Spark hands it over as an RDD), a DataFrame of
     an RDD or of local rows and ``spark.range``, cached or not, with no
     shuffle; anything else is coalesced (and tagged). What it costs: the
     coalesce narrows the whole last stage (the reading and transforming
     before the sink run in those tasks too); it groups partitions by count,
     not size (a skewed batch has stragglers); a failed task re-sends a
     core's share of the batch. Where the cores are not known (:mod:`.cores`)
     or under dynamic allocation (a stage of the registered cores would never
     ask for more executors), the batch is left as Spark split it.

Where it runs: the driver, once per batch; it builds the plan and runs no job
(the lane plan is read and pinned on the broker). :class:`IdPlan` pickles into
the tasks.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..config import COLUMN_IDS, EXACTLY_ONCE, PARTITION_IDS, SinkConfig
from ..ids import CONTENT, KEY, PLACE_INPUT_COLUMN, POSITION, IdScheme, scheme_for, scope_of
from ..task.coalesced import SOURCE_PARTITION
from .cores import dynamic_allocation, session_cores
from .encode import Encoded
from .lineage import NARROW, SHUFFLE, Lineage, describe
from .settle import check_marker_topic

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import DataFrame

__all__ = ["BatchPlan", "IdPlan", "split_batch", "LANE_COLUMN", "INPUT_LANES_PER_CORE", "BY_POSITION",
           "BY_CONTENT", "BY_PLACE", "BY_KEY"]

log = logging.getLogger("spark_recoverable_sink.sink")

#: How a task names its records: by position, by content in its partition's scope, by content and place, by key.
BY_POSITION, BY_CONTENT, BY_PLACE, BY_KEY = "position", "content", "place", "key"
_SAID: set[tuple[str, str]] = set()
#: Exactly-once "auto": a batch of named inputs gets a lane per input when it has at most this many per core (a
#: lane is a task and a transactional producer per worker that runs it; more would only add waves and producers).
INPUT_LANES_PER_CORE = 4
_UNKNOWN_CORES_LANES = 8
#: The column carrying a record's lane hash from before the encoding to the re-split (dropped there).
LANE_COLUMN = "__rks_lane"
#: Leaves of an analyzed plan whose partitions are known without listing, fetching or running anything:
#: a foreachBatch micro-batch (Spark hands it over as a LogicalRDD), a DataFrame of an RDD or of local
#: rows, ``spark.range``.
_CHEAP_LEAVES = frozenset({"LogicalRDD", "Range", "LocalRelation"})


@dataclass(frozen=True)
class BatchPlan:
    """One batch's plan (the module's docstring): ``tasks``, the DataFrame to run (one task per Spark partition);
    ``ids``, how each task names its records; ``lanes``, exactly-once's pinned lane count the batch was re-split
    into (0: each Spark partition of ``tasks`` is a lane, :meth:`IdPlan.lane`; at-least-once: 0);
    ``marker_topic``, exactly-once: the marker topic's id for the tasks and drain jobs (``""``: the broker gives
    none; ``None``: not checked, or at-least-once)."""

    tasks: "DataFrame"
    ids: "IdPlan"
    lanes: int = 0
    marker_topic: str | None = None


def split_batch(batch: "DataFrame", kafka: Encoded, config: SinkConfig, run: str, batch_id: int,
                fresh: bool) -> BatchPlan:
    """The plan of one batch: its tasks, its id scope and its units, in the steps of the module's docstring.

    ``batch`` is the batch as the sink was given it; ``kafka``, the same in
    Kafka's columns (:func:`.encode.encode_batch`); ``run``, ``batch_id``:
    the ids' run and batch; ``fresh``: the run is never run again
    (``write()`` without ``run_id``).

    Raises:
        ConfigError: exactly-once, the marker topic is not compacted, or
            ``exactly_once_lanes`` differs from the lane count of a batch a
            lane already committed (nothing of the batch runs).
        MarkerError: the marker topic was deleted or replaced since this driver checked it.
        confluent_kafka.KafkaException: the lane plan not read within ``settle_timeout_s`` (nothing ran).
    """
    from pyspark.sql import functions as F

    eo = config.guarantee == EXACTLY_ONCE
    tagged = eo and config.exactly_once_lanes != 0  # Step 1: units independent of the split, before encoding
    df = kafka.of(_with_lane(batch, config)) if tagged else kafka.frame
    marker_topic, pinned = check_marker_topic(config, run, batch_id,
                                              lambda: _auto_lanes(df, _lane_cores(df), fresh)) if eo else \
        (None, None)  # Step 2 ("auto" is asked at once, of the batch's DataFrame)
    lanes = pinned.lanes if pinned is not None and tagged else 0  # "auto" adopts a run's 0: the tag is dropped
    df = df.select(*[F.col(f"`{c}`") for c in kafka.columns.select + ([LANE_COLUMN] if lanes else [])])  # Step 3
    if lanes:
        df = _by_lane(df, config, lanes)
    ids, partitions = _decide(df, config, fresh, lanes)  # Step 4
    key = (config.name, ids.how)
    if key not in _SAID:
        _SAID.add(key)
        log.info("sink=%s ids=%s why=%r%s", config.name, ids.how, ids.why,
                 " (a shuffle of every batch)" if ids.how == BY_PLACE else "")
    return BatchPlan(_tasks(df, config, ids, partitions), ids, lanes, marker_topic)  # Step 5


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


def _auto_lanes(df: "DataFrame", cores: int | None, fresh: bool) -> int | None:
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
    """How the tasks of ``df`` name their records (step 4 of the module's docstring), and ``df``'s partition count
    where the lineage tells it; ``fresh``: the run is never run again (``write()`` without ``run_id``); ``lanes``:
    exactly-once, the run's pinned lane count (0: Spark's split)."""
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


def _tasks(df: "DataFrame", config: SinkConfig, ids: IdPlan, partitions: int | None) -> "DataFrame":
    """Step 5 after the lanes: at-least-once's re-split by place, or the coalesce to the cores (exactly-once's
    batch comes back as it is: its re-split into lanes is done)."""
    if config.guarantee == EXACTLY_ONCE:
        return df
    if ids.how == BY_PLACE:
        return _by_place(df, config)
    if ids.how == BY_KEY:
        width = _coalesce_width(df, partitions) if config.coalesce_tasks else None
        return df if width is None else df.coalesce(width)
    return _one_task_per_core(df, config, partitions)


def _record_hash(df: "DataFrame", config: SinkConfig) -> Any:
    """Spark's hash of a record's (topic, partition) when its partition column is set, else of its key, else of its
    value: a JVM expression, the same for equal records, on every Spark version (Murmur3, seed 42). Columns are the
    user's, found as the sink finds them (exact names); a ``topic`` column counts only without a ``topic`` option."""
    from pyspark.sql import functions as F

    cols = df.columns
    value = F.hash(F.col("value")) if "value" in cols else F.lit(0)
    lane = F.when(F.col("key").isNotNull(), F.hash(F.col("key"))).otherwise(value) if "key" in cols else value
    if "partition" in cols:
        topic = F.col("topic") if config.topic is None and "topic" in cols else F.lit(config.topic or "")
        lane = F.when(F.col("partition").isNotNull(), F.hash(topic, F.col("partition"))).otherwise(lane)
    return lane


def _with_lane(df: "DataFrame", config: SinkConfig) -> "DataFrame":
    """Step 1: ``df`` with each record's lane hash in :data:`LANE_COLUMN` (before any encoding of key or value)."""
    return df.withColumn(LANE_COLUMN, _record_hash(df, config))


def _by_lane(df: "DataFrame", config: SinkConfig, lanes: int) -> "DataFrame":
    """``df`` (with :data:`LANE_COLUMN`) re-split into ``lanes`` partitions (the run's plan), one lane each, the
    tag dropped. The stage before the shuffle is coalesced to the cores where :func:`_coalesce_width` says so and
    ``coalesce_tasks`` is set (a narrower map stage; the lanes do not depend on it)."""
    width = _coalesce_width(df) if config.coalesce_tasks else None
    if width is not None:
        df = df.coalesce(width)
    return df.repartition(lanes, LANE_COLUMN).drop(LANE_COLUMN)


def _by_place(df: "DataFrame", config: SinkConfig) -> "DataFrame":
    """At-least-once, ``record_ids="content"`` where no split keeps ids: ``df`` re-split by each record's place
    into one partition per core (Spark's ``spark.sql.shuffle.partitions`` where the cores are not told)."""
    from pyspark.sql import functions as F

    df = df.withColumn(PLACE_INPUT_COLUMN, _record_hash(df, config))
    spark = df.sparkSession
    cores = None if dynamic_allocation(spark) else session_cores(spark)
    by = F.col(PLACE_INPUT_COLUMN)
    return df.repartition(cores, by) if cores else df.repartition(by)


def _lane_cores(df: "DataFrame") -> int | None:
    """The cores that size ``exactly_once_lanes="auto"``: the session's, ``None`` under dynamic allocation (a run's
    lanes are pinned at its first batch; the cores registered then are not the cluster's)."""
    spark = df.sparkSession
    return None if dynamic_allocation(spark) else session_cores(spark)


def _partitions_of(df: "DataFrame") -> int | None:
    """``df``'s Spark partitions where they are known without running a job or planning a scan, else ``None``.

    Known only when every leaf of the analyzed plan is in
    :data:`_CHEAP_LEAVES` and the physical plan has no exchange or subquery
    (adaptive execution sizes the last stage only once its shuffles ran;
    preparing a plan starts its broadcasts; a cached plan with a shuffle
    would be run to build the cache). ``None`` for anything else (a file,
    table or Kafka scan: planning it twice could list files or fetch
    offsets) and on Spark Connect (no JVM handle).
    """
    try:
        qe = df._jdf.queryExecution()
        leaves = qe.analyzed().collectLeaves()
        if any(leaves.apply(i).getClass().getSimpleName() not in _CHEAP_LEAVES for i in range(leaves.size())):
            return None
        plan = qe.executedPlan()
        if plan.getClass().getSimpleName() == "AdaptiveSparkPlanExec":
            return None
        tree = str(plan.treeString())
        if "Exchange" in tree or "Subquery" in tree:
            return None
        return int(plan.execute().getNumPartitions())
    except Exception:  # noqa: BLE001 - Spark Connect, or a plan that cannot be read: not known
        return None


def _coalesce_width(df: "DataFrame", partitions: int | None = None) -> int | None:
    """The task count to coalesce ``df`` to (the cluster's cores), or ``None`` to leave it as Spark split it.

    ``None`` where the cores cannot be told (:func:`.cores.session_cores`),
    under dynamic allocation (a stage of the registered cores would never ask
    for more executors), and when ``df`` is known to have no more partitions
    than cores (:func:`_partitions_of`). Used by both guarantees' passes.
    ``partitions``: ``df``'s, where the caller knows them (:mod:`.lineage`).
    """
    spark = df.sparkSession
    cores = session_cores(spark)
    if cores is None or dynamic_allocation(spark):
        return None
    known = partitions if partitions is not None and partitions >= 0 else _partitions_of(df)
    return None if known is not None and known <= cores else cores


def _one_task_per_core(df: "DataFrame", config: SinkConfig, partitions: int | None = None) -> "DataFrame":
    """``df`` coalesced to the cluster's cores, each row tagged with its own Spark partition (at-least-once).

    Left as it is with ``coalesce_tasks=False``, and wherever :func:`_coalesce_width` says so.
    """
    if not config.coalesce_tasks:
        return df
    width = _coalesce_width(df, partitions)
    if width is None:
        return df
    from pyspark.sql import functions as F

    return df.withColumn(SOURCE_PARTITION, F.spark_partition_id()).coalesce(width)
