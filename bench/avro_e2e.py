"""The Avro scenario of ``bench/e2e.py --avro``: `privstream run` on Avro against a
confluent-kafka Avro pass-through, on one broker and one schema registry.

A 4-partition topic is pre-loaded with the reference record as Avro in the
Confluent wire format (``bench/avro_reference.py``, written by
``AvroSerializer``). Each contender drains all of it as a fresh consumer
group, exactly-once, timed by the offsets the group commits:

* ``librdkafka-avro`` (``bench/peer_avro.py``): ``AvroDeserializer``, drop the
  id, ``AvroSerializer``, ``produce`` per message, one transaction per batch;
* ``privstream-avro``: `privstream run` with ``kafka.format: avro``, so Avro
  output under the schema derived from the config (the default).

The contenders alternate, round after round, each keeping its best drain.
Target: privstream >= 1.0x the pass-through. The registry is the test
suite's (``tests/support/registry.py``: Apicurio, started locally), or
``SCHEMA_REGISTRY_URL``.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
import time
from pathlib import Path

from aiokafka import AIOKafkaConsumer

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.avro_reference import framed
from bench.kafka import Drain, Worker, broker, drain, new_topics, producer, write_config
from bench.reference import Targets, messages
from tests.support.registry import schema_registry

#: contender -> script in bench/, or None for `privstream run`
CONTENDERS: dict[str, str | None] = {"librdkafka-avro": "peer_avro.py", "privstream-avro": None}
TARGET = 1.0


async def preload_avro(bootstrap: str, url: str, topic: str, count: int) -> float:
    """Produce ``count`` reference records as framed Avro; records/s of the load."""
    started = time.perf_counter()
    client = producer(bootstrap)
    await client.start()
    try:
        for start in range(0, count, 20_000):
            batch = framed(
                url, topic, messages(min(20_000, count - start), seed=start, start=start)
            )
            await asyncio.gather(*[await client.send(topic, value) for value in batch])
    finally:
        await client.stop()
    return count / (time.perf_counter() - started)


async def scenario(
    bootstrap: str, url: str, raw: str, total: int, workdir: Path, name: str, contender: str
) -> Drain:
    topics = await new_topics(bootstrap, name)
    topics.raw = raw  # every scenario drains the same pre-loaded topic as a new group
    config = write_config(
        workdir / f"{name}.yaml",
        bootstrap,
        topics,
        max_batch_records=10_000,
        poll_timeout_ms=100,
        format="avro",
        schema_registry={"url": url},
    )
    worker = Worker(config, workdir, name, passthrough=False, script=CONTENDERS[contender])
    try:
        result = await drain(bootstrap, topics.group, total, [worker], within_s=1800)
    finally:
        worker.stop()
    # a drain counts committed offsets: every record must have come out, as Avro
    written, dead = (
        await messages_in(bootstrap, topics.out),
        await messages_in(bootstrap, topics.dlq),
    )
    if (written, dead) != (total, 0):
        raise RuntimeError(f"{name}: {written:,} outputs and {dead:,} dead letters of {total:,}")
    return result


async def messages_in(bootstrap: str, topic: str) -> int:
    """Committed messages of ``topic`` in the Confluent wire format (magic byte 0)."""
    consumer = AIOKafkaConsumer(
        topic,
        bootstrap_servers=bootstrap,
        isolation_level="read_committed",
        auto_offset_reset="earliest",
        enable_auto_commit=False,
    )
    await consumer.start()
    try:
        count = 0
        while batch := await consumer.getmany(timeout_ms=2000, max_records=50_000):
            count += sum(r.value[:1] == b"\x00" for rs in batch.values() for r in rs)
        return count
    finally:
        await consumer.stop()


async def run_avro(total: int, rounds: int) -> int:
    best: dict[str, Drain] = {}
    with (
        broker() as bootstrap,
        schema_registry() as registry,
        tempfile.TemporaryDirectory(prefix="privstream-bench-avro-") as tmp,
    ):
        workdir = Path(tmp)
        topics = await new_topics(bootstrap, "e2e-avro")
        rate = await preload_avro(bootstrap, registry.url, topics.raw, total)
        print(f"pre-loaded {total:,} Avro records into 4 partitions ({rate:,.0f} records/s)")
        names = list(CONTENDERS)
        await scenario(bootstrap, registry.url, topics.raw, total, workdir, "warm-up", names[0])
        for round_ in range(rounds):
            shift = round_ % len(names)
            for name in names[shift:] + names[:shift]:
                result = await scenario(
                    bootstrap, registry.url, topics.raw, total, workdir, f"{name}-{round_}", name
                )
                per_100k = result.cpu_s / max(result.records, 1) * 100_000
                print(f"{name:16} {result.rate:10,.0f} records/s {per_100k:6.2f} CPU s/100k")
                if name not in best or result.rate > best[name].rate:
                    best[name] = result
    mine, peer = best["privstream-avro"], best["librdkafka-avro"]
    print("\nbest of each: records/s, CPU s per 100,000 records")
    for name, result in best.items():
        print(f"{name:16} {result.rate:10,.0f} {result.cpu_s / result.records * 100_000:6.2f}")
    targets = Targets()
    targets.check("privstream-avro / librdkafka-avro", mine.rate / peer.rate, TARGET)
    return targets.report()
