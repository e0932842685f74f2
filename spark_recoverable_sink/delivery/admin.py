"""The sink's Kafka clients other than producers: their options, and one admin client per process and sink.

Where it runs: executors (Python workers) and the driver. Nothing here pickles: a forked child makes its own
admin client. Who uses it: the marker topic's checks (:mod:`.exactly_once.topic`), a lane's sweep reading a
topic's partitions (:meth:`.engine.Engine.list_topics`), marker reads and the lane plan (their consumers).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import threading
from collections import OrderedDict
from typing import Any

from ..config import SinkConfig

__all__ = ["client_conf", "shared_admin", "forget_admins"]

_CLIENT_PREFIXES = ("bootstrap.servers", "security.", "sasl.", "ssl.", "enable.ssl", "client.", "socket.", "broker.",
                    "reconnect.", "metadata.", "topic.metadata", "api.version", "log_level", "oauth_cb")

_lock = threading.Lock()
_pid = os.getpid()
_admins: OrderedDict[tuple[str, str], Any] = OrderedDict()  # (sink, options' digest) -> admin client
_ADMINS_KEPT = 4  # the least recently used beyond these are dropped (their clients end when collected)
_KEY_SECRET = os.urandom(32)  # the HMAC key of _admins' keys (_admin_key): this process's alone


def client_conf(config: SinkConfig) -> dict[str, Any]:
    """The connection and security options of the sink's Kafka configuration (for consumers and admin).

    Their metadata requests never create a topic (``allow.auto.create.topics``
    is on by default for an admin client): a lookup of a missing marker topic
    must not have the broker create it with its defaults (``cleanup.policy=delete``).
    """
    conf = {k: v for k, v in config.producer_conf().items() if k.startswith(_CLIENT_PREFIXES)}
    conf["allow.auto.create.topics"] = "false"
    return conf


def shared_admin(config: SinkConfig) -> Any:
    """This process's admin client of the sink (:func:`client_conf`: metadata requests never create a topic),
    made once and kept until :func:`forget_admins`: a lane's new producer reads partitions with it, and the
    marker topic's checks use it, instead of starting a client of their own (a librdkafka instance and its
    connection: about 50 ms of every lane that moved to this worker).
    """
    global _pid
    from confluent_kafka.admin import AdminClient

    conf = client_conf(config)
    key = _admin_key(config, conf)
    with _lock:
        if _pid != os.getpid():  # a forked child makes its own
            _admins.clear()
            _pid = os.getpid()
        admin = _admins.get(key)
        if admin is None:
            admin = _admins[key] = AdminClient(conf)
            while len(_admins) > _ADMINS_KEPT:
                _admins.popitem(last=False)
        _admins.move_to_end(key)
        return admin


def forget_admins() -> None:
    """Drop the kept admin clients (tests and tools: the next use makes its own, as a new process would)."""
    with _lock:
        _admins.clear()


def _admin_key(config: SinkConfig, conf: dict[str, Any]) -> tuple[str, str]:
    """``(sink, digest)``: what tells one sink's admin client from another's, holding no secret in any printable form.

    The digest covers every client option (another broker, login or secret: another client). A callback is taken
    as the reference the configuration names (``oauth_cb``: ``"package.module:function"``), not as the function
    :func:`..auth.with_callbacks` imports anew for each read of the configuration: keyed by that, every check
    missed, built a client and fetched a token. It is an HMAC under a key drawn once per process, so
    nobody who sees it (a debugger, a dump) can test guessed passwords against it.
    """
    shipped = dict(config.kafka_conf_items)  # callbacks as their references
    items = sorted((k, shipped.get(k, "") if callable(v) else v) for k, v in conf.items())
    digest = hmac.new(_KEY_SECRET, json.dumps(items, default=str).encode(), hashlib.sha256).hexdigest()
    return config.name, digest
