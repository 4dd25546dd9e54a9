"""The worker's pure parts, without a broker: poison isolation, replay noise, oversize messages.

The broker-facing behaviour (transactions, kills, rebalances, outages) is
tested against a real broker in tests/integration.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
from typing import Any

import pytest
from aiokafka import ConsumerRecord
from aiokafka.errors import MessageSizeTooLargeError
from prometheus_client import CollectorRegistry

from service.config import parse_config
from service.config.runtime import Runtime
from service.metrics import Metrics
from service.pipeline import build_plan
from service.pipeline.fields import RealHandler
from service.worker.http import Health
from service.worker.loop import Backoff, Worker
from service.worker.produce import BatchSender
from tests.unit._support import config_dict

FIELDS = [
    {"name": "seq", "kind": "public"},
    {"name": "x", "kind": "real", "bounds": [0, 10], "epsilon": 1.0},
]
POISON = 6.5  # the value the broken handler chokes on


def record(offset: int, value: bytes, partition: int = 0) -> ConsumerRecord[bytes, bytes]:
    return ConsumerRecord(
        topic="raw",
        partition=partition,
        offset=offset,
        timestamp=0,
        timestamp_type=0,
        key=None,
        value=value,
        checksum=None,
        serialized_key_size=0,
        serialized_value_size=len(value),
        headers=[],
    )


class BrokenHandler(RealHandler):
    """A handler with a bug: any batch holding POISON raises a non-Rejected error."""

    def release(self, values: Any, source: Any) -> list[Any]:
        if POISON in values:
            raise ZeroDivisionError("bug")
        return super().release(values, source)


def worker(broken: bool = False, secret: bytes = bytes(range(32))) -> Worker:
    config = parse_config(config_dict(FIELDS, epsilon=1.0))
    plan = build_plan(config)
    if broken:
        real = plan.handlers[1]
        assert isinstance(real, RealHandler)
        plan = dataclasses.replace(
            plan, handlers=(plan.handlers[0], BrokenHandler(real.name, real.mechanism))
        )
    return Worker(
        config.kafka,
        plan,
        Runtime(secret, "r0", None),
        metrics=Metrics(CollectorRegistry()),
        health=Health(),
    )


def batch(values: list[float], start: int = 100) -> list[ConsumerRecord[bytes, bytes]]:
    return [
        record(start + i, json.dumps({"seq": i, "x": v}).encode()) for i, v in enumerate(values)
    ]


def test_a_poison_record_is_dead_lettered_alone_and_the_rest_released_as_usual() -> None:
    records = batch([1.0, POISON, 3.0, 4.0])
    result = worker(broken=True)._sanitize(records)
    assert [d.index for d in result.dead_letters] == [1]
    assert result.dead_letters[0].reason == "internal_error"
    assert "ZeroDivisionError" in result.dead_letters[0].detail
    assert result.output_index == [0, 2, 3]
    # the survivors carry the same bytes a healthy batch without the poison gives them
    healthy = worker()._sanitize([records[0], records[2], records[3]])
    assert result.outputs == healthy.outputs


def test_replayed_records_get_identical_bytes_however_batched() -> None:
    records = batch([1.0, 2.0, 3.0, 4.0, 5.0])
    whole = worker()._sanitize(records).outputs
    split = worker()._sanitize(records[:2]).outputs + worker()._sanitize(records[2:]).outputs
    assert whole == split
    other_key = worker(secret=bytes(range(1, 33)))._sanitize(records).outputs
    assert other_key != whole


def test_the_same_value_at_another_offset_gets_other_noise() -> None:
    first = worker()._sanitize(batch([5.0] * 50, start=0)).outputs
    values = {json.loads(out)["x"] for out in first}
    assert len(values) > 40  # Laplace noise on a grid: collisions are rare (p < 1e-6 for 10)


def test_backoff_doubles_with_jitter_up_to_the_cap_and_resets() -> None:
    backoff = Backoff(initial_s=1.0, cap_s=8.0)
    delays = [backoff.next_delay() for _ in range(6)]
    for delay, nominal in zip(delays, [1, 2, 4, 8, 8, 8], strict=True):
        assert nominal / 2 <= delay <= nominal
    backoff.reset()
    assert backoff.next_delay() <= 1.0


class SizeLimitedProducer:
    """Stands in for the producer's size check only (send is awaited, returns a future)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.sent: list[tuple[str, bytes | None, list[tuple[str, bytes]]]] = []

    async def send(
        self, topic: str, value: bytes | None = None, key: bytes | None = None, headers: Any = None
    ) -> Any:
        if value is not None and len(value) > self.limit:
            raise MessageSizeTooLargeError()
        self.sent.append((topic, value, headers))
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        future.set_result(None)
        return future


@pytest.mark.parametrize("limit", [10, 10_000])
async def test_oversize_messages_never_block_the_batch(limit: int) -> None:
    w = worker()
    records = [*batch([1.0, 2.0]), record(7, b"x" * 100)]
    result = w._sanitize(records)
    producer = SizeLimitedProducer(limit)
    sender = BatchSender(producer, w._plan, "out", "dlq")  # type: ignore[arg-type]
    dead = await sender.send(records, result)
    topics = [topic for topic, _, _ in producer.sent]
    assert len(producer.sent) == 3  # every record accounted for, once
    if limit == 10_000:
        assert topics.count("out") == 2 and [d.reason for d in dead] == ["invalid_json"]
    else:
        # outputs over the limit became dead letters; raw copies over it went without value
        assert topics == ["dlq", "dlq", "dlq"]
        assert sorted(d.reason for d in dead) == [
            "invalid_json",
            "output_too_large",
            "output_too_large",
        ]
        assert [value for _, value, _ in producer.sent] == [b"", b"", b""]
        sources = sorted(dict(h)["privstream-source"] for _, _, h in producer.sent)
        assert sources == [b"raw/0/100", b"raw/0/101", b"raw/0/7"]
