"""The reference record (``bench/reference.py``) as Avro: its schema, and framed values.

The values are written by confluent-kafka's ``AvroSerializer`` with the schema
registered under ``<topic>-value``, as a user's producer would.
"""

from __future__ import annotations

import json
from typing import Any

from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

SCHEMA: dict[str, Any] = {
    "type": "record",
    "name": "Reference",
    "namespace": "privstream.bench",
    "fields": [
        {"name": "device_id", "type": "string"},
        {"name": "ts", "type": "long"},
        {"name": "temp_c", "type": "double"},
        {"name": "load_pct", "type": "double"},
        {"name": "events", "type": "long"},
        {"name": "network", "type": "string"},
        {"name": "country", "type": "string"},
        {"name": "charging", "type": "boolean"},
    ],
}


def framed(url: str, topic: str, messages: list[bytes]) -> list[bytes]:
    """The reference JSON messages as Confluent-framed Avro of ``SCHEMA``."""
    with SchemaRegistryClient({"url": url}) as client:
        serialize = AvroSerializer(client, json.dumps(SCHEMA))
        context = SerializationContext(topic, MessageField.VALUE)
        return [serialize(json.loads(m), context) for m in messages]
