"""Every compression codec Kafka has, on a real broker; a batch that cannot be decoded stops
its partition, reported, and is never skipped (issue 30).

The compressed batches are made by aiokafka's producer (one ``send_batch``
per batch, so each batch holds exactly the records a test put in it) and
stored by the broker as they came (topic default ``compression.type=producer``);
a topic with ``compression.type=zstd`` has the broker recompress what the
worker writes.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiokafka.codec
import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from privstream.errors import UndecodableBatchError
from privstream.kafka.decode import tolerate_undecodable_records
from privstream.worker.changelog import CHANGELOG_SUFFIX

from tests.integration.corrupting_proxy import CorruptingProxy
from tests.support.broker import LocalBroker, create_topics, local_broker
from tests.support.faults import Tail, fault_topics, free_port, poll_until, samples
from tests.support.http_get import http_get
from tests.support.ledger import (
    accounted_for,
    assert_ledger_obeyed,
    body,
    expected_reasons,
    outcome,
    produce_timed,
    record,
    running,
    seq,
    source,
)
from tests.support.worker_proc import (
    PRIVACY,
    WorkerProcess,
    read_all,
    unique_topics,
    write_config,
)

CODECS = (None, "gzip", "snappy", "lz4", "zstd")


def telemetry(i: int) -> bytes:
    return json.dumps(
        {"device_id": f"d{i}", "seq": i, "salary": 2000 + i, "state": "CA", "opted_in": True}
    ).encode()


async def send_batches(
    bootstrap: str, topic: str, batches: list[tuple[str | None, int, range]]
) -> None:
    """Each (codec, partition, seqs) as one record batch of that codec, in order."""
    producers = {
        codec: AIOKafkaProducer(bootstrap_servers=bootstrap, compression_type=codec)
        for codec in CODECS
    }
    for producer in producers.values():
        await producer.start()
    try:
        for codec, partition, seqs in batches:
            producer = producers[codec]
            batch = producer.create_batch()
            for i in seqs:
                assert batch.append(key=None, value=telemetry(i), timestamp=None) is not None
            batch.close()
            sent = await producer.send_batch(batch, topic, partition=partition)
            await sent
    finally:
        for producer in producers.values():
            await producer.stop()


async def undecodable_count(port: int, topic: str, partition: int) -> float:
    """The worker's failed reads of ``topic``/``partition`` (0 while it is not listening)."""
    try:
        status, text = await http_get(port, "/metrics")
    except OSError:
        return 0.0
    assert status == 200
    labels = (("partition", str(partition)), ("topic", topic))
    return samples(text).get(("privstream_undecodable_batches_total", labels), 0.0)


async def test_batches_of_every_codec_are_released_exactly_once(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    """gzip, snappy, lz4, zstd and plain batches mixed on 3 input partitions; the output
    topic recompresses to zstd: all 500 records released once, none dead-lettered."""
    kafka = unique_topics("codecs")
    await create_topics(kafka_bootstrap, [kafka["input_topic"]], partitions=3)
    await create_topics(kafka_bootstrap, [kafka["dead_letter_topic"]], partitions=1)
    await create_topics(
        kafka_bootstrap, [kafka["output_topic"]], 1, configs={"compression.type": "zstd"}
    )
    plan = [
        (codec, (r + k) % 3, range(25 * (5 * r + k), 25 * (5 * r + k + 1)))
        for r in range(4)
        for k, codec in enumerate(CODECS)
    ]
    await send_batches(kafka_bootstrap, kafka["input_topic"], plan)
    total = 25 * len(plan)
    config = write_config(tmp_path / "config.yaml", kafka_bootstrap, kafka, PRIVACY)
    worker = WorkerProcess(config, tmp_path / "worker.log")
    port = free_port()
    async with (
        Tail(kafka_bootstrap, kafka["output_topic"], identity=seq) as out,
        running(worker, port),
    ):
        await out.wait_distinct(total, within_s=120)
        assert await worker.terminate() == 0, worker.log_text()[-3000:]
    released = Counter(seq(r) for r in await read_all(kafka_bootstrap, kafka["output_topic"], 1))
    assert set(released) == set(range(total)) and set(released.values()) == {1}
    assert await read_all(kafka_bootstrap, kafka["dead_letter_topic"], 1) == []
    assert "cannot be decoded" not in worker.log_text()


async def test_a_batch_the_worker_cannot_decode_stops_its_partition_until_it_can(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    """A worker without lz4 (``codecless``) meets an lz4 batch at offsets 10-19 of
    partition 0: it releases 0-9 and partition 1, commits offset 10 and no further,
    counts and logs each retry, answers /readyz 503, and never restarts its session.
    A worker with every codec then releases the rest: each record exactly once."""
    kafka = unique_topics("codec-stop")
    raw = kafka["input_topic"]
    await create_topics(kafka_bootstrap, [raw], partitions=2)
    await create_topics(kafka_bootstrap, [kafka["output_topic"], kafka["dead_letter_topic"]], 1)
    await send_batches(
        kafka_bootstrap,
        raw,
        [
            (None, 0, range(0, 10)),
            ("lz4", 0, range(10, 20)),
            (None, 0, range(20, 30)),
            (None, 1, range(30, 60)),
        ],
    )
    config = write_config(tmp_path / "config.yaml", kafka_bootstrap, kafka, PRIVACY)
    before = WorkerProcess(config, tmp_path / "before.log", module="tests.support.codecless")
    port = free_port()
    async with Tail(kafka_bootstrap, kafka["output_topic"], identity=seq) as out:
        async with running(before, port):
            await out.wait_distinct(40, within_s=90)

            async def retried() -> bool:
                assert before.alive, before.log_text()[-3000:]
                return await undecodable_count(port, raw, 0) >= 2

            # a second failed read is the retry after RETRY_S (10 s): no crash, no loop
            await poll_until(retried, 60, "a retry of the stopped partition")
            assert await http_get(port, "/readyz") == (503, "not ready\n")
            assert await committed(kafka_bootstrap, kafka["group_id"], raw) == {0: 10, 1: 30}
            assert await before.terminate() == 0
        assert out.distinct == set(range(10)) | set(range(30, 60))
        log = before.log_text()
        stopped = f"{raw}/0: the record batch at offset 10 cannot be decoded (UnsupportedCodecError"
        assert any(" ERROR " in line and stopped in line for line in log.splitlines()), log[-3000:]
        assert "Kafka session ended" not in log

        after = WorkerProcess(config, tmp_path / "after.log")
        async with running(after, port):
            await out.wait_distinct(60, within_s=90)
            assert await http_get(port, "/readyz") == (200, "ready\n")
            assert await after.terminate() == 0
    released = Counter(seq(r) for r in await read_all(kafka_bootstrap, kafka["output_topic"], 1))
    assert set(released) == set(range(60)) and set(released.values()) == {1}
    assert await committed(kafka_bootstrap, kafka["group_id"], raw) == {0: 30, 1: 30}


@pytest.fixture
def proxied() -> Iterator[tuple[LocalBroker, int]]:
    """A broker of this test only whose worker listener advertises a proxy port."""
    proxy_port = free_port()
    with local_broker(advertised_port=proxy_port) as broker:
        yield broker, proxy_port


async def test_a_batch_corrupted_in_transit_stops_its_partition_until_it_reads_clean(
    proxied: tuple[LocalBroker, int], tmp_path: Path
) -> None:
    """One byte of the zstd batch at offsets 10-19 flipped in one Fetch response: the
    worker stops the partition at offset 10 (a bad CRC: counted once, an ERROR, /readyz
    503, nothing from 10 on released), reads it clean 10 s later and releases the rest,
    every record exactly once, without restarting its session."""
    broker, proxy_port = proxied
    assert broker.external_port is not None
    direct = broker.bootstrap
    kafka = unique_topics("codec-crc")
    raw = kafka["input_topic"]
    await create_topics(direct, [raw, kafka["output_topic"], kafka["dead_letter_topic"]], 1)
    port = free_port()
    config = write_config(tmp_path / "config.yaml", f"127.0.0.1:{proxy_port}", kafka, PRIVACY)
    worker = WorkerProcess(config, tmp_path / "worker.log")
    async with (
        CorruptingProxy(proxy_port, broker.external_port) as proxy,
        Tail(direct, kafka["output_topic"], identity=seq) as out,
        running(worker, port),
    ):
        await send_batches(direct, raw, [(None, 0, range(0, 10))])
        await out.wait_distinct(10, within_s=90)
        damaged = proxy.corrupt_next_fetch(raw, 0)
        await send_batches(direct, raw, [("zstd", 0, range(10, 20)), (None, 0, range(20, 30))])
        await asyncio.wait_for(damaged.wait(), 30)

        async def reported() -> bool:
            assert worker.alive, worker.log_text()[-3000:]
            return await undecodable_count(port, raw, 0) >= 1

        await poll_until(reported, 10, "the damaged batch reported")
        # within the 10 s pause: stopped right before the batch, and not ready
        assert await http_get(port, "/readyz") == (503, "not ready\n")
        assert out.distinct == set(range(10))
        await out.wait_distinct(30, within_s=60)

        async def ready() -> bool:
            return await http_get(port, "/readyz") == (200, "ready\n")

        await poll_until(ready, 10, "ready again once past the batch")
        assert await undecodable_count(port, raw, 0) == 1  # read clean at the first retry
        assert await worker.terminate() == 0
    released = Counter(seq(r) for r in await read_all(direct, kafka["output_topic"], 1))
    assert set(released) == set(range(30)) and set(released.values()) == {1}
    log = worker.log_text()
    stopped = f"{raw}/0: the record batch at offset 10 cannot be decoded (CorruptRecordException"
    assert any(" ERROR " in line and stopped in line for line in log.splitlines()), log[-3000:]
    assert "Kafka session ended" not in log


async def committed(bootstrap: str, group: str, topic: str) -> dict[int, int]:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        offsets = await admin.list_consumer_group_offsets(group)
    finally:
        await admin.close()
    return {tp.partition: meta.offset for tp, meta in offsets.items() if tp.topic == topic}


async def test_a_zstd_changelog_is_restored_across_a_restart(
    kafka_bootstrap: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The changelog has ``compression.type=zstd``: 30 subjects send 2 records to a first
    worker and 3 more to a second, which must restore the first's spending from zstd
    batches: each subject gets its cap of 3 released, never 5."""
    kafka = await fault_topics(kafka_bootstrap, "codec-ledger")
    changelog = kafka["input_topic"] + CHANGELOG_SUFFIX
    await create_topics(
        kafka_bootstrap,
        [changelog],
        4,
        configs={
            "cleanup.policy": "compact",
            "compression.type": "zstd",
            "message.timestamp.type": "LogAppendTime",  # what the worker's clock check needs
        },
    )
    config = write_config(tmp_path / "config.yaml", kafka_bootstrap, kafka, body())
    now = int(time.time() * 1000)
    port = free_port()
    sent = 0
    async with (
        Tail(kafka_bootstrap, kafka["output_topic"], identity=seq) as out,
        Tail(kafka_bootstrap, kafka["dead_letter_topic"], identity=source) as dead,
    ):
        for run, per_subject in enumerate((2, 3)):
            messages = [
                (*record(sent + 30 * k + s, f"s{s}"), None)
                for k in range(per_subject)
                for s in range(30)
            ]
            await produce_timed(kafka_bootstrap, kafka["input_topic"], messages)
            if run:
                await cannot_restore(config, tmp_path, port, changelog, out, dead, sent)
            sent += len(messages)
            worker = WorkerProcess(config, tmp_path / f"worker{run}.log")
            async with running(worker, port):
                await accounted_for(out, dead, sent, worker, within_s=120)
                assert await worker.terminate() == 0, worker.log_text()[-3000:]
    raw, released, letters = await outcome(kafka_bootstrap, kafka)
    expected = expected_reasons(raw, clock_ms=now)
    reasons = assert_ledger_obeyed(raw, released, letters, expected, f"{len(raw)} inputs")
    assert len(released) == 90 and reasons == {"budget_exhausted": 60}
    # the changelog really is zstd: a client without zstd cannot read it
    monkeypatch.setattr(aiokafka.codec, "cramjam", None)
    stop = await first_stop(kafka_bootstrap, changelog)
    assert stop.topic == changelog and stop.cause.startswith("UnsupportedCodecError")


async def cannot_restore(
    config: Path, tmp_path: Path, port: int, changelog: str, out: Tail, dead: Tail, done: int
) -> None:
    """A worker without zstd fails to restore: it reports the changelog batch, answers
    /readyz 503, releases nothing, and stops cleanly when told to."""
    worker = WorkerProcess(config, tmp_path / "codecless.log", module="tests.support.codecless")
    async with running(worker, port):

        async def reported() -> bool:
            assert worker.alive, worker.log_text()[-3000:]
            counts = [await undecodable_count(port, changelog, p) for p in range(4)]
            return sum(counts) >= 2  # a failed restore, and the next session's again

        await poll_until(reported, 60, "a failed restore reported twice")
        assert await http_get(port, "/readyz") == (503, "not ready\n")
        assert await worker.terminate() == 0
    assert len(out.distinct) + len(dead.distinct) == done  # nothing charged or released
    errors = [line for line in worker.log_text().splitlines() if " ERROR " in line]
    assert errors and all(f"{changelog}/" in line for line in errors), errors[:3]
    assert all("cannot be decoded (UnsupportedCodecError" in line for line in errors)
    assert all("restoring again in" in line for line in errors)


async def first_stop(bootstrap: str, topic: str) -> UndecodableBatchError:
    """What ``getmany`` raises reading ``topic`` from its start (it must raise)."""
    tolerate_undecodable_records()
    reader = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    await reader.start()
    try:
        tps = [TopicPartition(topic, p) for p in range(4)]
        reader.assign(tps)
        await reader.seek_to_beginning(*tps)

        async def read() -> Any:
            while True:
                await reader.getmany(timeout_ms=500)

        with pytest.raises(UndecodableBatchError) as raised:
            await asyncio.wait_for(read(), 30)
        return raised.value
    finally:
        await reader.stop()
