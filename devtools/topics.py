"""Topics of the test broker: ready for a produce once created (tests and benchmark alike)."""

from __future__ import annotations

import time

__all__ = ["wait_for_leaders"]


def wait_for_leaders(bootstrap: str, topic: str, partitions: int, timeout_s: float = 60.0) -> None:
    """Wait until every partition's leader of a topic just created answers a ListOffsets request.

    A produce to a partition its leader has not opened yet can fail
    NOT_LEADER_OR_FOLLOWER and leave an idempotent producer retrying on
    OUT_OF_ORDER_SEQUENCE_NUMBER (KAFKA-15591): a test or a benchmark would
    meet a broker race, not the code under test.

    Raises:
        RuntimeError: some partition had no leader answering within ``timeout_s``.
    """
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient, OffsetSpec

    admin = AdminClient({"bootstrap.servers": bootstrap})
    end = time.monotonic() + timeout_s
    waiting = set(range(partitions))
    while waiting and time.monotonic() < end:
        futs = admin.list_offsets({TopicPartition(topic, p): OffsetSpec.latest() for p in sorted(waiting)},
                                  request_timeout=5)
        for tp, fut in futs.items():
            try:
                fut.result(10)
                waiting.discard(tp.partition)
            except Exception:  # noqa: BLE001 - not served yet: asked again
                pass
        if waiting:
            time.sleep(0.2)
    if waiting:
        raise RuntimeError(f"topic {topic}: partitions {sorted(waiting)} have no leader answering after {timeout_s}s")
