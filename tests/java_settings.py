"""The Java producer settings of a typical production ``format("kafka")`` job, and what librdkafka gets for them."""

from __future__ import annotations

__all__ = ["PRODUCTION", "PRODUCTION_LIBRDKAFKA"]

PRODUCTION = {"acks": "all", "linger.ms": "20", "batch.size": "131072", "compression.type": "lz4",
              "max.request.size": "2097152", "retries": "2147483647", "delivery.timeout.ms": "120000",
              "max.in.flight.requests.per.connection": "5", "enable.idempotence": "true",
              "request.timeout.ms": "30000", "buffer.memory": "67108864"}
PRODUCTION_LIBRDKAFKA = {**{k: v for k, v in PRODUCTION.items() if k not in ("max.request.size", "buffer.memory")},
                         "message.max.bytes": "2097152", "queue.buffering.max.kbytes": "65536"}
