"""The worker loop around a partition stopped at a batch that cannot be decoded (issue 30):
the records before it are committed, the partition is paused, readiness is off until a
commit moves past the batch, and the session goes on."""

from __future__ import annotations

import asyncio
from typing import Any

from aiokafka import ConsumerRecord, TopicPartition
from privstream.errors import UndecodableBatchError
from privstream.metrics import Metrics
from privstream.worker.generation_fence import Member
from privstream.worker.http import Health
from prometheus_client import CollectorRegistry

from tests.unit.worker.test_pipeline import TP, ScriptedConsumer, TransactionalProducer
from tests.unit.worker.test_units import batch, sender_for, worker


class StoppingConsumer(ScriptedConsumer):
    """A scripted consumer whose second poll raises a stop at ``offset`` 102, as aiokafka's
    fetcher does (``privstream.kafka.decode``); it records pauses and readiness seen."""

    def __init__(self, batches: list[list[ConsumerRecord[bytes, bytes]]], stop: asyncio.Event):
        super().__init__(batches, stop)
        self.polls = 0
        self.paused_tps: set[TopicPartition] = set()
        self.on_poll: Any = None

    async def getmany(
        self, timeout_ms: int, **kw: Any
    ) -> dict[TopicPartition, list[ConsumerRecord[bytes, bytes]]]:
        if self.on_poll is not None:
            self.on_poll()
        self.polls += 1
        if self.polls == 2:  # the first poll's top-up
            raise UndecodableBatchError("raw", 0, 102, ValueError("lz4: truncated frame"))
        return await super().getmany(timeout_ms, **kw)

    def assignment(self) -> set[TopicPartition]:
        return {TP}

    def paused(self) -> set[TopicPartition]:
        return set(self.paused_tps)

    def pause(self, tp: TopicPartition) -> None:
        self.paused_tps.add(tp)


async def test_a_stopped_partition_is_paused_not_ready_and_ready_once_committed_past() -> None:
    metrics, health = Metrics(CollectorRegistry()), Health()
    w, stop, producer = (
        worker(metrics=metrics, health=health),
        asyncio.Event(),
        TransactionalProducer(),
    )
    producer.release.set()
    w.assignment.assigned = {TP}
    w.assignment.member = Member(1, "test-member")  # as an assignment sets it
    consumer = StoppingConsumer([batch([1.0, 2.0], start=100), batch([3.0], start=102)], stop)
    readiness: list[bool] = []
    consumer.on_poll = lambda: readiness.append(health.ready)
    await asyncio.wait_for(
        w.pipeline(stop, consumer, producer, sender_for(producer)),  # type: ignore[arg-type]
        5,
    )
    assert consumer.paused_tps == {TP}
    assert (
        metrics.registry.get_sample_value(
            "privstream_undecodable_batches_total", {"topic": "raw", "partition": "0"}
        )
        == 1
    )
    # ready before the stop; not ready from the poll after it, until 102 committed
    assert readiness[:3] == [True, True, False]
    assert [line for line in producer.log if line.startswith("offsets")] == [
        "offsets 102",
        "offsets 103",
    ]
    assert health.ready
