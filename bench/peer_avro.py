"""Peer: a librdkafka (confluent-kafka) transactional Avro pass-through, no sanitizing.

What an exactly-once loop over the C client moves when the topic carries Avro
under a schema registry, as a user would write it: ``consume(10000)``,
confluent-kafka's ``AvroDeserializer`` (writer schema by id, cached), drop the
id field, ``AvroSerializer`` (the input schema without the dropped fields,
registered under ``<output_topic>-value`` on first use), ``produce`` per
message, the consumed positions into the transaction, commit. One
transaction per consumed batch, as `privstream run`. Started by
``bench/avro_e2e.py`` (``bench/peer_common.py``: command line and config).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from confluent_kafka import Consumer, KafkaError, Producer
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.avro_reference import SCHEMA
from bench.peer_common import parse_args, stop_on_sigterm

BATCH = 10_000


def main() -> None:
    config = parse_args()
    stop = stop_on_sigterm()
    dropped = {f["name"] for f in config.fields if f["kind"] == "drop"}
    out_schema = {**SCHEMA, "fields": [f for f in SCHEMA["fields"] if f["name"] not in dropped]}
    registry = SchemaRegistryClient({"url": config.registry_url})
    deserialize = AvroDeserializer(registry)
    serialize = AvroSerializer(registry, json.dumps(out_schema))
    source = SerializationContext(config.input_topic, MessageField.VALUE)
    target = SerializationContext(config.output_topic, MessageField.VALUE)
    consumer = Consumer(
        {
            "bootstrap.servers": config.bootstrap,
            "group.id": config.group,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "isolation.level": "read_committed",
        }
    )
    producer = Producer(
        {
            "bootstrap.servers": config.bootstrap,
            "transactional.id": config.transactional_id,
            "linger.ms": 5,
        }
    )
    producer.init_transactions()
    consumer.subscribe([config.input_topic])
    out = config.output_topic
    try:
        while not stop.is_set():
            batch = consumer.consume(BATCH, timeout=0.1)
            if not batch:
                continue
            producer.begin_transaction()
            for message in batch:
                if message.error() is not None:
                    if message.error().code() == KafkaError._PARTITION_EOF:
                        continue
                    raise RuntimeError(message.error())
                record = deserialize(message.value(), source)
                for name in dropped:
                    record.pop(name, None)
                producer.produce(out, serialize(record, target))
            positions = consumer.position(consumer.assignment())
            producer.send_offsets_to_transaction(positions, consumer.consumer_group_metadata())
            producer.commit_transaction()
    finally:
        consumer.close()


if __name__ == "__main__":
    main()
