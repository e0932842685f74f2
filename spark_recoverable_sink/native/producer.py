"""The native producer: a librdkafka producer driven from C, one chunk per call (see :mod:`.library`).

Thread-safety: a :class:`Producer` must be called from one thread at a time
(the caller holds a lock). A concurrent call, or a call from inside one of its
own callbacks, raises ``RuntimeError`` rather than racing. Callback
exceptions (error_cb, stats_cb, log_cb) are reported through
``sys.unraisablehook`` and never interrupt a produce or poll; an exception in
oauth_cb becomes a token refresh failure carrying the exception's text.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

from ..arrays import values
from .library import column, headers_column, kafka_exception, load, module

__all__ = ["Producer"]


def _conf_str(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


class Producer:
    """A librdkafka producer driven from C; see the module notes on threading and callbacks.

    Raises (from the constructor):
        ImportError: no extension or librdkafka.
        ValueError: librdkafka refused the configuration (its message).
    """

    def __init__(self, conf: dict[str, Any], error_cb: Callable | None = None,
                 stats_cb: Callable | None = None, log_cb: Callable | None = None,
                 oauth_cb: Callable | None = None) -> None:
        load()
        native = module()
        conf = dict(conf)
        cbs = {"error_cb": error_cb, "stats_cb": stats_cb, "log_cb": log_cb, "oauth_cb": oauth_cb}
        for name in cbs:  # confluent-kafka style: callables inside the configuration
            if name in conf and callable(conf[name]):
                cbs[name] = cbs[name] or conf.pop(name)
        self._p = native.Producer({str(k): _conf_str(v) for k, v in conf.items()}, **cbs)
        if cbs["oauth_cb"] is not None:
            self._p.poll(0)  # serve the first token refresh early

    def produce_chunk(self, round_id: int, topic: str | None, values: Any, keys: Any = None,
                      topics: Any = None, partitions: Any = None, timestamps: Any = None,
                      headers: Any = None, ids: Any = None, id_header: bytes | str = b"rks-id",
                      indices: Sequence[int] | np.ndarray | None = None,
                      block_s: float = 5.0, *, id_prefix: bytes | None = None,
                      id_cols: Sequence[tuple[Any, int]] = (), id_seq0: int | None = None,
                      ) -> tuple[int, list[tuple[int, int, str]]]:
        """Produce the rows (all, or ``indices``) of a chunk; ``(produced, [(row, code, text)])``.

        The id header of row ``i`` is ``ids[i]``, or, with ``ids=None``, it is
        made in C (:mod:`...ids`, format 1): ``id_prefix`` (at most 64 bytes),
        then each ``(array, width)`` of ``id_cols`` (uint32 or uint64 per row,
        ``width`` 4 or 8; numpy or Arrow; at most 3) as ``width`` big-endian
        bytes, then ``id_seq0 + i`` as 8 big-endian bytes when ``id_seq0`` is
        given.

        Synchronous failures are listed; delivery reports come later through
        :meth:`take_results` under ``round_id``.
        """
        if values is None:
            raise ValueError("values are required")
        generated = id_prefix is not None
        if generated and ids is not None:
            raise ValueError("give ids, or id_prefix with id_cols / id_seq0, not both")
        if not generated and ids is None:
            raise ValueError("ids (or id_prefix with id_cols / id_seq0) are required")
        if not generated and (id_cols or id_seq0 is not None):
            raise ValueError("id_cols and id_seq0 go with id_prefix")
        if isinstance(id_header, str):
            id_header = id_header.encode()
        idx = None if indices is None else np.ascontiguousarray(indices, dtype=np.int64)
        extra: tuple[Any, ...] = ()
        if generated:
            cols = tuple((_uints(a, np.uint64 if w == 8 else np.uint32), int(w)) for a, w in id_cols)
            extra = (bytes(id_prefix or b""), cols or None, -1 if id_seq0 is None else int(id_seq0))
        return self._p.produce_chunk(
            int(round_id), topic, column(values), column(keys), column(topics),
            column(partitions, "int32"), column(timestamps, "int64"), headers_column(headers),
            column(ids), bytes(id_header), idx, float(block_s), *extra)

    def poll(self, timeout_s: float = 0.0) -> int:
        return self._p.poll(timeout_s)

    def take_results(self) -> list[tuple[int, int, int, list[tuple[int, int, str]]]]:
        return self._p.take_results()

    def forget_round(self, round_id: int) -> None:
        self._p.forget_round(round_id)

    def flush(self, timeout_s: float = -1) -> int:
        return self._p.flush(timeout_s)

    def purge(self, in_queue: bool = True, in_flight: bool = True) -> None:
        self._p.purge(in_queue, in_flight)

    def close(self) -> None:
        self._p.close()

    def native_stats(self) -> dict[str, int]:
        return self._p.native_stats()

    def __len__(self) -> int:
        return len(self._p)

    def _txn(self, r: tuple | None) -> None:
        if r is not None:
            raise kafka_exception(r)

    def init_transactions(self, timeout_s: float = -1) -> None:
        self._txn(self._p.init_transactions(timeout_s))

    def begin_transaction(self) -> None:
        self._txn(self._p.begin_transaction())

    def commit_transaction(self, timeout_s: float = -1) -> None:
        self._txn(self._p.commit_transaction(timeout_s))

    def abort_transaction(self, timeout_s: float = -1) -> None:
        self._txn(self._p.abort_transaction(timeout_s))

    def send_offsets_to_transaction(self, group_id: str, offsets: Sequence[Any],
                                    timeout_s: float = -1) -> None:
        """Commit ``offsets`` for consumer group ``group_id`` with the open transaction.

        ``offsets``: ``(topic, partition, offset[, metadata])`` tuples, or objects with
        ``topic``/``partition``/``offset``/``metadata`` attributes (``confluent_kafka.TopicPartition``).
        The offset is the next one to consume; negative (logical) offsets are ignored.
        """
        tps = [tuple(o) if isinstance(o, (tuple, list)) else (o.topic, o.partition, o.offset,
                                                               getattr(o, "metadata", None))
               for o in offsets]
        self._txn(self._p.send_offsets_to_transaction(str(group_id), tps, float(timeout_s)))


def _uints(a: Any, dtype: Any) -> np.ndarray:
    """A contiguous numpy array of ``dtype`` from numpy, Arrow or a sequence (no copy when it already is one)."""
    if hasattr(a, "to_numpy") and not isinstance(a, np.ndarray):  # pyarrow Array / ChunkedArray (to_numpy: pandas)
        a = values(a)
    return np.ascontiguousarray(a, dtype=dtype)
