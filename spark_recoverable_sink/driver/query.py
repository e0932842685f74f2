"""Which streaming query a ``foreachBatch`` call belongs to (driver side).

Two things hang on it: the *run* component of record ids (the query's id,
which Spark keeps in the checkpoint), and the rule that one sink name is
written by one running query at a time.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

from ..errors import ConfigError
from ..ids import valid_run_id

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import DataFrame

__all__ = ["QUERY_ID_PROPERTY", "RUN_LEN", "query_run_id", "claim_sink_name", "streaming_query", "check_run_id"]

#: The SparkContext local property a streaming query's batch thread carries
#: (``StreamExecution.QUERY_ID_KEY``): the query's id, kept in its checkpoint.
QUERY_ID_PROPERTY = "sql.streaming.queryId"
RUN_LEN = 16  # hex digits of the query id (or of a fresh uuid) kept in record ids: 64 bits


def query_run_id(df: "DataFrame") -> str | None:
    """The run id of a ``foreachBatch`` call: the first 16 hex digits of the query's id.

    Spark keeps a query's id in its checkpoint: a restart from the checkpoint
    has the same id, a new checkpoint location a new one. ``None`` where the
    id cannot be read (Spark Connect: no SparkContext on the client).
    """
    try:
        qid = df.sparkSession.sparkContext.getLocalProperty(QUERY_ID_PROPERTY)
    except AttributeError:  # Spark Connect raises PySparkAttributeError for sparkContext
        return None
    return qid.replace("-", "")[:RUN_LEN] if qid else None


def check_run_id(option: str, run: str | None) -> str | None:
    """``run`` itself if it can be a record id's run component.

    Raises:
        ConfigError: naming ``option``.
    """
    if run is not None and not valid_run_id(run):
        raise ConfigError(option, f"must be 1-64 characters of letters, digits, '.', '_' or '-', got {run!r}")
    return run


# -- one sink name, one streaming query (a driver-wide registry) ------------------------

_NAME_OWNERS: dict[str, str] = {}  # sink name -> id of the streaming query writing with it
_NAME_OWNERS_LOCK = threading.Lock()


def claim_sink_name(name: str, query_id: str | None, active_query_ids: Any) -> None:
    """Record that ``query_id`` writes with sink ``name``; refuse a second query at once.

    Two queries sharing a sink name share its WAL directory and record ids.
    A query that stopped gives its name up (it is no longer among
    ``active_query_ids()``, which returns ``None`` when it cannot tell: then
    nothing is refused); a restarted query keeps its id and its name.

    Raises:
        ConfigError: another active query already writes with this name.
    """
    if not query_id:
        return
    with _NAME_OWNERS_LOCK:
        owner = _NAME_OWNERS.get(name)
        active = active_query_ids() if owner is not None and owner != query_id else None
        if active is not None and owner in set(active):
            raise ConfigError("name", f"sink name {name!r} is already used by streaming query {owner}; query "
                              f"{query_id} cannot use it at the same time: give each query its own sink name")
        _NAME_OWNERS[name] = query_id


def streaming_query(batch_df: Any) -> tuple[str | None, Any]:
    """The id of the streaming query running this ``foreachBatch`` call, and a getter of the active ids.

    A query runs its batches in a clone of the user's session, whose
    ``streams.active`` is empty: the active queries are read from the JVM's
    default and active sessions instead (``None`` when that is not possible,
    e.g. under Spark Connect: then nothing is checked).
    """
    try:
        spark = batch_df.sparkSession
        qid = spark.sparkContext.getLocalProperty(QUERY_ID_PROPERTY)
    except Exception:  # not a streaming batch, or not a classic DataFrame
        return None, lambda: None

    def active() -> list[str] | None:
        try:
            jsession = spark._jvm.org.apache.spark.sql.SparkSession
            ids: list[str] = []
            for opt in (jsession.getDefaultSession(), jsession.getActiveSession()):
                if opt.isDefined():
                    ids.extend(str(q.id().toString()) for q in opt.get().streams().active())
            return ids
        except Exception:
            return None

    return qid, active
