"""Reading back records written in Schema Registry's wire format, with confluent-kafka's own deserializers."""

from __future__ import annotations

from typing import Any

__all__ = ["decode_values"]


def decode_values(registry: Any, records: list[Any], kind: str = "avro", field: str = "value") -> list[Any]:
    """Each record's ``field`` decoded by ``AvroDeserializer`` / ``JSONDeserializer`` (the schema looked up by its id)."""
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroDeserializer
    from confluent_kafka.schema_registry.json_schema import JSONDeserializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    client = SchemaRegistryClient({**registry.client_conf(), "timeout": 10})  # a lost request is retried
    de = AvroDeserializer(client) if kind == "avro" else JSONDeserializer(None, schema_registry_client=client)
    where = MessageField.VALUE if field == "value" else MessageField.KEY
    return [de(getattr(r, field), SerializationContext(r.topic, where)) for r in records]
