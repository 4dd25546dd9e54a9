"""Peer: a librdkafka (confluent-kafka) transactional pass-through, no sanitizing.

What a plain exactly-once loop over the C client moves: ``consume(10000)``,
orjson decode, drop the id field, encode, ``produce`` per message, the
consumed positions into the transaction (``send_offsets_to_transaction``),
commit. One transaction per consumed batch, as `privstream run`. Started by
``bench/e2e.py`` (``bench/peer_common.py``: command line and config).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import orjson
from confluent_kafka import Consumer, KafkaError, Message, Producer

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.peer_common import parse_args, stop_on_sigterm

BATCH = 10_000
#: ``eager``: take what has arrived (``bench/latency.py``'s floor); else wait for a full batch
EAGER = os.environ.get("PEER_CONSUME") == "eager"


def take(consumer: Consumer) -> list[Message]:
    """The next batch. ``consume(n, timeout)`` returns once n messages are buffered or the
    timeout ends (confluent-kafka <= 2.12): at a steady 10,000 records/s that adds up to
    the timeout to every record, so the latency floor blocks on the first message only
    and takes what is buffered behind it."""
    if not EAGER:
        return consumer.consume(BATCH, timeout=0.1)
    first = consumer.poll(0.1)
    return [] if first is None else [first, *consumer.consume(BATCH - 1, timeout=0)]


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
            batch = take(consumer)
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
