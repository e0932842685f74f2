"""Tier 1: when the marker topic is checked (once per process), and what a task's driver id changes.

The checks themselves (exists, compacted, its id) run against the broker:
tests/broker/test_exactly_once_markers.py. Here the check is replaced by a
recording one, to pin down the caching rules.
"""

from __future__ import annotations

import os
import pickle

import pytest

from spark_recoverable_sink.config import SinkConfig
from spark_recoverable_sink.delivery import admin
from spark_recoverable_sink.delivery.exactly_once import topic


@pytest.fixture
def checks(monkeypatch):
    """Every check made: the ``expect`` it was given; it answers with the id queued in ``ids``."""
    made: list[str | None] = []
    ids = ["id-1"]

    def check(config, timeout_s, expect):
        made.append(expect)
        return ids[0]

    monkeypatch.setattr(topic, "_check", check)
    topic.forget_marker_topics()
    yield made, ids
    topic.forget_marker_topics()


def _cfg(name: str = "mt") -> SinkConfig:
    return SinkConfig.build(name, {"bootstrap.servers": "127.0.0.1:1"}, "/tmp/unused-mt", topic="t",
                            guarantee="exactly_once")


def test_checked_once_per_process_and_again_after_a_failed_batch(checks):
    made, _ids = checks
    cfg = _cfg()
    assert topic.known_marker_topic_id(cfg) is None
    assert topic.marker_topic_id(cfg, 1.0) == "id-1" and topic.marker_topic_id(cfg, 1.0) == "id-1"
    assert made == [None]  # once; nobody's id to hold it to: a missing topic may be created
    assert topic.known_marker_topic_id(cfg) == "id-1"
    assert topic.known_marker_topic_id(_cfg("other-sink")) == "id-1"  # the topic's, whichever sink asks
    topic.forget_marker_topic(cfg)  # the driver after a failed batch: the next is a query's first
    assert topic.marker_topic_id(cfg, 1.0) == "id-1" and made == [None, None]


def test_a_task_carrying_the_drivers_id_holds_the_check_to_it(checks):
    made, ids = checks
    cfg = _cfg()
    topic.expect_marker_topic(cfg, "id-1")
    assert topic.marker_topic_id(cfg, 1.0) == "id-1" and made == ["id-1"]  # a missing topic is not created
    topic.expect_marker_topic(cfg, "id-1")  # the same topic: nothing checked again
    assert topic.marker_topic_id(cfg, 1.0) == "id-1" and made == ["id-1"]
    # The driver checked another topic of that name (a query restarted after the topic was deleted): this
    # worker's own check is forgotten, and the next one is held to the driver's id.
    ids[0] = "id-2"
    topic.expect_marker_topic(cfg, "id-2")
    assert topic.known_marker_topic_id(cfg) is None
    assert topic.marker_topic_id(cfg, 1.0) == "id-2" and made == ["id-1", "id-2"]


class _Fut:
    def __init__(self, answer):
        self.answer = answer

    def result(self, _timeout=None):
        if isinstance(self.answer, BaseException):
            raise self.answer
        return self.answer


class _LaggingAdmin:
    """A broker whose metadata learns of a created topic ``lag`` answers of each describe request after the
    controller did; creating the topic takes ``create_s``."""

    def __init__(self, lag: int, create_s: float = 0.0):
        from types import SimpleNamespace

        self.lag, self.create_s, self.created = lag, create_s, False
        self.asked = {"configs": 0, "topics": 0}
        self._ns = SimpleNamespace

    def list_topics(self, topic, timeout=None):
        return self._ns(topics={})  # not known before it is created

    def create_topics(self, new, request_timeout=None):
        import time

        time.sleep(self.create_s)
        self.created = True
        return {t.topic: _Fut(None) for t in new}

    def _answer(self, kind, answer):
        from confluent_kafka import KafkaError, KafkaException

        self.asked[kind] += 1
        if self.asked[kind] <= self.lag:
            return _Fut(KafkaException(KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART)))
        return _Fut(answer)

    def describe_configs(self, resources, request_timeout=None):
        return {resources[0]: self._answer("configs", {"cleanup.policy": self._ns(value="compact")})}

    def describe_topics(self, topics, request_timeout=None):
        return {topics.topic_names[0]: self._answer("topics", self._ns(topic_id="id-new"))}


def _check_with(monkeypatch, admin: "_LaggingAdmin", timeout_s: float) -> str:
    """The marker topic's check in a fresh process (nothing cached) against ``admin``; its topic id."""
    import confluent_kafka.admin

    monkeypatch.setattr(confluent_kafka.admin, "AdminClient", lambda conf: admin)
    monkeypatch.setattr(topic, "_RETRY_S", 0.001, raising=False)
    topic.forget_marker_topics()
    try:
        return topic.marker_topic_id(_cfg(), timeout_s)
    finally:
        topic.forget_marker_topics()


@pytest.mark.parametrize("lag", [1, 3])
def test_a_topic_just_created_that_the_broker_does_not_know_yet_is_asked_for_again(monkeypatch, lag):
    admin = _LaggingAdmin(lag)
    assert _check_with(monkeypatch, admin, 5.0) == "id-new"
    assert admin.created and admin.asked == {"configs": lag + 1, "topics": lag + 1}  # each asked again


def test_the_time_to_know_a_new_topic_counts_from_its_creation(monkeypatch):
    """A creation that took most of the check's timeout still leaves the broker that long to know the topic."""
    assert _check_with(monkeypatch, _LaggingAdmin(1, create_s=0.6), 0.5) == "id-new"


def test_a_topic_the_broker_never_knows_is_an_error_within_the_timeout(monkeypatch):
    import time

    from confluent_kafka import KafkaException

    t0 = time.monotonic()
    with pytest.raises(KafkaException, match="UNKNOWN_TOPIC_OR_PART|Unknown topic"):
        _check_with(monkeypatch, _LaggingAdmin(10**9), 0.5)
    assert time.monotonic() - t0 < 5.0


def _oauth_cfg(tmp_path, name: str = "mt-oauth", password: str = "", label: str = "one") -> SinkConfig:
    conf = {"bootstrap.servers": "127.0.0.1:1", "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "OAUTHBEARER", "oauth_cb": "tests.token_provider:token",
            "sasl.oauthbearer.config": f"label={label}"}
    if password:  # a secret in the configuration beside the provider (the ssl key's passphrase)
        conf["ssl.key.password"] = password
    return SinkConfig.build(name, conf, str(tmp_path / "wal"), topic="t", guarantee="exactly_once")


def test_one_admin_client_per_sink_with_a_token_provider_never_one_per_check(tmp_path, monkeypatch):
    """``oauth_cb`` is imported as a new function object each time the configuration is read: a key holding it
    missed every time, so each marker-topic check built an admin client and fetched a token. Counted for real: the
    clients confluent-kafka builds and the provider's calls (tests/token_provider.py records each one)."""
    from confluent_kafka import admin as kafka_admin

    monkeypatch.setenv("RKS_TOKEN_LOG", str(tmp_path))
    made: list[dict] = []
    real_init = kafka_admin.AdminClient.__init__

    def counted(self, conf, **kwargs):
        made.append(conf)
        real_init(self, conf, **kwargs)

    monkeypatch.setattr(kafka_admin.AdminClient, "__init__", counted)
    topic.forget_marker_topics()
    try:
        cfg = _oauth_cfg(tmp_path, password="key-pass-4b1d-never-printed")
        first = admin.shared_admin(cfg)
        again = admin.shared_admin(cfg)  # a second check of the same sink
        unpickled = admin.shared_admin(pickle.loads(pickle.dumps(cfg)))  # the sink's config as a task gets it
        assert first is again is unpickled and len(made) == 1, f"{len(made)} admin clients for one sink"
        calls = [f for f in os.listdir(tmp_path) if f.startswith("call-")]
        assert len(calls) == 1 and open(tmp_path / calls[0]).read() == "called\n", calls  # one token fetched
        # Other credentials (another provider login, another secret) never share it.
        other_login = admin.shared_admin(_oauth_cfg(tmp_path, label="two"))
        other_secret = admin.shared_admin(_oauth_cfg(tmp_path, password="another-pass"))
        assert len({id(first), id(other_login), id(other_secret)}) == 3 and len(made) == 3
        # The kept clients' keys hold no secret in any printable form.
        held = repr(list(admin._admins)) + str(list(admin._admins))
        for secret in ("key-pass-4b1d-never-printed", "another-pass", "label=one", "label=two"):
            assert secret not in held, held
    finally:
        topic.forget_marker_topics()
