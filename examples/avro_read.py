"""Read a sanitized Avro topic with confluent-kafka's AvroDeserializer (docs/avro.md).

The deserializer fetches each value's writer schema by its id from the
registry, as any Avro consumer does; each record is printed as one JSON line.
Reads the committed records only (read_committed), until ``--count`` or
``--timeout`` seconds without a new one::

    python3 examples/avro_read.py --bootstrap 127.0.0.1:9092 \
        --registry http://127.0.0.1:8081 --topic telemetry.avro.sanitized --count 1000
"""

from __future__ import annotations

import argparse
import json
import uuid

from confluent_kafka import Consumer
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer
from confluent_kafka.serialization import MessageField, SerializationContext


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", default="127.0.0.1:9092")
    parser.add_argument("--registry", default="http://127.0.0.1:8081")
    parser.add_argument("--topic", default="telemetry.avro.sanitized")
    parser.add_argument("--count", type=int, default=1000)
    parser.add_argument("--timeout", type=float, default=30.0)
    args = parser.parse_args()
    consumer = Consumer(
        {
            "bootstrap.servers": args.bootstrap,
            "group.id": f"avro-read-{uuid.uuid4()}",  # a fresh group: from the beginning
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
        }
    )
    consumer.subscribe([args.topic])
    context = SerializationContext(args.topic, MessageField.VALUE)
    read = 0
    with SchemaRegistryClient({"url": args.registry}) as registry:
        deserialize = AvroDeserializer(registry)
        try:
            while read < args.count:
                message = consumer.poll(args.timeout)
                if message is None:
                    break
                if message.error() is not None:
                    raise SystemExit(f"avro_read: {message.error()}")
                print(json.dumps(deserialize(message.value(), context)), flush=True)
                read += 1
        finally:
            consumer.close()


if __name__ == "__main__":
    main()
