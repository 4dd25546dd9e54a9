"""Peer: a librdkafka (confluent-kafka) transactional pass-through, no sanitizing.

What a plain exactly-once loop over the C client moves: ``consume(10000)``,
orjson decode, drop the id field, encode, ``produce`` per message, the
consumed positions into the transaction (``send_offsets_to_transaction``),
commit. One transaction per consumed batch, as `privstream run`. Started by
``bench/e2e.py`` (``bench/peer_common.py``: command line and config).
"""

from __future__ import annotations

import sys
from pathlib import Path

import orjson
from confluent_kafka import Consumer, KafkaError, Producer

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.peer_common import parse_args, stop_on_sigterm

BATCH = 10_000


def main() -> None:
    config = parse_args()
    stop = stop_on_sigterm()
    dropped = [f["name"] for f in config.fields if f["kind"] == "drop"]
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
    loads, dumps, out = orjson.loads, orjson.dumps, config.output_topic
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
                record = loads(message.value())
                for name in dropped:
                    record.pop(name, None)
                producer.produce(out, dumps(record))
            positions = consumer.position(consumer.assignment())
            producer.send_offsets_to_transaction(positions, consumer.consumer_group_metadata())
            producer.commit_transaction()
    finally:
        consumer.close()


if __name__ == "__main__":
    main()
