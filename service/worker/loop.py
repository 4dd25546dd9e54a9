"""The consume -> sanitize -> produce loop: a thin shell around ``process_batch``.

Delivery (this version): at-least-once. A batch's sanitized and dead-letter
messages are produced and acknowledged (acks=all, idempotent producer)
before the consumed offsets are committed. A crash between the two replays
the batch; transactions and replay-stable noise are the exactly-once issue.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRecord, TopicPartition

from service.config import KafkaConfig
from service.mechanisms import NoiseSource
from service.metrics import Metrics
from service.pipeline import BatchResult, RecordPlan, process_batch
from service.worker.http import Health

log = logging.getLogger("privstream.worker")

Headers = list[tuple[str, bytes]]


def output_headers(plan: RecordPlan) -> Headers:
    """Headers of every sanitized message: the config hash and the record's guarantee."""
    return [
        ("privstream-config-sha256", plan.config_sha256.encode()),
        ("privstream-epsilon", repr(plan.epsilon).encode()),
        ("privstream-delta", repr(plan.delta).encode()),
    ]


def dead_letter_headers(record: ConsumerRecord, reason: str, detail: str) -> Headers:
    """The raw record's own headers plus why and where it failed."""
    own: Headers = list(record.headers or ())
    return [
        *own,
        ("privstream-reason", reason.encode()),
        ("privstream-detail", detail.encode()),
        ("privstream-source", f"{record.topic}/{record.partition}/{record.offset}".encode()),
    ]


class Worker:
    """Owns the Kafka clients; everything else is delegated."""

    def __init__(
        self,
        kafka: KafkaConfig,
        plan: RecordPlan,
        *,
        source: NoiseSource,
        metrics: Metrics,
        health: Health,
    ) -> None:
        self._kafka = kafka
        self._plan = plan
        self._source = source
        self._metrics = metrics
        self._health = health
        self._headers = output_headers(plan)
        self._consumer = AIOKafkaConsumer(
            kafka.input_topic,
            bootstrap_servers=kafka.bootstrap_servers,
            client_id=kafka.client_id,
            group_id=kafka.group_id,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            isolation_level="read_committed",
        )
        self._producer = AIOKafkaProducer(
            bootstrap_servers=kafka.bootstrap_servers,
            client_id=kafka.client_id,
            acks="all",
            enable_idempotence=True,
            linger_ms=5,
        )

    async def run(self, stop: asyncio.Event) -> None:
        """Process batches until ``stop`` is set; the batch in flight is finished first."""
        await self._producer.start()
        try:
            await self._consumer.start()
            try:
                self._set_connected(True)
                log.info("consuming %s as group %s", self._kafka.input_topic, self._kafka.group_id)
                while not stop.is_set():
                    batches = await self._consumer.getmany(
                        timeout_ms=self._kafka.poll_timeout_ms,
                        max_records=self._kafka.max_batch_records,
                    )
                    if batches:  # an empty poll is normal: nothing to produce or commit
                        await self._handle(batches)
            finally:
                self._set_connected(False)
                await self._consumer.stop()
        finally:
            await self._producer.stop()

    def _set_connected(self, up: bool) -> None:
        self._health.ready = up
        self._metrics.broker_connected.set(1 if up else 0)

    async def _handle(self, batches: dict[TopicPartition, list[ConsumerRecord]]) -> None:
        started = time.perf_counter()
        records = [record for partition in batches.values() for record in partition]
        result = process_batch(self._plan, [r.value or b"" for r in records], self._source)
        await self._produce(records, result)
        await self._consumer.commit({tp: msgs[-1].offset + 1 for tp, msgs in batches.items()})
        self._observe(len(records), result, time.perf_counter() - started)

    async def _produce(self, records: Sequence[ConsumerRecord], result: BatchResult) -> None:
        topic, headers = self._kafka.output_topic, self._headers
        # no key: raw keys are usually user ids and never reach the sanitized topic
        pending = [
            await self._producer.send(topic, value=value, headers=headers)
            for value in result.outputs
        ]
        for dead in result.dead_letters:
            raw = records[dead.index]
            pending.append(
                await self._producer.send(
                    self._kafka.dead_letter_topic,
                    value=raw.value,
                    key=raw.key,
                    headers=dead_letter_headers(raw, dead.reason, dead.detail),
                )
            )
        await asyncio.gather(*pending)

    def _observe(self, count: int, result: BatchResult, seconds: float) -> None:
        m = self._metrics
        m.records_in.inc(count)
        m.records_out.inc(len(result.outputs))
        for dead in result.dead_letters:
            m.dead_lettered.labels(dead.reason).inc()
        m.batch_records.observe(count)
        m.batch_seconds.observe(seconds)
