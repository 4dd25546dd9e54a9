"""The changelog's numpy-built record batches on a real broker, through the worker's producer.

``LedgerStore.send_updates`` writes each partition's charge as whole record
batches (``privstream.worker.record_batch``) with the worker's own producer
options; ``kafka.max_message_bytes: 1024`` cuts them into many batches per
partition, so the broker checks the idempotent sequence numbers across them.
What a restore reads back (``read_committed``, the store's own restore) must be
the ledger that charged the committed transactions: an aborted transaction and
a fenced producer's add nothing, with ``transactions`` on and off.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Iterable

import numpy as np
import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.errors import KafkaError
from privstream.config import KafkaConfig
from privstream.config.runtime import Runtime
from privstream.errors import LedgerError
from privstream.ledger import SubjectLedger
from privstream.ledger.updates import Updates
from privstream.metrics import Metrics
from privstream.pipeline import BatchResult
from privstream.worker.changelog import stable_ends
from privstream.worker.clients import is_fenced, producer_options
from privstream.worker.ledger_store import LedgerStore, Verdict
from prometheus_client import CollectorRegistry

from tests.support.broker import create_topics
from tests.support.faults import poll_until
from tests.unit.ledger.test_charge import POLICY

PARTITIONS = 3
RUNTIME = Runtime(b"k" * 32, "changelog-batches", None)
#: subjects of many name lengths (a run is written grouped by length)
POOL = [b"s" * (i % 17) + b"-%d" % i for i in range(4_000)]


def kafka(bootstrap: str, *, transactions: bool) -> KafkaConfig:
    suffix = uuid.uuid4().hex[:8]
    return KafkaConfig(
        bootstrap_servers=bootstrap,
        input_topic=f"cb-in-{suffix}",
        output_topic=f"cb-out-{suffix}",
        dead_letter_topic=f"cb-dl-{suffix}",
        transactional_id_prefix=f"cb-{suffix}",
        max_message_bytes=1_024,
        transactions=transactions,
    )


def store_of(config: KafkaConfig) -> LedgerStore:
    return LedgerStore(
        ledger=SubjectLedger(policy=POLICY, deployment="tests"),
        topic=f"{config.input_topic}-privstream-ledger",
        kafka=config,
        runtime=RUNTIME,
        metrics=Metrics(CollectorRegistry()),
        subject_field="device_id",
    )


def charges(ledger: SubjectLedger, now: int, sizes: Iterable[int], seed: int) -> Verdict:
    """One charge per partition (``sizes[p]`` records), as ``LedgerStore.charge`` makes it."""
    rng = np.random.default_rng(seed)
    updates: dict[int, Updates] = {}
    for partition, size in enumerate(sizes):
        subjects = [POOL[i] for i in rng.integers(0, len(POOL), size)]
        ts = (now - rng.integers(0, 900, size)).tolist()
        charge = ledger.charge(
            partition, subjects=subjects, keys=subjects, timestamps_ms=ts, now_ms=now
        )
        updates[partition] = charge.updates
    return Verdict(result=BatchResult(), updates=updates)


async def assert_restored(config: KafkaConfig, ledger: SubjectLedger) -> None:
    """The worker's restore (read_committed, up to the end offsets) gives ``ledger``."""
    reader = store_of(config)
    try:
        reader.assigned(TopicPartition(config.input_topic, p) for p in range(PARTITIONS))
        await reader.ready(range(PARTITIONS))
        for p in range(PARTITIONS):
            assert reader.ledger.snapshot(p) == ledger.snapshot(p), f"partition {p}"
            assert reader.ledger.counts(p) == ledger.counts(p)
    finally:
        await reader.close()  # forgets the restored ledgers


async def started(config: KafkaConfig) -> AIOKafkaProducer:
    producer = AIOKafkaProducer(**producer_options(config, RUNTIME))
    await producer.start()
    return producer


async def test_a_restore_reads_the_committed_batches_and_nothing_aborted_or_fenced(
    kafka_bootstrap: str,
) -> None:
    config = kafka(kafka_bootstrap, transactions=True)
    store = store_of(config)
    await create_topics(kafka_bootstrap, [store.topic], partitions=PARTITIONS)
    ledger, elsewhere = (
        SubjectLedger(policy=POLICY, deployment="tests"),
        SubjectLedger(policy=POLICY, deployment="tests"),
    )
    producer = await started(config)
    try:
        # committed: a run of ~3000 (> 64 offsets per batch, many batches), then small ones
        await producer.begin_transaction()
        await store.send_updates(producer, charges(ledger, 50_000, [3_000, 40, 1], seed=1))
        await producer.commit_transaction()
        # aborted: what another ledger charged never reaches a read_committed restore
        await producer.begin_transaction()
        await store.send_updates(producer, charges(elsewhere, 50_000, [500, 500, 500], seed=2))
        await producer.abort_transaction()
        # committed: windows closed (tombstone runs) and new spending
        await producer.begin_transaction()
        rollover = charges(ledger, 53_000, [800, 0, 300], seed=3)
        assert any(value is None for _, value in rollover.updates[0])
        await store.send_updates(producer, rollover)
        await producer.commit_transaction()
    finally:
        await producer.stop()
    await assert_restored(config, ledger)

    # a fenced producer: its open transaction is aborted by the new one's start
    zombie = await started(config)
    await zombie.begin_transaction()
    await store.send_updates(zombie, charges(elsewhere, 60_000, [200, 200, 200], seed=4))
    successor = await started(config)  # same transactional id: fences the zombie
    try:
        with pytest.raises(KafkaError) as raised:
            await zombie.commit_transaction()
        assert is_fenced(raised.value), raised.value
    finally:
        await zombie.stop()
        await successor.stop()
    await assert_restored(config, ledger)


async def test_without_transactions_a_restore_reads_every_batch(kafka_bootstrap: str) -> None:
    config = kafka(kafka_bootstrap, transactions=False)
    store = store_of(config)
    await create_topics(kafka_bootstrap, [store.topic], partitions=PARTITIONS)
    ledger = SubjectLedger(policy=POLICY, deployment="tests")
    producer = await started(config)  # idempotent: sequence numbers checked by the broker
    try:
        await store.send_updates(producer, charges(ledger, 50_000, [2_000, 30, 700], seed=5))
        await store.send_updates(producer, charges(ledger, 53_000, [100, 900, 0], seed=6))
    finally:
        await producer.stop()
    await assert_restored(config, ledger)


@pytest.mark.parametrize("outcome", ["commit", "abort"])
async def test_a_restore_waits_for_a_transaction_still_open_on_the_changelog(
    kafka_bootstrap: str, caplog: pytest.LogCaptureFixture, outcome: str
) -> None:
    """The previous owner's last batch has written its charges and not yet its commit
    marker (here: not yet committed at all). A restore that read up to the last stable
    offset would finish without those charges while the consumed offsets may already
    show the batch committed: it must wait, then count them if they commit."""
    caplog.set_level(logging.INFO, logger="privstream.worker")
    config = kafka(kafka_bootstrap, transactions=True)
    store = store_of(config)
    await create_topics(kafka_bootstrap, [store.topic], partitions=PARTITIONS)
    committed, pending = (
        SubjectLedger(policy=POLICY, deployment="tests"),
        SubjectLedger(policy=POLICY, deployment="tests"),
    )
    producer = await started(config)
    restoring = store_of(config)
    ready: asyncio.Task[None] | None = None
    try:
        await producer.begin_transaction()
        await store.send_updates(producer, charges(committed, 50_000, [300, 20, 0], seed=7))
        await producer.commit_transaction()
        await producer.begin_transaction()
        batch = charges(pending if outcome == "abort" else committed, 51_000, [200, 0, 9], seed=8)
        await store.send_updates(producer, batch)
        restoring.assigned(TopicPartition(config.input_topic, p) for p in range(PARTITIONS))
        ready = asyncio.create_task(restoring.ready(range(PARTITIONS)))

        async def waiting() -> bool:
            return "waits for open transactions" in caplog.text

        await poll_until(waiting, 30, "the restore waiting for the open transaction")
        assert f"{store.topic}/0 (" in caplog.text
        assert not ready.done()
        await (
            producer.commit_transaction() if outcome == "commit" else producer.abort_transaction()
        )
        await asyncio.wait_for(ready, 30)
        for p in range(PARTITIONS):
            assert restoring.ledger.snapshot(p) == committed.snapshot(p), f"partition {p}"
            assert restoring.ledger.counts(p) == committed.counts(p)
    finally:
        await producer.stop()
        await restoring.close()
        if ready is not None:  # a restore closed early raises: the failure is above
            ready.cancel()
            with contextlib.suppress(asyncio.CancelledError, LedgerError):
                await ready


async def test_a_revoke_while_a_restore_waits_cancels_it_and_a_new_assignment_restores(
    kafka_bootstrap: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The restore waiting for an open transaction holds the changelog reader: a revoke
    must end it at once (not after the transaction), and the next assignment's restore
    must get the reader and count the transaction once it commits."""
    caplog.set_level(logging.INFO, logger="privstream.worker")
    config = kafka(kafka_bootstrap, transactions=True)
    store = store_of(config)
    await create_topics(kafka_bootstrap, [store.topic], partitions=PARTITIONS)
    committed = SubjectLedger(policy=POLICY, deployment="tests")
    producer = await started(config)
    restoring = store_of(config)
    tps = [TopicPartition(config.input_topic, p) for p in range(PARTITIONS)]
    try:
        await producer.begin_transaction()
        await store.send_updates(producer, charges(committed, 50_000, [0, 40, 7], seed=9))
        restoring.assigned(tps)
        first = asyncio.create_task(restoring.ready(range(PARTITIONS)))

        async def waiting() -> bool:
            return "waits for open transactions" in caplog.text

        await poll_until(waiting, 30, "the restore waiting for the open transaction")
        await asyncio.wait_for(restoring.revoked(tps), 5)  # not after the transaction
        with pytest.raises(LedgerError, match="not restored"):  # the caller voids its batch
            await asyncio.wait_for(first, 5)
        await producer.commit_transaction()
        restoring.assigned(tps)
        await asyncio.wait_for(restoring.ready(range(PARTITIONS)), 30)
        for p in range(PARTITIONS):
            assert restoring.ledger.snapshot(p) == committed.snapshot(p), f"partition {p}"
    finally:
        await producer.stop()
        await restoring.close()


async def test_a_transaction_open_past_the_wait_stops_the_restore_naming_its_start(
    kafka_bootstrap: str,
) -> None:
    """Past its deadline the wait is a LedgerError that names each partition still open
    and the offset its transaction starts at there (the abort's ``--start-offset``), and
    gives the command; once the transaction completes, the wait ends at the end."""
    config = kafka(kafka_bootstrap, transactions=True)
    store = store_of(config)
    await create_topics(kafka_bootstrap, [store.topic], partitions=PARTITIONS)
    producer = await started(config)
    readers = [
        AIOKafkaConsumer(bootstrap_servers=kafka_bootstrap, isolation_level=level)
        for level in ("read_committed", "read_uncommitted")
    ]
    tps = [TopicPartition(store.topic, p) for p in range(PARTITIONS)]
    try:
        for reader in readers:
            await reader.start()
        async with producer.transaction():
            await store.send_updates(
                producer,
                charges(
                    SubjectLedger(policy=POLICY, deployment="tests"), 50_000, [30, 0, 5], seed=3
                ),
            )
        starts = await readers[1].end_offsets(tps)  # where the next transaction begins
        pending = charges(
            SubjectLedger(policy=POLICY, deployment="tests"), 51_000, [0, 0, 8], seed=4
        )
        pending.updates = {2: pending.updates[2]}  # partitions 0 and 1 stay settled
        await producer.begin_transaction()
        await store.send_updates(producer, pending)
        with pytest.raises(LedgerError) as raised:
            await stable_ends(readers[0], readers[1], tps, within_s=0.5)
        message = str(raised.value)
        assert f"{store.topic}/2 ({starts[tps[2]]} < " in message
        assert "/0 (" not in message and "/1 (" not in message  # settled: not named
        assert f"abort --topic {store.topic} --partition <partition>" in message
        await producer.commit_transaction()
        ends = await stable_ends(readers[0], readers[1], tps, within_s=30)
        assert ends == await readers[1].end_offsets(tps)
    finally:
        await producer.stop()
        for reader in readers:
            await reader.stop()
