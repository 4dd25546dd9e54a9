"""The latency harness's outside clients: a stamping load generator and a committed reader.

Both are librdkafka (confluent-kafka), each in a thread of the benchmark
process: they must not compete with the worker for a starved CPU more than
they have to, and aiokafka's per-message send costs several times more.

Every time is read on this machine's one clock, so the legs subtract: the
generator stamps each record's ``ts`` field with its send time (µs, strictly
increasing: it doubles as the record's identity), the broker stamps each
record it appends with its append time (the topics of ``bench/latency.py`` use
``message.timestamp.type=LogAppendTime``), and the reader notes when a record
became readable to ``isolation.level=read_committed``.
"""

from __future__ import annotations

import random
import threading
import time
from dataclasses import dataclass, field

import orjson
from confluent_kafka import (
    OFFSET_BEGINNING,
    TIMESTAMP_LOG_APPEND_TIME,
    Consumer,
    KafkaError,
    Message,
    Producer,
    TopicPartition,
)

from bench.reference import record

RATE = 10_000
TICK_S = 0.01


@dataclass
class Load:
    """What the generator sent: how many, and each record's broker append time (ms) by ts."""

    sent: int = 0
    appended_ms: dict[int, int] = field(default_factory=dict)
    failed: int = 0

    def delivered(self, err: KafkaError | None, msg: Message) -> None:
        """librdkafka's delivery report: the broker's append time, as it acknowledged."""
        if err is not None:
            self.failed += 1
            return
        kind, stamp = msg.timestamp()
        if kind == TIMESTAMP_LOG_APPEND_TIME:
            self.appended_ms[orjson.loads(msg.value())["ts"]] = stamp


def steady_load(bootstrap: str, topic: str, seconds: float, rate: int = RATE) -> Load:
    """Produce ``rate`` records/s in ticks of TICK_S, each stamped as it is handed to the
    client."""
    client = Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": 1,
            "acks": "all",
            "on_delivery": (load := Load()).delivered,
        }
    )
    rng = random.Random(1)
    last_us = 0
    start = time.perf_counter()
    while (elapsed := time.perf_counter() - start) < seconds:
        for _ in range(int(elapsed * rate) - load.sent):
            value = record(rng, load.sent)
            value["ts"] = last_us = max(time.time_ns() // 1000, last_us + 1)
            client.produce(topic, orjson.dumps(value))
            load.sent += 1
        client.poll(0)
        time.sleep(TICK_S)
    client.flush(30)
    return load


@dataclass(frozen=True)
class Read:
    """One record read back: its send stamp (µs), its append time on the read topic (ms),
    and when the reader had it (µs)."""

    ts_us: int
    appended_ms: int
    read_us: int


def read_committed(
    bootstrap: str, topic: str, partitions: int, stop: threading.Event, since_us: int
) -> list[Read]:
    """Every record of ``topic`` stamped since ``since_us``, as it became readable."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"latency-reader-{since_us}",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "fetch.wait.max.ms": 10,
        }
    )
    # assigned, not subscribed: no group join delays the first records
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    reads: list[Read] = []
    try:
        while not stop.is_set():
            # consume(n, timeout) returns only when n messages are buffered or the
            # timeout ends (confluent-kafka <= 2.12): at 10,000 records/s it would add
            # up to its whole timeout to every record. Block on the first message,
            # then take what is already buffered without waiting.
            first = consumer.poll(0.05)
            if first is None:
                continue
            messages = [first, *consumer.consume(10_000, timeout=0)]
            now = time.time_ns() // 1000
            for m in messages:
                if m.error() is None and (ts := orjson.loads(m.value())["ts"]) >= since_us:
                    kind, appended = m.timestamp()
                    assert kind == TIMESTAMP_LOG_APPEND_TIME, f"{topic}: not LogAppendTime"
                    reads.append(Read(ts, appended, now))
    finally:
        consumer.close()
    return reads
