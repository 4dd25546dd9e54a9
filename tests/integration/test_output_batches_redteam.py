"""Red team 15d: the sanitized topic's C-written record batches (``output_batch``,
``_records``) on a real broker, read back by three independent clients.

``BatchSender`` sends one transaction's outputs from 20 input partitions to 7 output
partitions with ``kafka.max_message_bytes: 2048`` (many batches a partition,
zero-length values, extra headers on some records), then an
aborted transaction. aiokafka, confluent-kafka (librdkafka, ``check.crcs``) and kcat
must each read exactly the committed records: every value on the partition its input
partition maps to, once, in input order, with no key and its own headers.
"""

from __future__ import annotations

import asyncio
import random
import shutil
import subprocess
import uuid

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRecord
from aiokafka.errors import KafkaError as AIOKafkaError
from confluent_kafka import Consumer, KafkaError
from privstream.config import KafkaConfig
from privstream.config.runtime import Runtime
from privstream.pipeline import BatchResult
from privstream.worker.clients import batch_bytes, is_fenced, producer_options
from privstream.worker.produce import BatchSender, Headers, output_headers

from tests.support.broker import create_topics
from tests.unit.worker.test_units import plan, record

INPUTS, OUTPUTS, COUNT = 20, 7, 600
RUNTIME = Runtime(b"k" * 32, "redteam15d", None)
#: (partition, value, key, headers) of one message, in a partition's offset order
Message = tuple[int, bytes, bytes | None, Headers]


def kafka(bootstrap: str) -> KafkaConfig:
    suffix = uuid.uuid4().hex[:8]
    return KafkaConfig(
        bootstrap_servers=bootstrap,
        input_topic=f"rt15d-in-{suffix}",
        output_topic=f"rt15d-out-{suffix}",
        dead_letter_topic=f"rt15d-dl-{suffix}",
        transactional_id_prefix=f"rt15d-{suffix}",
        max_message_bytes=2_048,
        transactions=True,
    )


def outputs(seed: int) -> tuple[list[ConsumerRecord[bytes, bytes]], BatchResult]:
    """COUNT inputs over INPUTS partitions, one printable output each (kcat prints them)."""
    rng = random.Random(seed)
    records = [record(i, b"{}", partition=rng.randrange(INPUTS)) for i in range(COUNT)]
    lengths = [0, 1, 62, 63, 64, 65, 127, 128, 300, 700]
    values = [
        bytes(rng.choice(b"abcdefgh") for _ in range(rng.choice(lengths))) for _ in range(COUNT)
    ]
    return records, BatchResult(outputs=values, output_index=list(range(COUNT)))


def expected(
    records: list[ConsumerRecord[bytes, bytes]],
    result: BatchResult,
    base: Headers,
    extra: dict[int, Headers],
) -> list[Message]:
    return [
        (records[i].partition % OUTPUTS, value, None, [*base, *extra.get(i, [])])
        for i, value in zip(result.output_index, result.outputs, strict=True)
    ]


def by_partition(messages: list[Message]) -> dict[int, list[Message]]:
    grouped: dict[int, list[Message]] = {}
    for message in messages:
        grouped.setdefault(message[0], []).append(message)
    return grouped


async def read_aiokafka(config: KafkaConfig, count: int) -> list[Message]:
    consumer = AIOKafkaConsumer(
        config.output_topic,
        bootstrap_servers=config.bootstrap_servers,
        auto_offset_reset="earliest",
        isolation_level="read_committed",
        enable_auto_commit=False,
    )
    await consumer.start()
    got: list[Message] = []
    try:
        while len(got) < count:
            batches = await consumer.getmany(timeout_ms=30_000)
            assert batches, f"aiokafka read {len(got)} of {count} messages in 30 s"
            for messages in batches.values():
                got += [(m.partition, m.value, m.key, list(m.headers)) for m in messages]
    finally:
        await consumer.stop()
    return got


def read_librdkafka(config: KafkaConfig, count: int) -> list[Message]:
    consumer = Consumer(
        {
            "bootstrap.servers": config.bootstrap_servers,
            "group.id": f"rt15d-{uuid.uuid4().hex}",
            "auto.offset.reset": "earliest",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "check.crcs": True,
        }
    )
    consumer.subscribe([config.output_topic])
    got: list[Message] = []
    try:
        while len(got) < count:
            message = consumer.poll(30)
            assert message is not None, f"librdkafka read {len(got)} of {count} in 30 s"
            error = message.error()
            assert error is None or error.code() == KafkaError._PARTITION_EOF, error
            if error is None:
                headers = [(k, v or b"") for k, v in message.headers() or []]
                got.append((message.partition(), message.value() or b"", message.key(), headers))
    finally:
        consumer.close()
    return got


def read_kcat(config: KafkaConfig) -> list[tuple[int, int, bytes, bytes]]:
    """(partition, key length, value, headers as kcat prints them) of every message."""
    kcat = shutil.which("kcat")
    assert kcat is not None, "kcat is installed on this machine (apt: kcat)"
    done = subprocess.run(
        [kcat, "-C", "-b", config.bootstrap_servers, "-t", config.output_topic, "-e", "-q",
         "-X", "isolation.level=read_committed", "-X", "check.crcs=true",
         "-f", "%p\t%K\t%s\t%h\n"],
        capture_output=True, timeout=120, check=True,
    )  # fmt: skip
    rows = []
    for line in done.stdout.splitlines():
        partition, key_length, value, headers = line.split(b"\t")
        rows.append((int(partition), int(key_length), value, headers))
    return rows


def kcat_headers(headers: Headers) -> bytes:
    return b",".join(k.encode() + b"=" + v for k, v in headers)


async def test_three_clients_read_each_committed_record_once_in_order_on_its_partition(
    kafka_bootstrap: str,
) -> None:
    config = kafka(kafka_bootstrap)
    await create_topics(kafka_bootstrap, [config.output_topic], partitions=OUTPUTS)
    await create_topics(kafka_bootstrap, [config.dead_letter_topic])
    producer = AIOKafkaProducer(**producer_options(config, RUNTIME))  # transactional
    await producer.start()
    sender = BatchSender(
        producer,
        plan(),
        config.output_topic,
        config.dead_letter_topic,
        max_message_bytes=config.max_message_bytes,
        batch_bytes=batch_bytes(config),
        transactional=True,
    )
    records, result = outputs(seed=1)
    extra = {i: [("privstream-ledger-counts", b'{"released":%d}' % i)] for i in range(0, COUNT, 37)}
    try:
        await producer.begin_transaction()
        dead = await sender.send(records, result, record_headers=extra)
        await producer.commit_transaction()
        aborted_records, aborted = outputs(seed=2)
        await producer.begin_transaction()
        await sender.send(aborted_records, aborted)
        await producer.abort_transaction()
    finally:
        await producer.stop()
    assert dead == []
    want = expected(records, result, output_headers(plan()), extra)

    got = await read_aiokafka(config, len(want))
    assert by_partition(got) == by_partition(want), "aiokafka"
    got = await asyncio.to_thread(read_librdkafka, config, len(want))
    assert by_partition(got) == by_partition(want), "librdkafka"
    rows = await asyncio.to_thread(read_kcat, config)
    assert sorted(rows, key=lambda r: r[0]) == [
        (p, -1, value, kcat_headers(headers))
        for p, value, _, headers in sorted(want, key=lambda m: m[0])
    ], "kcat"


async def test_a_fenced_senders_batches_never_reach_a_read_committed_reader(
    kafka_bootstrap: str,
) -> None:
    """The zombie's batches carry its old epoch: the successor's start aborts them, and
    the successor's own batches (new epoch, sequences from 0) are all a reader sees."""
    config = kafka(kafka_bootstrap)
    await create_topics(kafka_bootstrap, [config.output_topic], partitions=OUTPUTS)
    await create_topics(kafka_bootstrap, [config.dead_letter_topic])

    def sender_of(producer: AIOKafkaProducer) -> BatchSender:
        return BatchSender(
            producer,
            plan(),
            config.output_topic,
            config.dead_letter_topic,
            max_message_bytes=config.max_message_bytes,
            batch_bytes=batch_bytes(config),
            transactional=True,
        )

    zombie = AIOKafkaProducer(**producer_options(config, RUNTIME))
    await zombie.start()
    successor = AIOKafkaProducer(**producer_options(config, RUNTIME))
    records, result = outputs(seed=4)
    try:
        await zombie.begin_transaction()
        await sender_of(zombie).send(*outputs(seed=3))  # flushed, not committed
        await successor.start()  # same transactional id: fences the zombie
        with pytest.raises(AIOKafkaError) as raised:
            await zombie.commit_transaction()
        assert is_fenced(raised.value), raised.value
        await successor.begin_transaction()
        assert await sender_of(successor).send(records, result) == []
        await successor.commit_transaction()
    finally:
        await zombie.stop()
        await successor.stop()
    want = expected(records, result, output_headers(plan()), {})
    got = await asyncio.to_thread(read_librdkafka, config, len(want))
    assert by_partition(got) == by_partition(want)
    rows = await asyncio.to_thread(read_kcat, config)
    assert len(rows) == len(want), "kcat read more than the successor's records"


async def test_records_over_the_batch_size_go_alone_between_full_batches(
    kafka_bootstrap: str,
) -> None:
    """``max_message_bytes`` 3 MiB (the topic's too) over the 1 MiB batch bound: records
    of 1-2.5 MiB go in batches of their own, in order, between batches of small ones."""
    limit = 3 << 20
    config = kafka(kafka_bootstrap).model_copy(update={"max_message_bytes": limit})
    await create_topics(
        kafka_bootstrap,
        [config.output_topic],
        partitions=2,
        configs={"max.message.bytes": str(limit)},
    )
    await create_topics(kafka_bootstrap, [config.dead_letter_topic])
    rng = random.Random(5)
    sizes = [10, 300_000, 1_500_000, 20, 2_600_000, 700_000, 700_000, 0, 1 << 20, 5]
    values = [bytes(rng.choice(b"xyz") for _ in range(8)) * (n // 8) for n in sizes * 2]
    records = [record(i, b"{}", partition=i % 2) for i in range(len(values))]
    result = BatchResult(outputs=values, output_index=list(range(len(values))))
    producer = AIOKafkaProducer(**producer_options(config, RUNTIME))
    await producer.start()
    try:
        await producer.begin_transaction()
        sender = BatchSender(
            producer,
            plan(),
            config.output_topic,
            config.dead_letter_topic,
            max_message_bytes=limit,
            batch_bytes=batch_bytes(config),
            transactional=True,
        )
        assert await sender.send(records, result) == []
        await producer.commit_transaction()
    finally:
        await producer.stop()
    want = expected(records, result, output_headers(plan()), {})
    got = await asyncio.to_thread(read_librdkafka, config, len(want))
    assert by_partition(got) == by_partition(want)


async def test_without_transactions_the_idempotent_batches_read_back_alike(
    kafka_bootstrap: str,
) -> None:
    """``transactions: false``: no transactional bit, the producer id and sequences of
    an idempotent producer (two sends: sequences continue across them)."""
    config = kafka(kafka_bootstrap).model_copy(update={"transactions": False})
    await create_topics(kafka_bootstrap, [config.output_topic], partitions=OUTPUTS)
    await create_topics(kafka_bootstrap, [config.dead_letter_topic])
    producer = AIOKafkaProducer(**producer_options(config, RUNTIME))
    await producer.start()
    sender = BatchSender(
        producer,
        plan(),
        config.output_topic,
        config.dead_letter_topic,
        max_message_bytes=config.max_message_bytes,
        batch_bytes=batch_bytes(config),
        transactional=False,
    )
    want: list[Message] = []
    try:
        for seed in (6, 7):
            records, result = outputs(seed)
            assert await sender.send(records, result) == []
            want += expected(records, result, output_headers(plan()), {})
    finally:
        await producer.stop()
    got = await asyncio.to_thread(read_librdkafka, config, len(want))
    assert by_partition(got) == by_partition(want)
    rows = await asyncio.to_thread(read_kcat, config)
    assert [(p, v) for p, _, v, _ in sorted(rows, key=lambda r: r[0])] == [
        (p, v) for p, v, _, _ in sorted(want, key=lambda m: m[0])
    ]
