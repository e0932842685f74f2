"""Every error code librdkafka knows, by what the publisher does about it.

librdkafka's table of codes (``rd_kafka_get_err_descs``, which
confluent-kafka turns into ``KafkaError``'s attributes) is read at import
and every code in it must have a fate here: ``tests/unit/test_codes.py``
fails on a code without one, so a librdkafka upgrade that adds codes is
classified on purpose, not by a default.

Fates:

* :data:`REFUSED` -- Kafka (or librdkafka, on Kafka's rules) refuses the
  record for good: it is dead-lettered with its reason, never retried.
  The codes of :data:`BATCH_LEVEL` come for a whole produce request: its
  records are isolated first and only the one refused alone is dead.
* :data:`RESET` -- the producer's idempotence or transaction state is
  broken: the publisher replaces the producer and sends the records again.
* :data:`LOCAL` -- a limit or failure of this process's own client (its
  queue, its memory, a purge or a destroy it asked for): retried, never
  dead-lettered, never reported as Kafka refusing the record.
* :data:`RETRY` -- transient on Kafka's side (leaders moving, coordinators
  loading, timeouts, the network, replicas catching up): retried from the
  WAL with backoff.

Codes that a produce or a transaction cannot return (consumer groups,
admin, share groups, the controller) are classified by their nature all
the same: by Apache Kafka's own split (its ``RetriableException``
subclasses are :data:`RETRY`), so that a broker that answers oddly never
gets a record retried forever for an error it gives for good.
"""

from __future__ import annotations

__all__ = ["BATCH_LEVEL", "LOCAL", "NON_RETRIABLE", "PRODUCER_RESET", "REFUSED", "RESET", "RETRY", "fate",
           "librdkafka_codes"]

_REFUSED = (
    # the record itself: its size, format, timestamp, the topic's policy
    "MSG_SIZE_TOO_LARGE", "_MSG_SIZE_TOO_LARGE", "INVALID_MSG_SIZE", "RECORD_LIST_TOO_LARGE", "INVALID_RECORD",
    "INVALID_TIMESTAMP", "UNSUPPORTED_FOR_MESSAGE_FORMAT", "POLICY_VIOLATION", "UNSUPPORTED_COMPRESSION_TYPE",
    "_BAD_MSG", "_BAD_COMPRESSION", "_KEY_SERIALIZATION", "_VALUE_SERIALIZATION", "_INVALID_TYPE",
    "_INVALID_ARG", "_CONFLICT",
    # where it goes: a topic or partition that does not exist, a name Kafka refuses, no right to write there
    "UNKNOWN_TOPIC_OR_PART", "_UNKNOWN_TOPIC", "_UNKNOWN_PARTITION", "TOPIC_EXCEPTION",
    "TOPIC_AUTHORIZATION_FAILED", "CLUSTER_AUTHORIZATION_FAILED", "TRANSACTIONAL_ID_AUTHORIZATION_FAILED",
    "GROUP_AUTHORIZATION_FAILED", "DELEGATION_TOKEN_AUTHORIZATION_FAILED",
    # the request or the configuration, refused whatever is retried
    "INVALID_REQUIRED_ACKS", "UNSUPPORTED_VERSION", "INVALID_REQUEST", "INVALID_TRANSACTION_TIMEOUT",
    "INVALID_CONFIG", "SECURITY_DISABLED", "_UNSUPPORTED_FEATURE", "_NOT_IMPLEMENTED", "_NOT_CONFIGURED",
    "OFFSET_METADATA_TOO_LARGE", "INVALID_COMMIT_OFFSET_SIZE", "INVALID_GROUP_ID", "INVALID_PARTITIONS",
    "INVALID_REPLICATION_FACTOR", "INVALID_REPLICA_ASSIGNMENT", "TOPIC_ALREADY_EXISTS", "TOPIC_DELETION_DISABLED",
    "INVALID_PRINCIPAL_TYPE", "DELEGATION_TOKEN_AUTH_DISABLED", "DELEGATION_TOKEN_NOT_FOUND",
    "DELEGATION_TOKEN_OWNER_MISMATCH", "DELEGATION_TOKEN_REQUEST_NOT_ALLOWED", "DELEGATION_TOKEN_EXPIRED",
    "NON_EMPTY_GROUP", "GROUP_ID_NOT_FOUND", "INCONSISTENT_GROUP_PROTOCOL", "INVALID_SESSION_TIMEOUT",
    "GROUP_MAX_SIZE_REACHED", "GROUP_SUBSCRIBED_TO_TOPIC", "UNSUPPORTED_ASSIGNOR", "INVALID_REGULAR_EXPRESSION",
    "RESOURCE_NOT_FOUND", "DUPLICATE_RESOURCE", "UNACCEPTABLE_CREDENTIAL", "PRINCIPAL_DESERIALIZATION_FAILURE",
    "FEATURE_UPDATE_FAILED", "INVALID_UPDATE_VERSION", "INCONSISTENT_VOTER_SET", "INVALID_VOTER_KEY",
    "DUPLICATE_VOTER", "VOTER_NOT_FOUND", "MISMATCHED_ENDPOINT_TYPE", "UNSUPPORTED_ENDPOINT_TYPE",
    "INVALID_REGISTRATION", "TELEMETRY_TOO_LARGE", "STREAMS_INVALID_TOPOLOGY", "STREAMS_INVALID_TOPOLOGY_EPOCH",
    "STREAMS_TOPOLOGY_FENCED", "INVALID_RECORD_STATE", "LOG_DIR_NOT_FOUND", "NO_REASSIGNMENT_IN_PROGRESS",
    "ELECTION_NOT_NEEDED", "LISTENER_NOT_FOUND", "OFFSET_OUT_OF_RANGE", "_INVALID_DIFFERENT_RECORD",
    "_UNKNOWN_PROTOCOL", "_EXISTING_SUBSCRIPTION", "_UNKNOWN_GROUP", "_NOENT", "_READ_ONLY",
)

_RESET = (
    "PRODUCER_FENCED", "INVALID_PRODUCER_EPOCH", "OUT_OF_ORDER_SEQUENCE_NUMBER", "UNKNOWN_PRODUCER_ID",
    "INVALID_PRODUCER_ID_MAPPING", "_FENCED", "_FATAL", "_INCONSISTENT", "_GAPLESS_GUARANTEE",
)

_LOCAL = (
    "_QUEUE_FULL", "_CRIT_SYS_RESOURCE", "_FS", "_DESTROY", "_DESTROY_BROKER", "_PURGE_QUEUE", "_PURGE_INFLIGHT",
    "_INTR", "_FAIL", "_APPLICATION", "_UNDERFLOW", "_PARTIAL", "_IN_PROGRESS", "_PREV_IN_PROGRESS", "_RETRY",
    "_NOOP", "_WAIT_CACHE", "_STATE",
)

_RETRY = (
    # the network, the brokers, timeouts
    "_TRANSPORT", "_RESOLVE", "_ALL_BROKERS_DOWN", "_MSG_TIMED_OUT", "_TIMED_OUT", "_TIMED_OUT_QUEUE",
    "_SSL", "_AUTHENTICATION", "SASL_AUTHENTICATION_FAILED", "UNSUPPORTED_SASL_MECHANISM", "ILLEGAL_SASL_STATE",
    "_UNKNOWN_BROKER", "_NODE_UPDATE", "_WAIT_COORD", "_ISR_INSUFF", "_OUTDATED", "_NO_OFFSET",
    "REQUEST_TIMED_OUT", "NETWORK_EXCEPTION", "BROKER_NOT_AVAILABLE", "REBOOTSTRAP_REQUIRED",
    "THROTTLING_QUOTA_EXCEEDED", "KAFKA_STORAGE_ERROR", "INVALID_MSG", "UNKNOWN",
    # leaders and replicas moving
    "LEADER_NOT_AVAILABLE", "NOT_LEADER_FOR_PARTITION", "REPLICA_NOT_AVAILABLE", "NOT_ENOUGH_REPLICAS",
    "NOT_ENOUGH_REPLICAS_AFTER_APPEND", "FENCED_LEADER_EPOCH", "UNKNOWN_LEADER_EPOCH", "STALE_CTRL_EPOCH",
    "STALE_BROKER_EPOCH", "PREFERRED_LEADER_NOT_AVAILABLE", "ELIGIBLE_LEADERS_NOT_AVAILABLE",
    "REASSIGNMENT_IN_PROGRESS", "NOT_CONTROLLER", "UNKNOWN_CONTROLLER_ID", "UNKNOWN_TOPIC_ID",
    "INCONSISTENT_TOPIC_ID", "OFFSET_NOT_AVAILABLE",
    # coordinators (transactions, groups); a transaction to abort (librdkafka flags it) is sent again after
    "DUPLICATE_SEQUENCE_NUMBER", "TRANSACTION_COORDINATOR_FENCED", "INVALID_TXN_STATE", "TRANSACTION_ABORTABLE",
    "COORDINATOR_LOAD_IN_PROGRESS", "COORDINATOR_NOT_AVAILABLE", "NOT_COORDINATOR", "CONCURRENT_TRANSACTIONS",
    "OPERATION_NOT_ATTEMPTED", "UNSTABLE_OFFSET_COMMIT", "REBALANCE_IN_PROGRESS", "ILLEGAL_GENERATION",
    "UNKNOWN_MEMBER_ID", "MEMBER_ID_REQUIRED", "FENCED_INSTANCE_ID", "UNRELEASED_INSTANCE_ID",
    "FENCED_MEMBER_EPOCH", "STALE_MEMBER_EPOCH", "UNKNOWN_SUBSCRIPTION_ID", "FETCH_SESSION_ID_NOT_FOUND",
    "INVALID_FETCH_SESSION_EPOCH", "SHARE_SESSION_NOT_FOUND", "INVALID_SHARE_SESSION_EPOCH",
    "SHARE_SESSION_LIMIT_REACHED", "FENCED_STATE_EPOCH",
    # consumer-side events, never a produce's outcome
    "_PARTITION_EOF", "_ASSIGN_PARTITIONS", "_REVOKE_PARTITIONS", "_KEY_DESERIALIZATION",
    "_VALUE_DESERIALIZATION", "_MAX_POLL_EXCEEDED", "_ASSIGNMENT_LOST", "_AUTO_OFFSET_RESET", "_LOG_TRUNCATION",
    "NO_ERROR",
)

#: Errors the broker returns for a whole produce request: a record failing with one
#: of them may be a good neighbour of the bad one (isolated before it is dead).
_BATCH_LEVEL = ("INVALID_RECORD", "MSG_SIZE_TOO_LARGE", "RECORD_LIST_TOO_LARGE", "POLICY_VIOLATION",
                "INVALID_TIMESTAMP", "UNSUPPORTED_FOR_MESSAGE_FORMAT")


def librdkafka_codes() -> dict[str, int]:
    """Every code of the linked librdkafka's table, by name (``KafkaError``'s integer attributes)."""
    from confluent_kafka import KafkaError

    out = {}
    for name in dir(KafkaError):
        value = getattr(KafkaError, name)
        if name.lstrip("_")[:1].isupper() and name.upper() == name and isinstance(value, int):
            out[name] = value
    return out


def _codes(names: tuple[str, ...]) -> frozenset[int]:
    known = librdkafka_codes()
    return frozenset(known[n] for n in names if n in known)  # names an older librdkafka lacks are skipped


REFUSED = _codes(_REFUSED)
RESET = _codes(_RESET)
LOCAL = _codes(_LOCAL)
RETRY = _codes(_RETRY)
BATCH_LEVEL = _codes(_BATCH_LEVEL)
#: Kafka error codes after which a record is dead-lettered instead of retried (alias of :data:`REFUSED`).
NON_RETRIABLE = REFUSED
#: Error codes meaning the producer's state is broken: the publisher replaces it (alias of :data:`RESET`).
PRODUCER_RESET = RESET


def fate(code: int) -> str:
    """``"refused"``, ``"reset"``, ``"local"`` or ``"retry"`` for a librdkafka error code.

    A code outside librdkafka's table (a newer broker's code passed through)
    is ``"refused"`` when it is positive and unknown: Kafka's codes that
    succeed on a retry are listed, and a code nobody knows is not retried
    forever; ``"local"`` when negative (librdkafka's own).
    """
    if code in REFUSED:
        return "refused"
    if code in RESET:
        return "reset"
    if code in LOCAL:
        return "local"
    if code in RETRY:
        return "retry"
    return "refused" if code > 0 else "local"
