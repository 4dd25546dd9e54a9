"""The batch poll: a batch far from full takes one short second poll, merged in order."""

from __future__ import annotations

from typing import Any

from aiokafka import ConsumerRecord, TopicPartition
from privstream.config import parse_config
from privstream.errors import UndecodableBatchError
from privstream.worker.fetch import TOP_UP_MS, poll

from tests.support.configs import config_dict, consumer_record

A, B = TopicPartition("raw", 0), TopicPartition("raw", 1)
Batches = dict[TopicPartition, list[ConsumerRecord[bytes, bytes]]]


def records(tp: TopicPartition, offsets: range, size: int = 10) -> list[ConsumerRecord[Any, Any]]:
    return [consumer_record(o, b"x" * size, None, partition=tp.partition) for o in offsets]


class Polls:
    """Answers each getmany with the next scripted response; records the calls."""

    def __init__(self, *responses: Batches | Exception, on_second: Any = None) -> None:
        self._responses = list(responses)
        self._on_second = on_second
        self.calls: list[tuple[int, int]] = []

    async def getmany(self, *, timeout_ms: int, max_records: int) -> Batches:
        self.calls.append((timeout_ms, max_records))
        if len(self.calls) == 2 and self._on_second is not None:
            self._on_second()
        answer = self._responses.pop(0) if self._responses else {}
        if isinstance(answer, Exception):
            raise answer
        return answer


def fail(exc: UndecodableBatchError) -> None:
    raise AssertionError(f"no partition stops here: {exc}")


def kafka(max_records: int = 100, max_bytes: int = 2**16) -> Any:
    data = config_dict([{"name": "x", "kind": "real", "bounds": [0, 1], "epsilon": 1.0}])
    data["kafka"].update(max_batch_records=max_records, max_batch_bytes=max_bytes)
    return parse_config(data).kafka


async def test_a_small_batch_is_topped_up_once_in_partition_order() -> None:
    consumer = Polls(
        {A: records(A, range(0, 3))}, {A: records(A, range(3, 5)), B: records(B, range(7, 8))}
    )
    batches, generation = await poll(consumer, kafka(), lambda: 4, fail)  # type: ignore[arg-type]
    assert {tp: [r.offset for r in msgs] for tp, msgs in batches.items()} == {
        A: [0, 1, 2, 3, 4],
        B: [7],
    }
    assert generation == 4
    assert consumer.calls[1] == (TOP_UP_MS, 97)  # room for the rest of the batch only


async def test_a_batch_half_full_by_records_or_bytes_or_empty_takes_no_second_poll() -> None:
    for first, config in (
        ({A: records(A, range(51))}, kafka(max_records=100)),
        ({A: records(A, range(3), size=2**15 // 3 + 1)}, kafka(max_bytes=2**16)),
        ({}, kafka()),
    ):
        consumer = Polls(first, {B: records(B, range(1))})
        batches, _ = await poll(consumer, config, lambda: 0, fail)  # type: ignore[arg-type]
        assert batches == first and len(consumer.calls) == 1


async def test_a_rebalance_during_the_second_poll_voids_the_first_polls_records_only() -> None:
    """The first poll's records belong to the old assignment: fetched again from the
    committed offsets, never released under the new one. The second poll's belong to the
    new one (aiokafka restarts it at the committed offset, 0 here) and its position is
    already past them: dropping them too would skip offsets 0-1 for good."""
    generation = [1]

    def rebalance() -> None:
        generation[0] += 2  # a revoke and an assignment

    consumer = Polls({A: records(A, range(3))}, {A: records(A, range(2))}, on_second=rebalance)
    batches, current = await poll(consumer, kafka(), lambda: generation[0], fail)  # type: ignore[arg-type]
    assert {tp: [r.offset for r in msgs] for tp, msgs in batches.items()} == {A: [0, 1]}
    assert current == 3


async def test_a_revoke_without_records_since_voids_the_batch() -> None:
    """The second poll timed out while the group rebalances: nothing is released."""
    generation = [1]

    def revoke() -> None:
        generation[0] += 1

    consumer = Polls({A: records(A, range(3))}, {}, on_second=revoke)
    batches, current = await poll(consumer, kafka(), lambda: generation[0], fail)  # type: ignore[arg-type]
    assert batches == {} and current == 2


async def test_a_partition_stopped_at_the_second_poll_keeps_the_first_polls_records() -> None:
    """aiokafka raises the stop from a getmany that took no record; the first poll's
    records (their positions already moved) are still returned, and the stop is reported."""
    stop = UndecodableBatchError("raw", 1, 7, ValueError("zstd: corrupt"))
    stopped: list[UndecodableBatchError] = []
    consumer = Polls({A: records(A, range(3))}, stop)
    batches, _ = await poll(consumer, kafka(), lambda: 0, stopped.append)  # type: ignore[arg-type]
    assert {tp: [r.offset for r in msgs] for tp, msgs in batches.items()} == {A: [0, 1, 2]}
    assert stopped == [stop]
    consumer = Polls(stop)
    batches, _ = await poll(consumer, kafka(), lambda: 0, stopped.append)  # type: ignore[arg-type]
    assert batches == {} and stopped == [stop, stop]
