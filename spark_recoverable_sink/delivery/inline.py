"""A task's unit produced into its lane's transaction as its chunks reach the WAL.

Overlaps producing with writing the WAL (each chunk is committed to the WAL
before it is produced; the transaction is committed only after the attempt
is). A failure only marks it broken: the commit step then aborts it and
produces the unit again from the WAL.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .. import _points
from ..encoding import AttemptKey, record_id_prefix
from .rows import produce_rows

if TYPE_CHECKING:  # pragma: no cover
    from .transactions import Committer, _Lane

__all__ = ["InlineTransaction"]


class InlineTransaction:
    """A lane's open transaction being filled by the task, chunk after chunk, right after each WAL append."""

    def __init__(self, committer: "Committer", lid: str, lane: "_Lane", ident: tuple[str, AttemptKey],
                 run: str) -> None:
        self._committer = committer
        self._lid, self._lane, self._ident = lid, lane, ident
        self._key = key = ident[1]
        self._prefix = record_id_prefix(committer.config.name, key.batch, key.partition, run)
        self.broken = False
        self._failed: list[Any] = []

    def _on_delivery(self, err: Any, _msg: Any) -> None:
        if err is not None:
            self._failed.append(err)

    def produce(self, batch: Any, first_seq: int, block_s: float) -> None:
        """Produce one chunk (already committed to the WAL) into the transaction; failures break it."""
        from confluent_kafka import KafkaException

        if self.broken:
            return
        cfg = self._committer.config
        try:
            _n, sync_failed = produce_rows(self._lane.producer, self._on_delivery, batch.num_rows, batch, None,
                                           cfg.topic, cfg.id_header, self._prefix, first_seq, block_s)
        except KafkaException as exc:
            self._committer._failed(self._lid, exc.args[0])
            self.broken = True
            return
        if sync_failed or self._failed:
            self.broken = True  # aborted at the commit step, then produced again from the WAL
        _points.point("eo.produced_chunk", batch=self._key.batch, partition=self._key.partition,
                      rows=first_seq + batch.num_rows)

    def finish(self) -> None:
        """Every chunk is in: the commit step only sends the marker and commits (unless it broke)."""
        if not self.broken and self._lane.open == self._ident:
            self._lane.produced = True
