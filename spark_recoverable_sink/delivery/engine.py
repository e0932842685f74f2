"""The delivery engine: one narrow interface over the producer, native (C) or Python (confluent-kafka).

Every producer the sink uses (a publisher's, an exactly-once lane's) is an
:class:`Engine`. Both implementations open a librdkafka producer from the
sink's Kafka configuration and take whole chunks (a normalised Arrow batch,
its id prefix and first sequence):

* :class:`NativeEngine` (``delivery_engine="native"``): the loop over the
  Arrow buffers runs in C with the GIL released (``native/``), the id header
  is formatted in C from the chunk's fingerprints and occurrences, and
  delivery reports are counted per chunk in C: :meth:`Engine.poll` returns,
  per round, the acks and the exact (row index, error) of each failure; no
  Python object per record. Every chunk shape goes this way, the row's own
  ``headers`` column included;
* :class:`PythonEngine` (``"python"``): confluent-kafka's ``produce`` per
  record (positional arguments) with the round's callback (:mod:`.rows`);
  failures are matched to records by content when the round is accounted for.

``"auto"`` (the default) takes the native engine where the extension loads
(:func:`choose`) and says once, at INFO, which engine runs and why. Both run
the same callbacks: ``error_cb`` (broker contact, fatal errors),
``stats_cb`` (:mod:`.stats`), librdkafka's log lines through the
``spark_recoverable_sink.librdkafka`` logger (secrets scrubbed, native
engine), and the queue-full wait bounded by ``block_s``.
"""

from __future__ import annotations

import logging
import threading
from typing import Any, Callable, Sequence

import pyarrow as pa

from ..auth import check_files
from ..config import SinkConfig
from ..ids import has_scheme, id_fields, sequence_ids
from ..native import library
from ..schema import TOPIC_META
from .rows import produce_rows

__all__ = ["Engine", "PythonEngine", "NativeEngine", "choose", "open_engine", "bounded", "Results", "BOUND_GRACE_S",
           "SEND_OFFSETS_MAX_S", "WEDGED"]

log = logging.getLogger(__name__)
rdlog = logging.getLogger("spark_recoverable_sink.librdkafka")


#: How long past its own timeout a client call that may ignore it is waited for.
BOUND_GRACE_S = 2.0
#: The longest timeout one ``send_offsets_to_transaction`` call is given, whatever the unit's window: a healthy call
#: takes milliseconds, and one caught by librdkafka #5456/#5511 never returns on its own. With the whole window (30 s
#: by default) such a call cost the window and the unit went to a drain job; capped, the lane's next producer tries
#: again in it. A coordinator loading for longer fails each try (retried until it has loaded): time, not safety.
SEND_OFFSETS_MAX_S = 10.0
WEDGED = "did not return within its timeout"  # the text of bounded()'s error: its producer is wedged


def bounded(call: Callable[[], Any], timeout_s: float, what: str) -> None:
    """Run a blocking client call that takes a timeout but may not keep it; raise a fatal error if it does not.

    ``rd_kafka_send_offsets_to_transaction()`` can block past its timeout
    when the group coordinator went away (librdkafka #5456, #5511; seen here
    when the broker restarts): the call runs in a thread of its own and is
    waited for ``timeout_s + BOUND_GRACE_S``. If it has not returned then,
    the producer is wedged: a fatal ``_TIMED_OUT`` error says so, its lane is
    dropped, and the lane's next producer fences it (init_transactions)
    before the unit is tried again from the WAL. The sink never calls the
    wedged producer again, but it is not stopped: the thread holds the last
    reference to it, so its librdkafka threads (and its queued records) live
    on until the call returns, and whatever it still sends carries a fenced
    epoch. Each wedge costs that thread and that client until then.

    Raises:
        confluent_kafka.KafkaException: the fatal time-out, or what the call raised.
        Exception: any other error the call raised, as it is.
    """
    done = threading.Event()
    failed: list[BaseException] = []

    def run() -> None:
        try:
            call()
        except BaseException as exc:  # handed to the caller below
            failed.append(exc)
        finally:
            done.set()

    threading.Thread(target=run, name=f"rks-{what}", daemon=True).start()
    if not done.wait(max(0.0, timeout_s) + BOUND_GRACE_S):
        from confluent_kafka import KafkaError, KafkaException

        log.warning("%s did not return %.1f s after its timeout: the producer is replaced", what, BOUND_GRACE_S)
        raise KafkaException(KafkaError(KafkaError._TIMED_OUT, f"{what} {WEDGED} "
                                        f"({timeout_s:.1f} s) and {BOUND_GRACE_S:.0f} s more: the producer is "
                                        "replaced", fatal=True))
    if failed:
        raise failed[0]

#: What :meth:`Engine.poll` returns: per round id, (acked, reported, [(row index, KafkaError)]).
Results = list[tuple[int, int, int, list[tuple[int, Any]]]]

_SAID: set[str] = set()
_SAID_LOCK = threading.Lock()


def choose(config: SinkConfig) -> tuple[str, str]:
    """``(engine, why)`` for a configuration; says it once per sink and process at INFO.

    Raises:
        ImportError: ``delivery_engine="native"`` and the extension cannot load (the reason).
    """
    want = config.delivery_engine
    if want == "python":
        name, why = "python", "delivery_engine='python'"
    elif library.available():
        name, why = "native", f"the native extension loaded librdkafka {library.load()}"
    elif want == "native":
        raise ImportError(f"delivery_engine='native' but the native extension cannot load: "
                          f"{library.why_unavailable()}")
    else:
        name, why = "python", f"the native extension cannot load ({library.why_unavailable()})"
    with _SAID_LOCK:
        if config.name not in _SAID:
            _SAID.add(config.name)
            log.info("sink=%s delivery_engine=%s because %s", config.name, name, why)
    return name, why


def open_engine(config: SinkConfig, conf: dict[str, Any], error_cb: Callable[[Any], None] | None = None,
                stats_cb: Callable[[Any], None] | None = None) -> "Engine":
    """A producer of the chosen engine for ``conf`` (the sink's producer configuration, maybe transactional).

    Raises:
        ValueError / KafkaException: the configuration was refused (callers scrub the message).
        ImportError: ``delivery_engine="native"`` and the extension cannot load.
    """
    check_files(conf)  # a certificate file named but missing on this host: said so, with the host
    name, _why = choose(config)
    cls = NativeEngine if name == "native" else PythonEngine
    return cls(config, conf, error_cb, stats_cb)


class Engine:
    """What the delivery code asks of a producer (see the module docstring). One thread at a time."""

    name = ""

    def produce_chunk(self, rid: int, cb: Callable[[Any, Any], None], batch: pa.RecordBatch,
                      indices: Sequence[int] | None, topic: str | None, id_header: str, prefix: bytes,
                      first_seq: int, block_s: float) -> tuple[int, list[tuple[int, Any]]]:
        """Produce ``indices`` (or every row) of a chunk as round ``rid``; ``(produced, [(index, error)])``.

        Each record's id is the one its chunk's id scheme gives it (:func:`..ids.record_ids`, with ``first_seq``
        the chunk's first position), or, for a batch without one (a lane's marker and sweep records), ``prefix``
        and its position from ``first_seq`` (:func:`..ids.sequence_ids`). The Python
        engine reports each delivery to ``cb(err, msg)``; the native one keeps them for :meth:`poll` under ``rid``.
        """
        raise NotImplementedError

    def poll(self, timeout_s: float) -> Results:
        """Serve callbacks; the native engine's delivery reports since the last call, per round."""
        raise NotImplementedError

    def forget(self, rid: int) -> None:
        """Reports of round ``rid`` arriving later are dropped (the round was abandoned)."""

    def produce_one(self, topic: str, value: bytes | None, key: bytes | None, partition: int,
                    headers: list[tuple[str, bytes | None]] | None, on_delivery: Callable[[Any, Any], None]) -> None:
        """One record outside any chunk and transaction (dead letters): confluent-kafka's ``produce`` contract.

        ``partition`` -1: the partitioner's choice.
        """
        raise NotImplementedError

    def send_offsets(self, group_id: str, consumer: Any, offsets: list[tuple[Any, ...]], timeout_s: float) -> None:
        """``send_offsets_to_transaction`` for group ``group_id`` (``consumer`` is a member of it), bounded.

        ``offsets``: ``(topic, partition, offset[, metadata])``. The call is given ``min(timeout_s,
        SEND_OFFSETS_MAX_S)`` and waited for that plus :data:`BOUND_GRACE_S` (:func:`bounded`).

        Raises:
            confluent_kafka.KafkaException: what the call raised, or the fatal time-out of :func:`bounded`.
        """
        t = min(timeout_s, SEND_OFFSETS_MAX_S) if timeout_s >= 0 else SEND_OFFSETS_MAX_S
        bounded(lambda: self._send_offsets(group_id, consumer, offsets, t), t, "send_offsets_to_transaction")

    def _send_offsets(self, group_id: str, consumer: Any, offsets: list[tuple[Any, ...]],
                      timeout_s: float) -> None:
        """The client's own ``send_offsets_to_transaction`` (runs in :func:`bounded`'s thread)."""
        raise NotImplementedError


class PythonEngine(Engine):
    """confluent-kafka's producer: one ``produce`` call per record (:mod:`.rows`)."""

    name = "python"

    def __init__(self, config: SinkConfig, conf: dict[str, Any], error_cb: Callable[[Any], None] | None,
                 stats_cb: Callable[[Any], None] | None) -> None:
        from confluent_kafka import Producer

        conf = dict(conf)
        if error_cb is not None:
            conf["error_cb"] = error_cb
        if stats_cb is not None:
            conf["stats_cb"] = stats_cb
        self.producer: Any = Producer(conf)  # None once closed

    @classmethod
    def around(cls, producer: Any) -> "PythonEngine":
        """An engine over a confluent-kafka-like producer made elsewhere (test doubles)."""
        engine = cls.__new__(cls)
        engine.producer = producer
        return engine

    def produce_chunk(self, rid, cb, batch, indices, topic, id_header, prefix, first_seq, block_s):
        return produce_rows(self.producer, cb, batch.num_rows, batch, indices, topic, id_header, prefix, first_seq,
                            block_s)

    def poll(self, timeout_s: float) -> Results:
        self.producer.poll(timeout_s)
        return []

    def produce_one(self, topic, value, key, partition, headers, on_delivery):
        self.producer.produce(topic, value, key, partition, on_delivery, None, 0, headers)

    def _send_offsets(self, group_id, consumer, offsets, timeout_s):
        from confluent_kafka import TopicPartition

        tps = [TopicPartition(*o[:3], **({"metadata": o[3]} if o[3:4] not in ((), (None,)) else {})) for o in offsets]
        self.producer.send_offsets_to_transaction(tps, consumer.consumer_group_metadata(), timeout_s)

    def __getattr__(self, name: str) -> Any:  # flush, purge, __len__'s target, transactions, list_topics
        return getattr(self.producer, name)

    def __len__(self) -> int:
        return len(self.producer)

    def close(self) -> None:
        self.producer = None


class NativeEngine(Engine):
    """The native producer (:mod:`..native.producer`): chunks produced and their reports counted in C."""

    name = "native"

    def __init__(self, config: SinkConfig, conf: dict[str, Any], error_cb: Callable[[Any], None] | None,
                 stats_cb: Callable[[Any], None] | None) -> None:
        from ..native.producer import Producer

        self.config = config
        self._error_cb = error_cb
        oauth_cb = conf.get("oauth_cb")  # a token provider (auth.py), bridged into the C producer's refresh
        conf = {k: v for k, v in conf.items() if not callable(v)}
        self.producer = Producer(conf, error_cb=self._on_error if error_cb else None, stats_cb=stats_cb,
                                 log_cb=self._on_log, oauth_cb=oauth_cb)
        self._side: Any = None  # a confluent-kafka producer for single records (dead letters), created on need

    def _on_error(self, code: int, _name: str, text: str, fatal: bool) -> None:
        from confluent_kafka import KafkaError

        assert self._error_cb is not None
        self._error_cb(KafkaError(code, text, fatal=fatal))

    def _on_log(self, level: int, facility: str, text: str) -> None:
        lvl = logging.ERROR if level <= 3 else logging.WARNING if level == 4 else logging.INFO if level <= 6 \
            else logging.DEBUG
        rdlog.log(lvl, "sink=%s librdkafka facility=%s %s", self.config.name, facility, self.config.scrub(text))

    def produce_chunk(self, rid, cb, batch, indices, topic, id_header, prefix, first_seq, block_s):
        from confluent_kafka import KafkaError

        names = batch.schema.names

        def col(name: str) -> Any:
            return batch.column(name) if name in names else None

        meta = batch.schema.metadata or {}
        chunk_topic = meta.get(TOPIC_META, b"").decode() or topic
        idx = None if indices is None else list(indices)
        if has_scheme(batch):  # made in C: the chunk's prefix, then each row's fields (ids.py)
            id_prefix, id_cols, id_seq0 = id_fields(batch, first_seq)
            ids_kw: dict[str, Any] = {"id_prefix": id_prefix, "id_cols": id_cols, "id_seq0": id_seq0}
        else:  # a record the sink makes itself (a lane's marker or sweep records): ids by position
            ids_kw = {"ids": sequence_ids(prefix, first_seq, batch.num_rows)}
        produced, failed = self.producer.produce_chunk(
            rid, chunk_topic, col("value"), col("key"), col("topic"), col("partition"), col("timestamp"),
            col("headers"), id_header=id_header, indices=idx, block_s=block_s, **ids_kw)
        return produced, [(i, KafkaError(code, text)) for i, code, text in failed]

    def poll(self, timeout_s: float) -> Results:
        from confluent_kafka import KafkaError

        self.producer.poll(timeout_s)
        if self._side is not None:
            self._side.poll(0)
        return [(rid, acked, reported, [(i, KafkaError(code, text)) for i, code, text in failures])
                for rid, acked, reported, failures in self.producer.take_results()]

    def forget(self, rid: int) -> None:
        self.producer.forget_round(rid)

    def produce_one(self, topic, value, key, partition, headers, on_delivery):
        if self._side is None:
            from confluent_kafka import Producer

            self._side = Producer(self.config.producer_conf())
        self._side.produce(topic, value, key, partition, on_delivery, None, 0, headers)

    def list_topics(self, topic: str, timeout: float) -> Any:
        from .admin import shared_admin  # (the C producer has no metadata call of its own)

        return shared_admin(self.config).list_topics(topic, timeout=timeout)

    def flush(self, timeout_s: float = -1) -> int:
        left = self.producer.flush(timeout_s)
        return left + (self._side.flush(max(0.0, timeout_s)) if self._side is not None else 0)

    def purge(self) -> None:
        self.producer.purge()
        if self._side is not None:
            self._side.purge()

    def __len__(self) -> int:
        return len(self.producer) + (len(self._side) if self._side is not None else 0)

    def init_transactions(self, timeout_s: float) -> None:
        self.producer.init_transactions(timeout_s)

    def begin_transaction(self) -> None:
        self.producer.begin_transaction()

    def commit_transaction(self, timeout_s: float) -> None:
        self.producer.commit_transaction(timeout_s)

    def abort_transaction(self, timeout_s: float) -> None:
        self.producer.abort_transaction(timeout_s)

    def _send_offsets(self, group_id, consumer, offsets, timeout_s):
        self.producer.send_offsets_to_transaction(group_id, offsets, timeout_s)

    def close(self) -> None:
        self.producer.close()
