"""Tier 1: every error code the linked librdkafka knows has exactly one fate (delivery/codes.py)."""

from __future__ import annotations

from spark_recoverable_sink.delivery import codes


def test_every_librdkafka_code_has_exactly_one_fate():
    known = codes.librdkafka_codes()
    assert len(known) > 150  # librdkafka's whole table, read from the library (2.16: 188 codes)
    sets = {"refused": codes.REFUSED, "reset": codes.RESET, "local": codes.LOCAL, "retry": codes.RETRY}
    unclassified = sorted(n for n, c in known.items() if not any(c in s for s in sets.values()))
    assert not unclassified, f"codes without a fate in delivery/codes.py: {unclassified}"
    twice = sorted(n for n, c in known.items() if sum(c in s for s in sets.values()) > 1)
    assert not twice, f"codes with two fates: {twice}"
    for name, c in known.items():
        assert codes.fate(c) in sets and c in sets[codes.fate(c)], name


def test_errors_kafka_gives_for_good_are_refused_and_our_own_limits_are_local():
    from confluent_kafka import KafkaError as E

    for refused in (E.INVALID_TIMESTAMP, E.MSG_SIZE_TOO_LARGE, E.POLICY_VIOLATION, E.INVALID_RECORD,
                    E.UNSUPPORTED_FOR_MESSAGE_FORMAT, E.TOPIC_AUTHORIZATION_FAILED, E._UNKNOWN_TOPIC):
        assert codes.fate(refused) == "refused", refused
    assert {E.INVALID_TIMESTAMP, E.INVALID_RECORD, E.POLICY_VIOLATION} <= codes.BATCH_LEVEL  # isolated first
    for local in (E._QUEUE_FULL, E._CRIT_SYS_RESOURCE, E._PURGE_QUEUE, E._DESTROY):
        assert codes.fate(local) == "local", local
    for transient in (E.NOT_LEADER_FOR_PARTITION, E.NOT_ENOUGH_REPLICAS, E._MSG_TIMED_OUT, E._TRANSPORT,
                      E.COORDINATOR_LOAD_IN_PROGRESS, E.CONCURRENT_TRANSACTIONS, E.KAFKA_STORAGE_ERROR):
        assert codes.fate(transient) == "retry", transient
    assert codes.fate(E.OUT_OF_ORDER_SEQUENCE_NUMBER) == "reset"
    assert codes.fate(9999) == "refused" and codes.fate(-9999) == "local"  # unknown: never retried forever
