"""The marker topic: checked where the sink first needs it, and watched while lanes use it.

Where it runs: the driver (a query's first exactly-once batch) and every
worker process (its first lane); once per process, cached (nothing of it
pickles). What it guarantees:

* the topic exists, created compacted with one partition when missing and
  nobody checked it before in this query (a worker given the driver's
  topic id never creates it: the driver saw it, so missing means deleted);
* its ``cleanup.policy`` contains ``compact``: a ``delete`` topic (what a
  broker's auto-creation makes) loses lanes' marker records to retention,
  and is refused with :class:`.ConfigError` naming the fix. The sink's own
  clients never auto-create it (``allow.auto.create.topics=false``:
  :func:`..admin.client_conf`, lane producers);
* a topic deleted or replaced while the query runs stops its lanes with
  :class:`.MarkerError`: Kafka deletes a deleted topic's committed offsets
  with it, so every lane's proof is gone, and publishing on an empty topic
  could publish again units Kafka already has. Workers check again when a
  lane's marker goes back or the topic is reported unknown
  (:func:`recheck_marker_topic`); tasks and drain jobs carry the driver's
  topic id (:func:`expect_marker_topic`).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from typing import Any

from ...config import SinkConfig
from ...errors import ConfigError, MarkerError
from ..admin import forget_admins, shared_admin

__all__ = ["marker_topic_id", "known_marker_topic_id", "expect_marker_topic", "recheck_marker_topic",
           "forget_marker_topics", "forget_marker_topic", "MARKER_TOPIC_CONFIG", "UNKNOWN_TOPIC_CODES"]

log = logging.getLogger(__name__)

#: The marker topic: compacted, so the latest marker of every lane stays as long as the topic does.
MARKER_TOPIC_CONFIG = {"cleanup.policy": "compact", "segment.ms": str(3600 * 1000), "min.cleanable.dirty.ratio": "0.1"}

_lock = threading.Lock()
_pid = os.getpid()
_seen: dict[tuple[str, str], str] = {}  # (bootstrap, topic) -> its id as checked here ("": the broker gives none)
_expected: dict[tuple[str, str], str] = {}  # the id the driver checked, as a task or drain job carried it


def _key(config: SinkConfig) -> tuple[str, str]:
    global _pid
    if _pid != os.getpid():  # a forked child checks for itself
        _seen.clear()
        _expected.clear()
        _pid = os.getpid()
    return str(config.producer_conf().get("bootstrap.servers", "")), config.marker_topic


#: Kafka error codes saying a topic or partition is unknown (UNKNOWN_TOPIC_OR_PART, _UNKNOWN_TOPIC, _UNKNOWN_PARTITION).
UNKNOWN_TOPIC_CODES = (3, -188, -190)


def known_marker_topic_id(config: SinkConfig) -> str | None:
    """The id this process checked the marker topic to have (``""``: none given), ``None`` if not checked yet."""
    with _lock:
        return _seen.get(_key(config))


def forget_marker_topics() -> None:
    """Forget every check, and drop the kept admin clients (tests and tools: the next use checks again with a client
    of its own, as a new process would)."""
    with _lock:
        _seen.clear()
        _expected.clear()
    forget_admins()


def forget_marker_topic(config: SinkConfig) -> None:
    """Driver: a batch failed, so the next one is a (re)started query's first: the topic is checked anew there
    (and created if missing, as at any query's first batch)."""
    with _lock:
        key = _key(config)
        _seen.pop(key, None)
        _expected.pop(key, None)


def expect_marker_topic(config: SinkConfig, topic_id: str) -> None:
    """A task or drain job carries the topic id the driver checked (``""``: the broker gives none).

    This worker's own check of another topic of that name (a query before,
    on a topic deleted since) is forgotten: its next lane checks the topic
    against the driver's id (never creating it; another id is refused then).
    """
    with _lock:
        key = _key(config)
        _expected[key] = topic_id
        seen = _seen.get(key)
        if seen and topic_id and seen != topic_id:
            del _seen[key]
            log.warning("sink=%s marker topic %s: this worker checked topic id %s, the driver %s: checked again",
                        config.name, config.marker_topic, seen, topic_id)


def marker_topic_id(config: SinkConfig, timeout_s: float) -> str:
    """Check the marker topic (once per process, cached); returns its topic id (``""`` if the broker gives none).

    Raises:
        ConfigError: its ``cleanup.policy`` does not contain ``compact`` (the message names the fix).
        MarkerError: it is missing, or another topic, where the driver had checked it (deleted or replaced).
        confluent_kafka.KafkaException: the broker did not answer, or refused to create it (the message says how).
    """
    with _lock:
        key = _key(config)
        if key in _seen:
            return _seen[key]
        expect = _expected.get(key)
    from concurrent.futures import TimeoutError as FutureTimeout

    from confluent_kafka import KafkaError, KafkaException

    try:
        tid = _check(config, timeout_s, expect)
    except FutureTimeout:  # an admin answer that never came: a broker error like any other
        raise KafkaException(KafkaError(KafkaError._TIMED_OUT, f"marker topic {config.marker_topic} not checked "
                                        f"within {timeout_s:.0f}s")) from None
    with _lock:
        _seen[key] = tid
    return tid


def recheck_marker_topic(config: SinkConfig, timeout_s: float, why: str, ids: bool = True) -> None:
    """A lane saw a sign that the marker topic changed (``why``): raise if it is gone or is another topic.

    ``ids=False`` checks only that it exists (a metadata request: the driver's
    settle loop, which may run during an outage; the admin request that reads
    the id is made only right after the broker answered).

    Raises:
        MarkerError: it is gone, or its topic id differs from the one checked here or by the driver.
        confluent_kafka.KafkaException: the broker did not answer.
    """
    admin = shared_admin(config)
    if not _exists(admin, config.marker_topic, timeout_s):
        raise _gone(config, f"was deleted ({why})")
    with _lock:
        key = _key(config)
        known = _seen.get(key) or _expected.get(key)
    if ids and known:
        tid = _topic_id(admin, config.marker_topic, timeout_s)
        if tid and tid != known:
            raise _gone(config, f"was replaced by another topic of that name ({why}; id {known}, now {tid})")


def _check(config: SinkConfig, timeout_s: float, expect: str | None) -> str:
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import NewTopic

    topic = config.marker_topic
    admin = shared_admin(config)
    if not _exists(admin, topic, timeout_s):
        if expect is not None:
            raise _gone(config, "was deleted (the driver checked it at the query's first batch)")
        fut = admin.create_topics([NewTopic(topic, 1, replication_factor=-1, config=dict(MARKER_TOPIC_CONFIG))],
                                  request_timeout=timeout_s)
        try:
            fut[topic].result(timeout_s + 5.0)
            log.info("sink=%s marker topic %s created (compacted)", config.name, topic)
        except KafkaException as exc:
            err = exc.args[0]
            if err.code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise KafkaException(KafkaError(err.code(), f"marker topic {topic} cannot be created ({err.str()}); "
                                                "create it with cleanup.policy=compact and one partition, or set "
                                                "marker_topic to one that exists")) from None
    deadline = time.monotonic() + timeout_s  # from its creation: how long the broker may take to know the topic
    policy = _policy(admin, config, timeout_s, deadline)
    if policy is not None:
        kinds = {p.strip() for p in policy.split(",")}
        if "compact" not in kinds:
            bootstrap = config.producer_conf().get("bootstrap.servers", "BROKER")
            raise ConfigError("marker_topic", (
                f"topic {topic} has cleanup.policy={policy}: its marker records would be deleted by retention, and a "
                "lane whose marker offset expired (offsets.retention.minutes) would publish again batches Kafka "
                "already has (a broker's auto.create.topics.enable makes such a topic). Fix: kafka-configs.sh "
                f"--bootstrap-server {bootstrap} --alter --entity-type topics --entity-name {topic} --add-config "
                "cleanup.policy=compact (or set marker_topic to a compacted topic; the sink creates a missing one "
                "compacted)"))
        if "delete" in kinds:
            log.warning("sink=%s marker topic %s has cleanup.policy=%s: marker records older than its retention.ms "
                        "are deleted; a lane idle for longer than that and offsets.retention.minutes loses its "
                        "marker", config.name, topic, policy)
    tid = _topic_id(admin, topic, timeout_s, deadline)
    if expect and tid and tid != expect:
        raise _gone(config, f"was replaced by another topic of that name (the driver checked id {expect}, now {tid})")
    return tid


def _exists(admin: Any, topic: str, timeout_s: float) -> bool:
    """Whether the broker knows ``topic`` (a metadata request: the admin client's, auto-creation off)."""
    from confluent_kafka import KafkaException

    t = admin.list_topics(topic, timeout=timeout_s).topics.get(topic)
    if t is None or (t.error is not None and t.error.code() in UNKNOWN_TOPIC_CODES):
        return False
    if t.error is not None:
        raise KafkaException(t.error)  # not authorised, ...: the caller's error
    return bool(t.partitions)


def _not_yet_known(exc: BaseException, deadline: float | None) -> bool:
    """Whether ``exc`` says the topic is unknown while there is time left to ask again (then waits a little).

    A topic the controller just created (here, or by another process's first
    check) reaches the broker's metadata a moment later: until then the broker
    answers UNKNOWN_TOPIC_OR_PART to describe requests (seen on a loaded
    machine). That is asked again until ``deadline``; any other error, or
    the deadline passed, is the caller's.
    """
    from confluent_kafka import KafkaException

    if deadline is None or not isinstance(exc, KafkaException) or not exc.args:
        return False
    code = getattr(exc.args[0], "code", lambda: None)()
    left = deadline - time.monotonic()
    if code not in UNKNOWN_TOPIC_CODES or left <= 0:
        return False
    time.sleep(min(_RETRY_S, left))
    return True


#: Pause between two describe requests for a topic the broker does not know yet.
_RETRY_S = 0.1


def _policy(admin: Any, config: SinkConfig, timeout_s: float, deadline: float | None = None) -> str | None:
    """The topic's ``cleanup.policy``; ``None`` (warned) when the broker does not let the sink read it.

    A topic not known to the broker yet is asked for again until ``deadline``.

    Raises:
        confluent_kafka.KafkaException: the broker did not answer, or refused (still unknown at ``deadline``).
    """
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import ConfigResource

    while True:
        (fut,) = admin.describe_configs([ConfigResource("topic", config.marker_topic)],
                                        request_timeout=timeout_s).values()
        try:
            entry = fut.result(timeout_s + 5.0).get("cleanup.policy")
            break
        except KafkaException as exc:
            if _not_yet_known(exc, deadline):
                continue
            if exc.args[0].code() not in (KafkaError.TOPIC_AUTHORIZATION_FAILED,
                                          KafkaError.CLUSTER_AUTHORIZATION_FAILED):
                raise
            log.warning("sink=%s marker topic %s: its cleanup.policy cannot be read (%s): it must be compacted; "
                        "grant DescribeConfigs on it to have the sink check", config.name, config.marker_topic,
                        exc.args[0].str())
            return None
    return entry.value if entry is not None and entry.value is not None else "delete"


def _topic_id(admin: Any, topic: str, timeout_s: float, deadline: float | None = None) -> str:
    """The topic's id (KIP-516), ``""`` when the broker gives none (then ids are not compared).

    A topic not known to the broker yet is asked for again until ``deadline``.
    """
    from confluent_kafka import TopicCollection

    while True:
        try:
            desc = admin.describe_topics(TopicCollection([topic]),
                                         request_timeout=timeout_s)[topic].result(timeout_s + 5.0)
            break
        except Exception as exc:  # KafkaException, or no answer in time: ids are then not compared
            if _not_yet_known(exc, deadline):
                continue
            log.info("marker topic %s: no topic id (%s); a replaced topic is then noticed by its lanes' markers "
                     "only", topic, exc)
            return ""
    tid = str(getattr(desc, "topic_id", "") or "")
    return "" if tid.strip("A") in ("", "=") else tid  # an all-zero id: the broker has none


def _gone(config: SinkConfig, what: str) -> MarkerError:
    topic = config.marker_topic
    return MarkerError(
        f"sink={config.name} exactly-once marker topic {topic} {what}. Kafka deletes a deleted topic's committed "
        "offsets with it, so every lane's marker is gone and no lane can prove which units Kafka already has; the "
        f"sink stops rather than publish again a unit that was committed. To go on: let the sink create {topic} "
        "again (it does at a query's first batch; or create it with cleanup.policy=compact) and restart the query; "
        "units of the batch that was running, and units still in executors' WALs, that had committed before the "
        "deletion are then published a second time (a duplicate, never a loss). Or start the query on a new "
        "checkpoint (a new run id).", topic)
