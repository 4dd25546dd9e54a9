"""The worker's overlap, without a broker: the next batch is sanitized while the previous
one commits, transactions never overlap, and a batch fetched before a rebalance is dropped.

The same behaviour against a real broker (kills, rebalances, outages) is tested in
tests/integration; these pin the ordering, which a broker test sees only by timing.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from types import SimpleNamespace
from typing import Any

import pytest
from aiokafka import ConsumerRecord, TopicPartition
from privstream.errors import LedgerError
from privstream.metrics import Metrics
from privstream.pipeline import BatchResult
from privstream.worker import charging
from privstream.worker.assignment import Assignment
from privstream.worker.fetch import TOP_UP_MS, is_behind
from privstream.worker.generation_fence import Member
from privstream.worker.ledger_store import LedgerStore
from privstream.worker.loop import Worker
from privstream.worker.sanitize import Prepared, Sanitize
from prometheus_client import CollectorRegistry

from tests.support.faults import poll_until
from tests.unit.worker.test_ledger_store import record, store, subjects
from tests.unit.worker.test_units import (
    CONFIG,
    SizeLimitedProducer,
    batch,
    sanitizer,
    sender_for,
    worker,
)

TP = TopicPartition("raw", 0)


class ScriptedConsumer:
    """Returns the given batches one poll each, then sets ``stop`` and returns nothing.

    Its high watermark is two records past the last batch: the worker is always
    behind (``caught_up``: the end of each batch as it is fetched).
    """

    def __init__(
        self,
        batches: list[list[ConsumerRecord[bytes, bytes]]],
        stop: asyncio.Event,
        *,
        caught_up: bool = False,
    ):
        self._batches = list(batches)
        self._stop = stop
        self._caught_up = caught_up
        self._end = max((b[-1].offset + 3 for b in batches), default=None)
        self.commits: list[dict[TopicPartition, int]] = []

    async def getmany(
        self, timeout_ms: int, **_: Any
    ) -> dict[TopicPartition, list[ConsumerRecord[bytes, bytes]]]:
        if timeout_ms == TOP_UP_MS:  # the top-up poll: nothing arrived since
            return {}
        if not self._batches:
            self._stop.set()
            return {}
        fetched = self._batches.pop(0)
        if self._caught_up:
            self._end = fetched[-1].offset + 1
        return {TP: fetched}

    def highwater(self, tp: TopicPartition) -> int | None:
        return self._end

    async def commit(self, offsets: dict[TopicPartition, int]) -> None:
        """The offset commit of ``transactions: false``."""
        self.commits.append(offsets)


class TransactionalProducer(SizeLimitedProducer):
    """Records every transaction step; a commit waits until the test releases it."""

    def __init__(self) -> None:
        super().__init__(10_000)
        self.log: list[str] = []
        self.open = 0
        self.most_open = 0
        self.release = asyncio.Event()

    async def begin_transaction(self) -> None:
        self.open += 1
        self.most_open = max(self.most_open, self.open)
        self.log.append("begin")

    async def send_offsets_to_transaction(self, offsets: dict[TopicPartition, int], _: str) -> None:
        self.log.append(f"offsets {offsets[TP]}")

    async def commit_transaction(self) -> None:
        await self.release.wait()
        self.open -= 1
        self.log.append("commit")

    async def abort_transaction(self) -> None:
        self.open -= 1
        self.log.append("abort")


def traced(log: list[str]) -> Sanitize:
    """The default sanitizer, logging each call (by its first offset) in ``log``."""
    sanitize = sanitizer()

    def spy(records: Sequence[ConsumerRecord[bytes, bytes]]) -> BatchResult:
        log.append(f"sanitize {records[0].offset}")
        return sanitize(records)

    return spy


async def test_the_next_batch_is_sanitized_while_the_previous_one_commits() -> None:
    stop, producer = asyncio.Event(), TransactionalProducer()
    w = worker(traced(producer.log))
    w.assignment.assigned = {TP}
    w.assignment.member = Member(1, "test-member")  # as an assignment sets it
    first, second = batch([1.0, 2.0], start=100), batch([3.0], start=102)
    consumer = ScriptedConsumer([first, second], stop)
    run = asyncio.create_task(
        w.pipeline(stop, consumer, producer, sender_for(producer))  # type: ignore[arg-type]
    )
    # the first commit is held: the second batch is fetched and sanitized meanwhile
    await poll_until(lambda: _true("sanitize 102" in producer.log), 5, "second batch sanitized")
    assert producer.log[0] == "sanitize 100" and producer.log.count("begin") == 1
    assert "commit" not in producer.log
    producer.release.set()
    await asyncio.wait_for(run, 5)
    # ... but its transaction began only after the first one committed, with its own offsets
    first_commit = producer.log.index("commit")
    assert "offsets 102" in producer.log[:first_commit]
    assert producer.log[first_commit:] == ["commit", "begin", "offsets 103", "commit"]
    assert producer.most_open == 1
    assert [v for _, values in producer.batches for v in values] == [
        *sanitizer()(first).outputs,
        *sanitizer()(second).outputs,
    ]


async def test_once_caught_up_the_next_fetch_waits_for_the_commit() -> None:
    """A batch that took everything the broker had: the records that arrive while it
    commits go out in the next transaction, not in a batch fetched before they arrived."""
    stop, producer = asyncio.Event(), TransactionalProducer()
    w = worker(traced(producer.log))
    w.assignment.assigned = {TP}
    w.assignment.member = Member(1, "test-member")  # as an assignment sets it
    first, second = batch([1.0, 2.0], start=100), batch([3.0], start=102)
    consumer = ScriptedConsumer([first, second], stop, caught_up=True)
    run = asyncio.create_task(
        w.pipeline(stop, consumer, producer, sender_for(producer))  # type: ignore[arg-type]
    )
    await poll_until(lambda: _true("offsets 102" in producer.log), 5, "first batch queued")
    assert "sanitize 102" not in producer.log, "fetched before the commit"
    producer.release.set()
    await asyncio.wait_for(run, 5)
    assert producer.log == [
        "sanitize 100", "begin", "offsets 102", "commit",
        "sanitize 102", "begin", "offsets 103", "commit",
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("caught_up", "transactions"), [(False, True), (True, True), (False, False)]
)
async def test_every_committed_batch_is_timed_in_every_stage(
    caught_up: bool, transactions: bool
) -> None:
    """poll, sanitize, queued (for the previous transaction), produce, commit: one
    observation each per batch, overlapped (behind) or not (caught up), in a transaction
    or not."""
    registry = CollectorRegistry()
    stop, producer = asyncio.Event(), TransactionalProducer()
    w = worker(traced(producer.log), metrics=Metrics(registry), transactions=transactions)
    w.assignment.assigned = {TP}
    w.assignment.member = Member(1, "test-member")  # as an assignment sets it
    consumer = ScriptedConsumer([batch([1.0, 2.0]), batch([3.0], 102)], stop, caught_up=caught_up)
    producer.release.set()
    await w.pipeline(stop, consumer, producer, sender_for(producer))  # type: ignore[arg-type]
    for stage in ("poll", "sanitize", "queued", "produce", "commit"):
        labels = {"stage": stage}
        count = registry.get_sample_value(f"{STAGE}_count", labels)
        assert count == 2, stage
        total = registry.get_sample_value(f"{STAGE}_sum", labels)
        assert total is not None and total >= 0, stage
    assert ("begin" in producer.log) == transactions
    assert [c[TP] for c in consumer.commits] == ([] if transactions else [102, 103])


STAGE = "privstream_batch_stage_duration_seconds"


def test_behind_means_a_full_batch_or_a_record_past_it_not_a_commit_marker() -> None:
    records, kafka = batch([1.0, 2.0], start=100), CONFIG.kafka
    fetched = Prepared({TP: records}, records, BatchResult(), 0, 0.0)
    behind = {}
    for highwater in (None, 102, 103, 104):  # 103: a transactional writer's commit marker
        consumer = SimpleNamespace(highwater=lambda tp, h=highwater: h)
        behind[highwater] = is_behind(consumer, fetched, kafka, 0)  # type: ignore[arg-type]
    assert behind == {None: False, 102: False, 103: False, 104: True}
    kafka = kafka.model_copy(update={"max_batch_records": 2})
    idle = SimpleNamespace(highwater=lambda tp: None)
    assert is_behind(idle, fetched, kafka, 0)  # type: ignore[arg-type]


async def test_a_rebalance_during_the_sanitize_does_not_end_the_worker() -> None:
    """The batch's partition moved to another replica while it was sanitized: aiokafka's
    ``highwater`` asserts on a partition no longer assigned, so ``is_behind`` must not ask."""
    stop, producer, sanitize = asyncio.Event(), TransactionalProducer(), sanitizer()
    producer.release.set()

    def moved_meanwhile(records: Sequence[ConsumerRecord[bytes, bytes]]) -> BatchResult:
        w.assignment.assigned, w.assignment.generation = (
            set(),
            w.assignment.generation + 2,
        )  # revoked, assigned elsewhere
        return sanitize(records)

    w = worker(moved_meanwhile)
    w.assignment.assigned = {TP}
    w.assignment.member = Member(1, "test-member")  # as an assignment sets it
    consumer = ScriptedConsumer([batch([1.0, 2.0], start=100)], stop)

    def highwater(tp: TopicPartition) -> int | None:
        assert tp in w.assignment.assigned, "Partition is not assigned"  # as aiokafka's
        return None

    consumer.highwater = highwater  # type: ignore[method-assign]
    await asyncio.wait_for(
        w.pipeline(stop, consumer, producer, sender_for(producer)),  # type: ignore[arg-type]
        5,
    )
    assert producer.log == [] and producer.sent == []  # voided, not released


async def test_a_batch_fetched_before_a_rebalance_is_dropped_not_released() -> None:
    """A revoke and a new assignment while the first batch was sanitized: it is dropped
    (its partitions' owner fetches it again), and the next batch, fetched under the new
    assignment, is released."""
    stop, producer, sanitize = asyncio.Event(), TransactionalProducer(), sanitizer()
    producer.release.set()
    first, second = batch([1.0, 2.0], start=100), batch([3.0], start=102)

    def rebalanced_meanwhile(records: Sequence[ConsumerRecord[bytes, bytes]]) -> BatchResult:
        if records[0].offset == 100:
            w.assignment.generation += 1  # the partition stays assigned, under a new one
        return sanitize(records)

    w = worker(rebalanced_meanwhile)
    w.assignment.assigned = {TP}
    w.assignment.member = Member(1, "test-member")  # as an assignment sets it
    consumer = ScriptedConsumer([first, second], stop)
    await asyncio.wait_for(
        w.pipeline(stop, consumer, producer, sender_for(producer)),  # type: ignore[arg-type]
        5,
    )
    assert producer.log == ["begin", "offsets 103", "commit"]
    assert [v for _, values in producer.batches for v in values] == sanitize(second).outputs


async def test_a_failed_commit_ends_the_session_and_the_batch_prepared_meanwhile_is_dropped() -> (
    None
):
    stop, producer = asyncio.Event(), TransactionalProducer()
    w = worker(traced(producer.log))
    w.assignment.assigned = {TP}
    w.assignment.member = Member(1, "test-member")  # as an assignment sets it

    async def refused() -> None:
        producer.log.append("commit refused")
        raise ConnectionError("broker gone")

    producer.commit_transaction = refused  # type: ignore[method-assign]
    consumer = ScriptedConsumer([batch([1.0], start=100), batch([2.0], start=101)], stop)
    try:
        await w.pipeline(stop, consumer, producer, sender_for(producer))  # type: ignore[arg-type]
    except ConnectionError:
        pass
    else:
        raise AssertionError("the failed commit did not end the session")
    # one transaction, aborted; the second batch, whose preparation the failure cut
    # short (restart.unless_failed), never began one
    assert producer.log.count("begin") == 1 and "abort" in producer.log
    assert "offsets 102" not in producer.log


async def test_a_batch_is_charged_as_prepared_unless_a_rebalance_voided_it() -> None:
    """The charge runs before the batch's transaction, under the assignment it was fetched
    under only: a rebalance before it, or while the ledger is still being restored, leaves
    the ledger untouched (the worker then drops the batch)."""
    assignment, ledger = Assignment(), store("drop")  # a subject may have 2 released per day
    ledger.ledger.restore(0, [])
    ledger._restored.add(0)
    records = [record(100 + i, "a", "a") for i in range(3)]
    result = subjects(records, BatchResult(outputs=[b"o"] * 3, output_index=[0, 1, 2]))
    owned = {TP: records}
    fetched_under = assignment.generation
    assignment.generation += 1
    assert await charging.charge(ledger, assignment, owned, records, result, fetched_under) is None

    async def restoring() -> None:  # the partition moves while its ledger is restored
        assignment.generation += 1

    ledger._restores[0] = asyncio.create_task(restoring())
    current = assignment.generation
    voided = await charging.charge(ledger, assignment, owned, records, result, current)
    assert voided is None
    assert ledger.ledger.snapshot(0) == {}, "a voided batch charged the ledger"
    current = assignment.generation
    verdict = await charging.charge(ledger, assignment, owned, records, result, current)
    assert verdict is not None and verdict.result.output_index == [0, 1]
    assert ledger.ledger.counts(0)["released"] == 2


async def test_a_ledger_batch_without_its_charge_is_refused_not_released() -> None:
    producer, ledger = TransactionalProducer(), store("drop")
    records = [record(100, "a", "a")]
    result = subjects(records, BatchResult(outputs=[b"o"], output_index=[0]))
    uncharged = Prepared({TP: records}, records, result, 0, 0.0)
    sender = sender_for(producer)
    with pytest.raises(LedgerError, match="uncharged"):
        await charging.send(ledger, producer, sender, uncharged)  # type: ignore[arg-type]
    assert producer.sent == [] and producer.batches == []


async def _true(value: bool) -> bool:
    return value


async def _charging_while_restoring() -> tuple[
    Worker, LedgerStore, asyncio.Task[Any], asyncio.Event
]:
    """A worker with a ledger, and a batch of partition 0 charged while its ledger is
    restored: returns them, the charge (it waits for the restore) and the gate that lets
    the restore finish."""
    ledger = store("drop")
    w = worker(ledger=ledger)
    w.assignment.assigned = {TP}
    gate = asyncio.Event()

    async def restoring() -> None:
        await gate.wait()
        ledger.ledger.restore(0, [])
        ledger._restored.add(0)

    ledger._restores[0] = asyncio.create_task(restoring())
    entered = asyncio.Event()
    ready = ledger.ready

    async def spy(partitions: set[int]) -> None:
        entered.set()  # ``ready`` then runs up to its wait for the restore without yielding
        await ready(partitions)

    ledger.ready = spy  # type: ignore[method-assign]
    records = [record(100 + i, "a", "a") for i in range(3)]
    result = subjects(records, BatchResult(outputs=[b"o"] * 3, output_index=[0, 1, 2]))
    charge = charging.charge(ledger, w.assignment, {TP: records}, records, result, 0)
    charged = asyncio.create_task(charge)
    await entered.wait()
    return w, ledger, charged, gate


async def test_a_revoke_while_the_charge_waits_for_the_restore_voids_the_batch() -> None:
    """The revoke cancels the restore the charge waits for: the batch is voided (None),
    the ledger untouched, and the session goes on (no CancelledError, no LedgerError)."""
    w, ledger, charged, _ = await _charging_while_restoring()
    await w.listener(None).on_partitions_revoked({TP})  # the consumer is not used
    assert await charged is None
    assert ledger.ledger.snapshot(0) == {}


async def test_a_revoke_right_after_the_restore_voids_the_batch() -> None:
    """The restore finished, then the partition is revoked before the charge resumes."""
    w, ledger, charged, gate = await _charging_while_restoring()
    restore = ledger._restores[0]
    gate.set()
    await restore  # the charge is woken after this test: the revoke runs first
    await w.listener(None).on_partitions_revoked({TP})  # the consumer is not used
    assert await charged is None
    assert ledger.ledger.snapshot(0) == {}
