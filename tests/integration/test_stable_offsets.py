"""Committed offsets read with ``require_stable`` on a real broker (KIP-447).

A transaction's consumed offsets are pending at the group coordinator until
its commit marker lands. aiokafka's own fetch answers with the offset from
before; ``stable_committed`` must wait the pending commit out and answer with
the offset it commits (or the old one if it aborts), and a worker taking over
a partition must start there, not one batch early.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from pathlib import Path

import pytest
from aiokafka import AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.structs import OffsetAndMetadata
from privstream.worker.stable_offsets import stable_committed

from tests.support.broker import create_topics
from tests.support.faults import group_assignment, poll_until
from tests.support.worker_proc import (
    PRIVACY,
    WorkerProcess,
    decode,
    produce,
    read_all,
    unique_topics,
    write_config,
)


async def test_a_pending_commit_is_waited_for_and_an_absent_one_is_none(
    kafka_bootstrap: str,
) -> None:
    suffix = uuid.uuid4().hex[:8]
    topic, group = f"so-in-{suffix}", f"so-group-{suffix}"
    await create_topics(kafka_bootstrap, [topic], partitions=2)
    tps = [TopicPartition(topic, 0), TopicPartition(topic, 1)]
    admin = AIOKafkaAdminClient(bootstrap_servers=kafka_bootstrap)
    producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap, transactional_id=f"so-{suffix}")
    await admin.start()
    await producer.start()
    try:
        async with producer.transaction():
            await producer.send_offsets_to_transaction({tps[0]: 5}, group)
        assert await stable_committed(admin, group, tps, within_s=30) == {tps[0]: 5, tps[1]: None}

        for outcome, expected in (("commit", 9), ("abort", 9)):
            await producer.begin_transaction()
            await producer.send_offsets_to_transaction(
                {tps[0]: 9 if outcome == "commit" else 12}, group
            )
            # pending: aiokafka's own reading still answers with the offset from before
            before = await admin.list_consumer_group_offsets(group, partitions=[tps[0]])
            assert before[tps[0]] == OffsetAndMetadata(5 if outcome == "commit" else 9, "")
            with pytest.raises(TimeoutError):  # the transaction stays open meanwhile
                await stable_committed(admin, group, tps, within_s=0.5)
            waiting = asyncio.create_task(stable_committed(admin, group, tps, within_s=30))
            if outcome == "commit":
                await producer.commit_transaction()
            else:
                await producer.abort_transaction()
            assert await waiting == {tps[0]: expected, tps[1]: None}
    finally:
        await producer.stop()
        await admin.close()


async def test_a_worker_starts_where_the_previous_owners_pending_commit_lands(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    """The previous owner committed offset 5, then a transaction consuming up to 12 whose
    commit has not landed when the worker is assigned the partition. Starting at 5 would
    release records 5-11 a second time; the worker must wait and start at 12."""
    kafka = unique_topics("stable")
    tp = TopicPartition(kafka["input_topic"], 0)
    await create_topics(kafka_bootstrap, [kafka["input_topic"]], partitions=1)
    await create_topics(kafka_bootstrap, [kafka["output_topic"], kafka["dead_letter_topic"]], 1)
    record = {"device_id": "d", "salary": 2000.0, "state": "TX", "opted_in": True}
    raw = [(None, json.dumps({**record, "seq": seq}).encode(), []) for seq in range(20)]
    await produce(kafka_bootstrap, kafka["input_topic"], raw)
    previous = AIOKafkaProducer(
        bootstrap_servers=kafka_bootstrap, transactional_id=f"{kafka['group_id']}-previous"
    )
    await previous.start()
    worker = WorkerProcess(
        write_config(tmp_path / "config.yaml", kafka_bootstrap, kafka, PRIVACY),
        tmp_path / "worker.log",
    )
    try:
        async with previous.transaction():
            await previous.send_offsets_to_transaction({tp: 5}, kafka["group_id"])
        await previous.begin_transaction()
        await previous.send_offsets_to_transaction({tp: 12}, kafka["group_id"])
        await worker.start()

        async def assigned() -> bool:
            state, shares = await group_assignment(kafka_bootstrap, kafka["group_id"])
            return state == "Stable" and shares == [[0]]

        await poll_until(assigned, 60, "the worker assigned partition 0", why=worker.log_text)
        await previous.commit_transaction()

        async def drained() -> bool:
            return await stable_committed_offset(kafka_bootstrap, kafka["group_id"], tp) == 20

        await poll_until(drained, 60, "the worker through offset 20", why=worker.log_text)
        released = [
            r["seq"] for r in decode(await read_all(kafka_bootstrap, kafka["output_topic"], 1))
        ]
        assert released == list(range(12, 20)), worker.log_text()[-3000:]
    finally:
        await previous.stop()
        assert await worker.terminate() == 0, worker.log_text()


async def stable_committed_offset(bootstrap: str, group: str, tp: TopicPartition) -> int | None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        return (await stable_committed(admin, group, [tp], within_s=30))[tp]
    finally:
        await admin.close()
