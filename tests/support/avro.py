"""confluent-kafka's Schema Registry client and Avro serializer, as a user's producer has them."""

from __future__ import annotations

import json
from typing import Any

from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

__all__ = [
    "AvroDeserializer",
    "AvroSerializer",
    "MessageField",
    "SchemaRegistryClient",
    "SerializationContext",
    "avro_writer",
]


def avro_writer(client: SchemaRegistryClient, topic: str, schema: dict[str, Any]) -> Any:
    """A function record -> Confluent-framed Avro bytes, registering ``schema`` under
    ``<topic>-value`` on first use (confluent-kafka's defaults)."""
    serializer = AvroSerializer(client, json.dumps(schema))
    context = SerializationContext(topic, MessageField.VALUE)
    return lambda record: serializer(record, context)
