"""The Kafka client of a publisher (an :class:`.engine.Engine`): created lazily, replaced after fatal errors, old
ones purged.

With ``statistics.interval.ms`` in the user's configuration, every producer
gets a ``stats_cb`` that keeps the latest summary for the task reports
(:mod:`.stats`).

A replaced producer (a *zombie*) is never polled for the chunks it held (they
were re-sent on the new one); it is purged (``purge()`` and a bounded
``flush``) and dropped, so it neither keeps sending nor holds memory.
"""

from __future__ import annotations

import logging
from typing import Any, Callable

from ..auth import provider_failure
from ..config import SinkConfig
from ..errors import ProducerError
from .engine import Engine, PythonEngine, open_engine
from .stats import stats_callback

__all__ = ["ProducerSlot", "message_timeout_s"]

log = logging.getLogger(__name__)

_ZOMBIE_FLUSH_S = 1.0  # bounded flush of a purged producer before it is dropped


def message_timeout_s(conf: dict[str, Any]) -> float:
    """librdkafka's delivery timeout for a record (``message.timeout.ms``, alias ``delivery.timeout.ms``)."""
    v = conf.get("message.timeout.ms", conf.get("delivery.timeout.ms", 300_000))
    return int(v) / 1000.0


class ProducerSlot:
    """Holds the current producer and its epoch (bumped at each replacement).

    Raises (from :meth:`get`):
        ProducerError: the Kafka configuration was refused (secrets scrubbed).
    """

    def __init__(self, config: SinkConfig, on_error: Callable[[Any], None],
                 factory: Callable[[dict[str, Any]], Any] | None = None) -> None:
        self.config = config
        self._on_error = on_error
        self._factory = factory
        self._producer: Any = None
        self.epoch = 0
        #: Why the producer must be replaced before the next poll (a fatal error, fenced, stuck rounds).
        self.replace_reason: str | None = None

    def request_replace(self, reason: str) -> None:
        """Ask for a new producer at the next pass (the first reason given is kept)."""
        if self.replace_reason is None:
            self.replace_reason = reason

    @property
    def current(self) -> Any:
        return self._producer

    def get(self) -> Any:
        if self._producer is None:
            self._producer = self._new()
        return self._producer

    def _new(self) -> Engine:
        from confluent_kafka import KafkaException

        conf: dict[str, Any] = dict(self.config.producer_conf())
        stats_cb = stats_callback(conf, self.config.name)
        try:
            if self._factory is not None:  # tests: a confluent-kafka-like client on the Python engine
                conf["error_cb"] = self._on_error
                if stats_cb is not None:
                    conf["stats_cb"] = stats_cb
                return PythonEngine.around(self._factory(conf))
            return open_engine(self.config, conf, error_cb=self._on_error, stats_cb=stats_cb)
        except (KafkaException, ValueError, TypeError, ImportError) as exc:
            provider = provider_failure(dict(self.config.kafka_conf_items))
            raise ProducerError(
                f"sink={self.config.name} cannot create the Kafka producer: {self.config.scrub(str(exc))}"
                + (f" ({self.config.scrub(provider)})" if provider else ""),
                kafka_error=exc.args[0] if exc.args else None,
            ) from None  # the original may quote secret config values

    def replace(self) -> None:
        """A new producer, a new epoch; the old one is purged and dropped.

        Raises:
            ProducerError: the new producer cannot be created (the old one is gone anyway).
        """
        old, self._producer = self._producer, None
        self.epoch += 1
        self.replace_reason = None
        if old is not None:
            self.purge(old)
        self._producer = self._new()

    def purge(self, producer: Any) -> None:
        """Stop ``producer`` from sending: purge its queues, serve its callbacks briefly, drop it."""
        try:
            producer.purge()
            left = producer.flush(_ZOMBIE_FLUSH_S)
            if left:
                log.warning("sink=%s purged producer still held messages=%d; dropped (they are in the WAL)",
                            self.config.name, left)
        except Exception:  # a broken client: dropping it is all that is left
            log.exception("sink=%s purging a replaced producer failed; dropped", self.config.name)

    def close(self) -> None:
        """Drop the producer after a purge. Whatever it held is in the WAL."""
        old, self._producer = self._producer, None
        if old is not None:
            self.purge(old)
