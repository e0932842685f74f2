"""The compatibility tier's building blocks, run inside a release's Python (a classic driver or a Connect client).

Imported by tests/programs/compat_app.py and compat_client.py, never by
the pytest process: only PySpark, the installed package and tests/hooks.py.

* :func:`source` -- the streaming input: Spark's Kafka source (``key``,
  ``value`` of the records the test produced) or parquet files
  (tests/faults/streams.py's rows), where the release has no Kafka connector;
* :func:`stream_twice` -- a ``foreachBatch`` query run until a batch is done,
  stopped, and restarted from its checkpoint with ``availableNow`` to the end;
* :class:`WorkerKill` -- a Python worker SIGKILLed while its task is parked
  mid-batch (Spark re-runs the task);
* :class:`ForcedDrain` -- an exactly-once unit left to the settle's drain job:
  its task parked before its commit until its ``ack_timeout_s`` has passed
  (it returns with the unit pending), its worker parked again at the commit's
  retry, and that worker SIGKILLed only once the driver's settle has found the
  lane uncommitted and is about to run its first drain job.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from typing import Any, Callable

from tests.hooks import Hooks

__all__ = ["source", "stream_twice", "WorkerKill", "ForcedDrain", "Faults"]

QUERY_BOUND_S = 300.0  # a query that has not reached its batch or ended by then fails the scenario


def source(spark: Any, spec: dict[str, Any]) -> Any:
    """The input stream of ``spec``: ``{"kind": "kafka", "bootstrap", "topic", "per_trigger"}`` or
    ``{"kind": "files", "dir", "per_trigger"}``; columns ``key`` (string) and ``value`` (binary)."""
    if spec["kind"] == "kafka":
        df = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", spec["bootstrap"])
              .option("subscribe", spec["topic"]).option("startingOffsets", "earliest")
              .option("maxOffsetsPerTrigger", spec["per_trigger"]).load())
        return df.selectExpr("cast(key as string) as key", "value")
    return (spark.readStream.schema("key string, value binary").option("maxFilesPerTrigger", spec["per_trigger"])
            .parquet(spec["dir"]))


def _until_batch(q: Any, batch: int, bound_s: float) -> None:
    end = time.monotonic() + bound_s
    while q.isActive and (q.lastProgress is None or q.lastProgress["batchId"] < batch):
        if time.monotonic() > end:
            raise AssertionError(f"the query did not finish batch {batch} within {bound_s:.0f} s")
        try:
            q.awaitTermination(0.2)
        except Exception:  # noqa: BLE001 - the query died: q.exception() says why
            return


#: Spark's answer when the Python process of a Spark Connect foreachBatch did not connect back to the JVM within
#: its fixed 10 s (the import of PySpark's Connect client can take longer on a loaded machine): nothing ran yet.
_NOT_STARTED = "to connect back"  # "Python worker failed to connect back", "Timed out while waiting ... to connect back"
_STARTS = 5
#: Spark 4.1's Kafka source can fail a query in its progress metrics, after a batch (SPARK-55271: a null
#: ``latestPartitionOffsets``), nothing to do with the sink; the query is restarted from its checkpoint then,
#: as an application would, at most this many times per run (each noted). Told by either text: the Java
#: exception's class and frame, or (PySpark 4.1 gives the NullPointerException's message alone) its message.
_KAFKA_METRICS_BUG = (("KafkaMicroBatchStream", "NullPointerException"),
                      ('"scala.collection.IterableOps.map(scala.Function1)"', '"scala.Option.get()" is null'))
_BUG_RESTARTS = 3


def _spark_kafka_metrics_bug(error: str) -> bool:
    return any(all(s in error for s in signature) for signature in _KAFKA_METRICS_BUG)


def _start(writer: Any, out: dict[str, Any]) -> Any:
    """``writer.start()``; retried (at most :data:`_STARTS` times, each noted in ``out``) only when Spark's
    foreachBatch runner never started (:data:`_NOT_STARTED`)."""
    for attempt in range(1, _STARTS + 1):
        try:
            return writer.start()
        except Exception as exc:  # noqa: BLE001 - told apart by Spark's message
            if _NOT_STARTED not in str(exc) or attempt == _STARTS:
                raise
            out.setdefault("start_retries", []).append(str(exc)[:300])
    raise AssertionError("unreachable")


def _run(spark: Any, spec: dict[str, Any], fn: Callable[..., Any], checkpoint: str, stop_after: int | None,
         out: dict[str, Any]) -> str | None:
    """One run from the checkpoint: until batch ``stop_after`` is done (a processing-time trigger), or with
    ``availableNow`` to the end of the input (``None``). Its error as text, or ``None``."""
    for _ in range(_BUG_RESTARTS + 1):
        w = source(spark, spec).writeStream.foreachBatch(fn).option("checkpointLocation", checkpoint)
        q = _start(w.trigger(processingTime="500 milliseconds") if stop_after is not None
                   else w.trigger(availableNow=True), out)
        late = None
        try:
            if stop_after is not None:
                _until_batch(q, stop_after, QUERY_BOUND_S)
            else:
                try:
                    if not q.awaitTermination(QUERY_BOUND_S):
                        late = f"the run did not end within {QUERY_BOUND_S:.0f} s"
                except Exception:  # noqa: BLE001 - the query died: q.exception() says why
                    pass
        finally:
            q.stop()
        error = str(q.exception())[:3000] if q.exception() else late
        if error is None or not _spark_kafka_metrics_bug(error):
            return error
        out.setdefault("spark_bug_restarts", []).append(error[:300])
    return error


def stream_twice(spark: Any, spec: dict[str, Any], fn: Callable[..., Any], checkpoint: str, stop_after: int,
                 faults: "Faults | None" = None) -> dict[str, Any]:
    """Run 1 until batch ``stop_after`` is done (``faults`` armed before it starts), stopped; run 2 from the
    checkpoint with ``availableNow`` to the end of the input. Returns what happened (errors as text)."""
    out: dict[str, Any] = {}
    try:
        out["run1_error"] = _run(spark, spec, fn, checkpoint, stop_after, out)
    finally:
        if faults is not None:
            out["faults"] = faults.done(60.0)
    out["run2_error"] = _run(spark, spec, fn, checkpoint, None, out)
    return out


def _kill9(pid: int) -> None:
    os.kill(pid, signal.SIGKILL)


class Faults:
    """Faults injected from a thread of this process while a query runs; :meth:`done` says what happened."""

    def __init__(self, *faults: Any) -> None:
        self.faults = faults
        self.errors: list[str] = []
        self.thread = threading.Thread(target=self._run, name="compat-faults", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        for f in self.faults:
            try:
                f.run()
            except BaseException as exc:  # reported by done(); the test fails on it
                self.errors.append(f"{type(f).__name__}: {type(exc).__name__}: {exc}")
                f.release()
                return

    def done(self, timeout_s: float) -> dict[str, Any]:
        self.thread.join(timeout_s)
        for f in self.faults:
            f.release()
        alive = self.thread.is_alive()
        return {"errors": self.errors + (["the fault thread did not finish"] if alive else []),
                "faults": [f.what for f in self.faults]}


class WorkerKill:
    """The Python worker whose task first reaches ``point`` (batch >= ``batch``) SIGKILLed there."""

    def __init__(self, hooks: Hooks, point: str = "task.mid_task", batch: int = 1) -> None:
        self.parked = hooks.park(point, batch__ge=batch)
        self.what: dict[str, Any] = {"kind": "worker_kill", "point": point}

    def run(self) -> None:
        at = self.parked.wait(QUERY_BOUND_S)
        _kill9(at["pid"])
        self.what.update(pid=at["pid"], coords=at["coords"])
        self.parked.release()

    def release(self) -> None:
        self.parked.release()


class ForcedDrain:
    """An exactly-once unit of batch ``batch`` that the settle's drain job is run for (module doc).

    Run with two lanes on two cores, so that the parked task is its worker's
    only task of the batch. Steps, each at a named point:

    1. the first task of the batch to commit its unit parks before the
       commit (``eo.committing``) until its ``ack_timeout_s`` has passed;
       released, it finds no time left and returns with the unit pending;
    2. its worker's background thread of this sink parks before retrying the
       unit (``eo.idle_retry`` of that pid and sink): the unit stays pending
       and, its owner alive, no other worker may adopt its slot;
    3. the driver's settle reads the lane's marker (uncommitted), logs that
       the batch waits and parks before its first drain job (``eo.settle_drain``);
    4. the worker is SIGKILLed, then both are released: the drain job, or a
       live worker's background adoption while it runs, commits the unit.

    The kill waits for step 3: killed earlier, another worker's adoption
    could commit the unit while the settle's first marker read waits, and the
    batch would settle without a drain job.
    """

    def __init__(self, hooks: Hooks, sink: str, batch: int, ack_timeout_s: float) -> None:
        self.hooks = hooks
        self.sink = sink  # a worker holds a runtime per sink: only this one's background retry is parked
        self.ack_timeout_s = ack_timeout_s
        self.parks = [hooks.park("eo.committing", batch=batch), hooks.park("eo.settle_drain", batch=batch, round=1)]
        self.what: dict[str, Any] = {"kind": "forced_drain", "batch": batch}

    def run(self) -> None:
        committing, settle = self.parks
        at = committing.wait(QUERY_BOUND_S)  # Step 1
        pid, coords = at["pid"], at["coords"]
        self.parks.append(self.hooks.park("eo.idle_retry", pid=pid, sink=self.sink))
        # the unit's commit deadline (ack_timeout_s, started just before this point) passes while it is parked
        time.sleep(self.ack_timeout_s + 1.0)  # the deadline's length, not a synchronisation
        committing.release()
        idle = self.parks[2].wait(QUERY_BOUND_S)  # Step 2
        driver = settle.wait(QUERY_BOUND_S)  # Step 3
        _kill9(pid)  # Step 4
        self.what.update(owner_pid=pid, lane=coords["lane"], rows=coords["rows"],
                         driver_pid=driver["pid"], killed_at=time.time(),
                         parked_at={"committing": at["time"], "idle_retry": idle["time"],
                                    "settle_drain": driver["time"]})
        self.release()

    def release(self) -> None:
        for p in self.parks:
            p.release()
