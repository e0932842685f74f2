"""Kafka error codes by what the publisher does about them."""

from __future__ import annotations

__all__ = ["NON_RETRIABLE", "PRODUCER_RESET", "BATCH_LEVEL"]


def _codes(*names: str) -> frozenset[int]:
    from confluent_kafka import KafkaError

    return frozenset(getattr(KafkaError, n) for n in names if hasattr(KafkaError, n))


#: Kafka error codes after which a record is dead-lettered instead of retried.
NON_RETRIABLE = _codes(
    "MSG_SIZE_TOO_LARGE", "_MSG_SIZE_TOO_LARGE", "RECORD_LIST_TOO_LARGE", "INVALID_RECORD",
    "TOPIC_AUTHORIZATION_FAILED", "CLUSTER_AUTHORIZATION_FAILED", "TOPIC_EXCEPTION",
    "_UNKNOWN_PARTITION", "_INVALID_ARG", "UNSUPPORTED_FOR_MESSAGE_FORMAT", "POLICY_VIOLATION",
    "INVALID_REQUIRED_ACKS", "_INVALID_TYPE", "TRANSACTIONAL_ID_AUTHORIZATION_FAILED",
    # the topic does not exist (after topic.metadata.propagation.max.ms) and is not auto-created
    "UNKNOWN_TOPIC_OR_PART", "_UNKNOWN_TOPIC",
)

#: Error codes meaning the producer's idempotence state is broken: retrying on
#: the same producer cannot succeed, so the publisher replaces it.
PRODUCER_RESET = _codes(
    "PRODUCER_FENCED", "INVALID_PRODUCER_EPOCH", "OUT_OF_ORDER_SEQUENCE_NUMBER", "UNKNOWN_PRODUCER_ID",
    "INVALID_PRODUCER_ID_MAPPING", "_FENCED", "_FATAL", "_INCONSISTENT", "_GAPLESS_GUARANTEE",
)

#: Errors the broker returns for a whole Kafka batch: a record failing with one
#: of them may be a good neighbour of the bad one (isolated before it is dead).
BATCH_LEVEL = _codes("INVALID_RECORD", "MSG_SIZE_TOO_LARGE", "RECORD_LIST_TOO_LARGE", "POLICY_VIOLATION")
