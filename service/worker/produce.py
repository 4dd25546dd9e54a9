"""What one processed batch turns into on the broker: sanitized messages and dead letters.

Pure except for ``send``: given the raw records and ``process_batch``'s
result, queue every output on the producer. A message the producer refuses
as too large never blocks its partition: a sanitized record that is too
large becomes a dead letter, a dead letter that is too large goes out
without its raw value (the source header says where to find it).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from aiokafka import AIOKafkaProducer, ConsumerRecord
from aiokafka.errors import MessageSizeTooLargeError

from service.pipeline import BatchResult, RecordPlan
from service.pipeline.results import DeadLetter

Headers = list[tuple[str, bytes]]


def output_headers(plan: RecordPlan) -> Headers:
    """Headers of every sanitized message: the config hash and the record's guarantee."""
    return [
        ("privstream-config-sha256", plan.config_sha256.encode()),
        ("privstream-epsilon", repr(plan.epsilon).encode()),
        ("privstream-delta", repr(plan.delta).encode()),
    ]


def source_of(record: ConsumerRecord) -> str:
    return f"{record.topic}/{record.partition}/{record.offset}"


def dead_letter_headers(record: ConsumerRecord, reason: str, detail: str) -> Headers:
    """The raw record's own headers plus why and where it failed."""
    own: Headers = list(record.headers or ())
    return [
        *own,
        ("privstream-reason", reason.encode()),
        ("privstream-detail", detail.encode()),
        ("privstream-source", source_of(record).encode()),
    ]


class BatchSender:
    """Queues a batch's messages on a producer and waits for their acknowledgements."""

    def __init__(
        self, producer: AIOKafkaProducer, plan: RecordPlan, output: str, dead_letter: str
    ) -> None:
        self._producer = producer
        self._headers = output_headers(plan)
        self._output = output
        self._dead_letter = dead_letter

    async def send(
        self, records: Sequence[ConsumerRecord], result: BatchResult
    ) -> list[DeadLetter]:
        """Send everything; returns the dead letters actually written (with oversize ones)."""
        pending: list[asyncio.Future[object]] = []
        dead = list(result.dead_letters)
        for index, value in zip(result.output_index, result.outputs, strict=True):
            try:
                # no key: raw keys are usually user ids and never reach the sanitized topic
                pending.append(
                    await self._producer.send(self._output, value=value, headers=self._headers)
                )
            except MessageSizeTooLargeError:
                detail = (
                    f"sanitized record of {len(value)} bytes exceeds "
                    "kafka.max_message_bytes; raise it (and the topic's max.message.bytes)"
                )
                dead.append(DeadLetter(index, "output_too_large", detail))
        pending.extend([await self._dead_letter_send(records[d.index], d) for d in dead])
        await asyncio.gather(*pending)
        return dead

    async def _dead_letter_send(
        self, raw: ConsumerRecord, letter: DeadLetter
    ) -> asyncio.Future[object]:
        """The raw record as a dead letter; what is too large is left at the source.

        Tried in turn: the whole record; without its value; without its value,
        key and raw headers (those may be what is too large). The
        ``privstream-source`` header always says where the raw record is.
        """
        note = f"{letter.detail}; raw record too large to copy here, read it at the source"
        full = dead_letter_headers(raw, letter.reason, letter.detail)
        short = dead_letter_headers(raw, letter.reason, note)
        attempts = [(raw.value, raw.key, full), (b"", raw.key, short), (b"", None, short[-3:])]
        for value, key, headers in attempts[:-1]:
            try:
                future: asyncio.Future[object] = await self._producer.send(
                    self._dead_letter, value=value, key=key, headers=headers
                )
            except MessageSizeTooLargeError:
                continue
            return future
        value, key, headers = attempts[-1]
        last: asyncio.Future[object] = await self._producer.send(
            self._dead_letter, value=value, key=key, headers=headers
        )
        return last
