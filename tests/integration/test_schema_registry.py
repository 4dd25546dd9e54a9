"""The suite's schema registry speaks the Confluent API as confluent-kafka's clients use it."""

from __future__ import annotations

import secrets

from tests.support.avro import (
    AvroDeserializer,
    MessageField,
    SchemaRegistryClient,
    SerializationContext,
    avro_writer,
)

SCHEMA = {
    "type": "record",
    "name": "Reading",
    "fields": [{"name": "device_id", "type": "string"}, {"name": "salary", "type": "double"}],
}


def test_a_schema_registered_by_the_serializer_reads_back_by_its_id(schema_registry: str) -> None:
    topic = f"registry.{secrets.token_hex(4)}"
    with SchemaRegistryClient({"url": schema_registry}) as client:
        framed = avro_writer(client, topic, SCHEMA)({"device_id": "d1", "salary": 2.5})
        context = SerializationContext(topic, MessageField.VALUE)
        decoded = AvroDeserializer(client)(framed, context)
        schema_id = int.from_bytes(framed[1:5], "big")
        latest = client.get_latest_version(f"{topic}-value")
        subjects = client.get_subjects()

    assert framed[0] == 0  # the Confluent wire format: magic byte, 4-byte id, payload
    assert subjects.count(f"{topic}-value") == 1
    assert latest.schema_id == schema_id
    assert decoded == {"device_id": "d1", "salary": 2.5}
