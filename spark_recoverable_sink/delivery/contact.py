"""Whether this sink has ever reached a broker, and the client's last connection error.

A sink whose first batch cannot reach any broker is almost always
misconfigured (a wrong ``bootstrap.servers``, a firewall, a missing TLS
setting), while a broker that was reachable and then went away is an outage
the WAL rides out. :class:`BrokerContact` tells the two apart on an executor:

* ``reached`` becomes true when a record is acked, and is remembered in a
  marker file in the sink's WAL directory, so a restarted worker (or a new
  driver) does not take a later outage for a first-day mistake;
* ``last_error`` is the client's last connection error (``error_cb`` codes
  ``_TRANSPORT``, ``_RESOLVE``, ``_ALL_BROKERS_DOWN``, authentication and TLS
  errors), secrets scrubbed;
* :meth:`hopeless` is true when nothing was ever reached and the client said
  every broker is down: a task then stops waiting for acks at once.

:func:`first_contact_failure` is the driver's decision over the task reports.
"""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING, Any, Iterable

from ..config import SinkConfig
from ..deadline import Deadline
from ..errors import WalError
from ..wal.slots import sink_dir

if TYPE_CHECKING:  # pragma: no cover
    from ..report import TaskReport

__all__ = ["BrokerContact", "ContactDeadline", "first_contact_failure", "remember_reached", "reached_before",
           "MARKER"]

log = logging.getLogger(__name__)

#: File in ``<wal_dir>/<sink name>`` that says a broker acked a record of this sink once.
MARKER = "broker-reached"


def _connection_codes() -> tuple[frozenset[int], int]:
    from confluent_kafka import KafkaError

    names = ["_TRANSPORT", "_RESOLVE", "_ALL_BROKERS_DOWN", "_AUTHENTICATION", "_SSL",
             "SASL_AUTHENTICATION_FAILED"]
    return (frozenset(getattr(KafkaError, n) for n in names if hasattr(KafkaError, n)),
            KafkaError._ALL_BROKERS_DOWN)


class BrokerContact:
    """One publisher's knowledge of its brokers (thread-safe enough: flags and a string)."""

    def __init__(self, config: SinkConfig, sink_dir: str | None = None) -> None:
        self.config = config
        self.marker = os.path.join(sink_dir, MARKER) if sink_dir else None
        self._reached = False
        self.last_error = ""
        self.all_down = False
        self._codes, self._all_down_code = _connection_codes()

    @property
    def reached(self) -> bool:
        """Whether a broker acked a record of this sink, in this process or in any on this host."""
        if not self._reached and self.marker and os.path.exists(self.marker):
            self._reached = True  # another worker (or an earlier life of this one) reached it
        return self._reached

    def client_error(self, err: Any) -> None:
        """``error_cb`` hook: remember a connection error (the publisher logs it)."""
        code = err.code()
        if code not in self._codes:
            return
        if code == self._all_down_code:
            self.all_down = True
            if not self.last_error:
                self.last_error = self.config.scrub(err.str())
        else:
            self.last_error = self.config.scrub(err.str())

    def mark_reached(self) -> None:
        """A record was acked: a broker answers. Remembered on disk (best effort)."""
        self.all_down = False
        if self.reached:
            return
        self._reached = True
        if self.marker:
            try:
                with open(self.marker, "a"):
                    pass
            except OSError as exc:  # the memory of this process still knows
                log.warning("sink=%s cannot write marker %s: %s", self.config.name, self.marker, exc)

    def hopeless(self) -> bool:
        """Never reached, the client says every broker is down, and the user did not opt into waiting."""
        return self.all_down and not self.reached and not self.config.wait_for_broker


class ContactDeadline(Deadline):
    """The task's ack deadline, cut short when the sink has never reached a broker and all are down."""

    __slots__ = ("_contact",)

    def __init__(self, timeout_s: float | None, contact: BrokerContact) -> None:
        super().__init__(timeout_s)
        self._contact = contact

    def expired(self) -> bool:
        return super().expired() or self._contact.hopeless()


def first_contact_failure(parts: Iterable["TaskReport"]) -> tuple[int, str] | None:
    """``(pending, last_error)`` when a batch shows no broker was ever reached, else ``None``.

    Only a batch with records still pending, no task that ever reached a
    broker, and a connection error from the client counts: a batch whose
    records were refused by a broker (dead letters) did reach one.
    """
    ps = list(parts)
    if not ps or any(p.broker_reached or p.acked for p in ps):
        return None
    pending = sum(p.pending for p in ps)
    errors = [p.last_error for p in ps if p.last_error]
    if pending == 0 or not errors:
        return None
    return pending, errors[-1]


def _driver_marker(config: SinkConfig) -> str | None:
    try:
        return os.path.join(sink_dir(config.wal_dir, config.name), MARKER)
    except WalError:  # no usable wal_dir on this host: only the other evidence counts
        return None


def remember_reached(config: SinkConfig) -> None:
    """The driver saw a task reach a broker: remembered in this host's ``<wal_dir>/<sink>`` (best effort)."""
    path = _driver_marker(config)
    if path is not None and not os.path.exists(path):
        try:
            with open(path, "a"):
                pass
        except OSError as exc:
            log.warning("sink=%s cannot write marker %s: %s", config.name, path, exc)


def reached_before(config: SinkConfig) -> bool:
    """Whether this host remembers the sink reaching a broker (a driver restarted here, a data-source batch)."""
    path = _driver_marker(config)
    return path is not None and os.path.exists(path)
