"""Producers wrapping the real one, for failures a broker cannot be made to give on demand (the Python engine).

Tests using them run the sink with ``delivery_engine="python"``: the native
engine's producer is not confluent-kafka's and cannot be wrapped; it shares
the classification of failures (retry, isolate, dead-letter) with the Python
one, and its exact per-row reports are tested in test_native_producer.py.

The broker's own batch-level refusals (a topic's ``max.message.bytes``, a
keyless record on a compacted topic) are tested on the real broker in
test_dead_letter_isolation.py; these wrappers give what it cannot: a failure
tied to a record's headers, a transient failure of one record, a client that
swallows records. They keep the real client and broker for everything else."""

from __future__ import annotations

from typing import Any

import confluent_kafka
from confluent_kafka import KafkaError

_RealProducer = confluent_kafka.Producer
_ARGS = ("topic", "value", "key", "partition", "on_delivery", "callback", "timestamp", "headers")


class Msg:
    def __init__(self, topic: str, value: Any, key: Any) -> None:
        self._t, self._v, self._k = topic, value, key

    def topic(self) -> str:
        return self._t

    def value(self) -> Any:
        return self._v

    def key(self) -> Any:
        return self._k


class Wrapped:
    """The real producer behind a window of produce calls, released at the next poll."""

    instances: list["Wrapped"] = []

    def __init__(self, conf: dict[str, Any]) -> None:
        self._p = _RealProducer(conf)
        self._window: list[tuple[tuple, dict[str, Any]]] = []
        self.purged = False
        self.flushed: list[float] = []
        if "bootstrap.servers" in conf:  # not the driver's config check (a client that connects nowhere)
            type(self).instances.append(self)

    def produce(self, *args: Any, **kwargs: Any) -> None:
        # confluent-kafka's order; the sink's Python engine passes them positionally
        call = dict(zip(_ARGS, args))
        call.update(kwargs)
        # The real client converts the headers during produce (the sink reuses
        # its header dict): a deferred call keeps a copy, as the client does.
        hs = call.get("headers")
        if hs is not None:
            call["headers"] = dict(hs) if isinstance(hs, dict) else list(hs)
        if call.get("callback") is not None and call.get("on_delivery") is None:
            call["on_delivery"] = call.pop("callback")
        call.pop("callback", None)
        topic, value, key = call.pop("topic"), call.pop("value", None), call.pop("key", None)
        self._window.append(((topic, value, key), call))

    def release(self, window: list[tuple[tuple, dict[str, Any]]]) -> None:
        for args, kwargs in window:
            self._p.produce(*args, **kwargs)

    def poll(self, timeout: float = 0) -> int:
        window, self._window = self._window, []
        self.release(window)
        return self._p.poll(timeout)

    def flush(self, timeout: float = -1) -> int:
        self.flushed.append(timeout)
        self.poll(0)
        return self._p.flush(timeout)

    def purge(self, *args: Any) -> None:
        self.purged = True
        self._window = []
        self._p.purge(*args)

    def __len__(self) -> int:
        return len(self._window) + len(self._p)


class BatchLevelError(Wrapped):
    """A window holding a value starting with ``BAD`` fails whole with MSG_SIZE_TOO_LARGE, as a broker does."""

    def release(self, window: list[tuple[tuple, dict[str, Any]]]) -> None:
        if any((a[1] or b"").startswith(b"BAD") for a, _k in window):
            err = KafkaError(KafkaError.MSG_SIZE_TOO_LARGE)
            for (topic, value, key), kwargs in window:
                kwargs["on_delivery"](err, Msg(topic, value, key))
            return
        super().release(window)


class HeaderFaults(Wrapped):
    """Header ``bad`` fails for good; header ``flaky`` fails once with a timeout; the rest is real."""

    flaky_done = False

    def release(self, window: list[tuple[tuple, dict[str, Any]]]) -> None:
        for args, kwargs in window:
            hs = kwargs.get("headers") or ()
            names = set(hs) if isinstance(hs, dict) else {h[0] for h in hs}  # the id alone goes in as a dict
            topic, value, key = args
            if "bad" in names:
                kwargs["on_delivery"](KafkaError(KafkaError.MSG_SIZE_TOO_LARGE), Msg(topic, value, key))
            elif "flaky" in names and not HeaderFaults.flaky_done:
                HeaderFaults.flaky_done = True
                kwargs["on_delivery"](KafkaError(KafkaError._MSG_TIMED_OUT), Msg(topic, value, key))
            else:
                self._p.produce(*args, **kwargs)


class BlackHoleFirst(Wrapped):
    """The first instance takes records and never reports them (a wedged client); later ones are real."""

    def release(self, window: list[tuple[tuple, dict[str, Any]]]) -> None:
        if self is type(self).instances[0]:
            self.swallowed = getattr(self, "swallowed", 0) + len(window)
            return
        super().release(window)
