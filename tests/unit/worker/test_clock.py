"""The clock rules: no charge made more than ``max_future`` ahead of the broker's clock
is committed, and a replica whose clock is back within it charges again by itself.

The broker's clock is the append time of the changelog records (LogAppendTime);
the integration test (tests/integration/test_topics_and_clock.py) runs a replica
with a fast clock against a real broker.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from aiokafka import TopicPartition
from aiokafka.producer.message_accumulator import BatchBuilder
from aiokafka.structs import RecordMetadata
from privstream.errors import ClockAheadError, ConfigError
from privstream.pipeline import BatchResult
from privstream.worker.clock import ESTIMATE_SLACK_MS, OFFSET_ENV, BrokerClock

from tests.unit.worker.test_ledger_store import charge, record, store, subjects
from tests.unit.worker.test_units import SizeLimitedProducer, sender_for

MINUTE_MS = 60_000
DAY_MS = 86_400_000


def test_a_charge_within_the_bound_of_the_append_time_is_confirmed() -> None:
    clock = BrokerClock(bound_ms=5 * MINUTE_MS)
    clock.confirm(charged_ms=1_000_000 + 5 * MINUTE_MS, appended_ms=1_000_000)  # at the bound
    assert clock.ok and clock.ahead_ms == 5 * MINUTE_MS
    clock.confirm(charged_ms=1_000_000, appended_ms=1_000_050)  # behind: the usual case
    assert clock.ok and clock.ahead_ms == -50


def test_a_charge_past_the_bound_is_refused_and_says_how_far_and_what_to_fix() -> None:
    clock = BrokerClock(bound_ms=5 * MINUTE_MS)
    with pytest.raises(ClockAheadError) as refused:
        clock.confirm(charged_ms=1_000_000 + 30 * DAY_MS, appended_ms=1_000_000)
    text = str(refused.value)
    assert "2592000.0 s ahead" in text and "max_future (300.0 s)" in text and "NTP" in text
    assert not clock.ok


def test_the_first_batch_is_checked_after_its_append_only() -> None:
    """No broker time is known before the first append: ``check`` lets it through, and
    ``confirm`` (before its transaction commits) decides."""
    clock = BrokerClock(bound_ms=0)
    clock.check(now_ms=int(time.time() * 1000) + 30 * DAY_MS)  # nothing to compare with yet


def test_a_clock_that_jumps_ahead_mid_session_is_refused_before_it_charges() -> None:
    clock = BrokerClock(bound_ms=5 * MINUTE_MS)
    clock.confirm(charged_ms=1_000_000, appended_ms=1_000_000)
    # the estimate only shrinks as monotonic time passes: these hold whatever the machine
    clock.check(now_ms=1_000_000 + 5 * MINUTE_MS + ESTIMATE_SLACK_MS)
    with pytest.raises(ClockAheadError):
        clock.check(now_ms=1_000_000 + 30 * DAY_MS)
    assert not clock.ok


def test_a_replica_whose_clock_is_fixed_charges_again_without_any_reset() -> None:
    clock = BrokerClock(bound_ms=5 * MINUTE_MS)
    with pytest.raises(ClockAheadError):
        clock.confirm(charged_ms=1_000_000 + 30 * DAY_MS, appended_ms=1_000_000)
    with pytest.raises(ClockAheadError):  # still fast: refused before charging
        clock.check(now_ms=1_000_000 + 30 * DAY_MS)
    clock.check(now_ms=1_000_000)  # NTP stepped it back
    assert clock.ok


def test_the_fault_injection_shifts_the_clock_and_rejects_a_non_integer() -> None:
    shifted = BrokerClock.from_env(0, {OFFSET_ENV: str(30 * DAY_MS)})
    plain = BrokerClock.from_env(0, {})
    assert shifted.now_ms() - plain.now_ms() >= 30 * DAY_MS - 1_000
    with pytest.raises(ConfigError, match=OFFSET_ENV):
        BrokerClock.from_env(0, {OFFSET_ENV: "30d"})


class AppendTimeProducer(SizeLimitedProducer):
    """A producer whose changelog batches come back with the broker's append time (now)."""

    async def send_batch(self, batch: BatchBuilder, topic: str, *, partition: int) -> Any:
        await super().send_batch(batch, topic, partition=partition)
        future: asyncio.Future[RecordMetadata] = asyncio.get_running_loop().create_future()
        appended = int(time.time() * 1000)
        future.set_result(
            RecordMetadata(topic, partition, TopicPartition(topic, partition), 0, appended, 1, 0)
        )
        return future


async def test_a_fast_replicas_batch_never_reaches_its_outputs_and_the_gauge_says_how_far() -> None:
    s = store("drop")
    s.clock = BrokerClock(bound_ms=s.policy.max_future_ms, offset_ms=30 * DAY_MS)
    s.ledger.restore(0, [])
    records = [record(1, "a", "a")]
    verdict = charge(s, records, subjects(records, BatchResult(outputs=[b"{}"], output_index=[0])))
    producer = AppendTimeProducer(10_000)
    with pytest.raises(ClockAheadError):
        await s.send(producer, sender_for(producer), records, verdict)
    assert {topic for topic, _, _ in producer.sent} == {s.topic}  # no output was queued
    gauge = s._metrics.registry.get_sample_value("privstream_clock_ahead_seconds")
    assert gauge is not None and gauge > 30 * 86_400 - 60


async def test_a_replica_on_time_releases_its_batch() -> None:
    s = store("drop")
    s.ledger.restore(0, [])
    records = [record(1, "a", "a")]
    verdict = charge(s, records, subjects(records, BatchResult(outputs=[b"{}"], output_index=[0])))
    producer = AppendTimeProducer(10_000)
    await s.send(producer, sender_for(producer), records, verdict)
    assert ("out", b"{}") in {(topic, value) for topic, value, _ in producer.sent}
    assert s.clock.ok
