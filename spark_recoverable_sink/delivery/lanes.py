"""Exactly-once lanes seen from outside a task: their markers, and their lingering transactions.

Used by the driver (is every lane of a batch committed?) and by operators
(abort what a dead process left open). Every lane of a sink is named
``rks-eo.<sink>.<run>.<partition>``: its ``transactional.id`` and the
consumer group holding its marker.
"""

from __future__ import annotations

import logging
from typing import Iterable

from ..config import SinkConfig
from .markers import client_conf, decode_marker, lane_id

__all__ = ["lane_markers", "sink_lanes", "abort_lingering"]

log = logging.getLogger(__name__)


def lane_markers(config: SinkConfig, run: str, lanes: Iterable[int],
                 timeout_s: float = 10.0) -> dict[int, tuple[int, int] | None]:
    """Each lane's committed marker ``(batch, rows mod 2**24)``, ``None`` if it never committed.

    Read by a consumer of the lane's group with ``isolation.level=read_committed``
    (so a marker of a transaction not yet completed is never returned). Not
    the admin client: librdkafka 2.x can abort the process when an admin
    request that timed out is answered later (seen here with a stopped broker).

    Raises:
        confluent_kafka.KafkaException: the broker did not answer in ``timeout_s``.
    """
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    out: dict[int, tuple[int, int] | None] = {}
    for lane in lanes:
        conf = client_conf(config)
        conf.update({"group.id": lane_id(config.name, run, lane), "enable.auto.commit": "false",
                     "isolation.level": "read_committed"})
        c = Consumer(conf)
        try:
            (tp,) = c.committed([TopicPartition(config.topic, 0)], timeout=timeout_s)
        finally:
            c.close()
        if tp.error is not None:
            raise KafkaException(tp.error)
        out[lane] = decode_marker(tp.offset)
    return out


def sink_lanes(config: SinkConfig, timeout_s: float = 10.0) -> list[str]:
    """The lane names of the sink that committed at least once (their marker groups exist)."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient(client_conf(config))
    prefix = f"rks-eo.{config.name}."
    listed = admin.list_consumer_groups(request_timeout=timeout_s).result()
    return sorted(g.group_id for g in listed.valid if g.group_id.startswith(prefix))


def abort_lingering(config: SinkConfig, lanes: Iterable[str] | None = None, timeout_s: float = 30.0) -> list[str]:
    """Abort every transaction a lane of the sink left open; returns the lanes handled.

    For each lane (default: :func:`sink_lanes`), a producer with its
    ``transactional.id`` calls ``init_transactions``: the broker fences every
    earlier producer of the lane and aborts its open transaction (Apache
    Kafka; a broker that makes such a transaction visible instead does not
    give this guarantee). A lane that is in use is fenced too: its owner
    re-initialises, reads its marker again and carries on.

    Raises:
        confluent_kafka.KafkaException: a lane could not be initialised in ``timeout_s``.
    """
    from confluent_kafka import Producer

    names = list(lanes) if lanes is not None else sink_lanes(config, timeout_s)
    for lid in names:
        if not lid.startswith(f"rks-eo.{config.name}."):
            raise ValueError(f"{lid!r} is not a lane of sink {config.name!r}")
        conf = config.producer_conf()
        conf["transactional.id"] = lid
        p = Producer(conf)
        p.init_transactions(timeout_s)
        log.warning("sink=%s lane=%s initialised: any transaction it left open is aborted", config.name, lid)
    return names
