"""Red team 15b, F5: the aggregate stream's ``LedgerGate`` loses decision rows committed
while it reads, on a real broker.

``LedgerGate.refresh`` takes the changelog's stable end, then fetches from where it read
up to that end; ``_read_to`` folds only the fetched rows below the end but moves its
``_read`` mark to the consumer's position, past every row the fetch returned. A record
path that commits another batch between the two (it commits continuously under load)
has its rows fetched, dropped, and never read again: those contributions were admitted
and charged, and every record of them is left out of its window for good (a subject
charged for a window it never enters; aggregates that undercount under load).

The interleaving is made deterministic, not timed: the test's ``stable_ends`` is the
real one, after which one more transaction commits (and its marker lands) before the
gate fetches.
"""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from privstream.config import load_config
from privstream.config.runtime import Runtime
from privstream.ledger import codec
from privstream.worker import aggregate_ledger

from tests.support import aggregate_stream as agg
from tests.support.broker import create_topics
from tests.support.faults import poll_until
from tests.support.worker_proc import unique_topics, write_config

DAY = 86_400_000


def _decision(subject: bytes) -> tuple[bytes, bytes]:
    key = codec.decision_prefix((0, DAY), 0, b"f" * 32) + subject
    return key, codec.encode_decision(DAY, True)


async def _settled(bootstrap: str, tp: TopicPartition) -> bool:
    """No transaction open on ``tp``: its last stable offset is its high watermark."""
    ends = []
    for isolation in ("read_committed", "read_uncommitted"):
        reader = AIOKafkaConsumer(bootstrap_servers=bootstrap, isolation_level=isolation)
        await reader.start()
        try:
            ends.append((await reader.end_offsets([tp]))[tp])
        finally:
            await reader.stop()
    return ends[0] == ends[1]


async def test_a_decision_committed_during_a_refresh_is_read_by_the_next(
    kafka_bootstrap: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    kafka = unique_topics("rt15b")
    changelog = f"{kafka['input_topic']}-privstream-ledger"
    await create_topics(kafka_bootstrap, [kafka["input_topic"], changelog], partitions=1)
    ledger = {"window": "1d", "epsilon": 5.0}
    body = {
        "privacy": {"epsilon": 10.0, "delta": 1e-6, "subject": "user", "ledger": ledger},
        "fields": agg.FIELDS,
    }
    config = load_config(
        write_config(tmp_path / "c.yaml", kafka_bootstrap, {**kafka, "transactions": True}, body)
    )
    runtime = Runtime(noise_secret=b"k" * 32, replica_id="rt15b", credentials=None)
    tp = TopicPartition(changelog, 0)
    producer = AIOKafkaProducer(
        bootstrap_servers=kafka_bootstrap, transactional_id=f"{kafka['group_id']}.writer"
    )
    await producer.start()

    async def commit(subject: bytes) -> None:
        key, value = _decision(subject)
        async with producer.transaction():
            await producer.send_and_wait(changelog, value, key=key, partition=0)
        await poll_until(lambda: _settled(kafka_bootstrap, tp), 30, "the marker landed")

    real = aggregate_ledger.stable_ends
    racing = [b"second"]

    async def stable_ends_then_a_commit(*args, **kwargs):  # type: ignore[no-untyped-def]
        ends = await real(*args, **kwargs)
        while racing:  # the record path commits its next batch meanwhile
            await commit(racing.pop())
        return ends

    kafka_config = config.needs_kafka("run")
    gate = aggregate_ledger.LedgerGate(config, kafka_config, runtime, [])
    try:
        async with asyncio.timeout(120):
            async with contextlib.AsyncExitStack() as stack:
                await gate.start(stack)
                await commit(b"first")
                monkeypatch.setattr(aggregate_ledger, "stable_ends", stable_ends_then_a_commit)
                await gate.refresh([0])
                await gate.refresh([0])  # nothing races now: reads up to the end again
                held = gate._decisions[0]
                found = {s: held.get(0, _decision(s)[0]) for s in (b"first", b"second")}
    finally:
        await producer.stop()
    assert found == {b"first": True, b"second": True}, (
        f"decisions read after two refreshes: {found} (gate read up to {gate._read})"
    )
