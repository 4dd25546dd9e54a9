"""Produce synthetic telemetry as Avro in the Confluent wire format (docs/avro.md).

confluent-kafka's AvroSerializer registers SCHEMA under ``<topic>-value`` and
frames each value with its id, as any Avro producer under a registry does::

    python3 examples/avro_produce.py --bootstrap 127.0.0.1:9092 \
        --registry http://127.0.0.1:8081 --topic telemetry.avro --count 1000
"""

from __future__ import annotations

import argparse
import json
import random

from confluent_kafka import Producer
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

SCHEMA = {
    "type": "record",
    "name": "Telemetry",
    "namespace": "example",
    "fields": [
        {"name": "device_id", "type": "string"},
        {"name": "seq", "type": "long"},
        {"name": "battery_temp_c", "type": "double"},
        {"name": "country", "type": "string"},
        {"name": "crashed", "type": "boolean"},
    ],
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", default="127.0.0.1:9092")
    parser.add_argument("--registry", default="http://127.0.0.1:8081")
    parser.add_argument("--topic", default="telemetry.avro")
    parser.add_argument("--count", type=int, default=1000)
    args = parser.parse_args()
    rng = random.Random(1)  # noqa: S311 -- synthetic data, not noise
    with SchemaRegistryClient({"url": args.registry}) as registry:
        serialize = AvroSerializer(registry, json.dumps(SCHEMA))
        context = SerializationContext(args.topic, MessageField.VALUE)
        producer = Producer({"bootstrap.servers": args.bootstrap})
        for seq in range(args.count):
            record = {
                "device_id": f"dev-{rng.randrange(100):03d}",
                "seq": seq,
                "battery_temp_c": round(rng.gauss(31.0, 6.0), 1),
                "country": rng.choice(["US", "DE", "FR", "IN", "BR", "JP", "MX"]),
                "crashed": rng.random() < 0.05,
            }
            producer.produce(args.topic, serialize(record, context))
            producer.poll(0)
        producer.flush()
    print(f"produced {args.count} Avro records to {args.topic}")


if __name__ == "__main__":
    main()
