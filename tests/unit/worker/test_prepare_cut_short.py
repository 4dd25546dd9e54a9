"""``Worker.pipeline`` with ``restart.unless_failed``: a transaction that fails while the
next batch is prepared ends the session at once, and nothing of that preparation
outlives it (no charge, no transaction, no task, no release of its thread's result).

``test_unless_failed`` pins the helper alone; these pin its use in the loop. Without
it, each of them waits for the preparation and times out. Events, not sleeps,
decide what finishes first.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence
from typing import Any

import pytest
from aiokafka import ConsumerRecord
from privstream.config import parse_config
from privstream.config.runtime import Runtime
from privstream.kinds import build_plan
from privstream.metrics import Metrics
from privstream.pipeline import BatchResult, RecordPlan
from privstream.worker.generation_fence import Member
from privstream.worker.http import Health
from privstream.worker.ledger_store import LedgerStore
from privstream.worker.loop import Worker
from prometheus_client import CollectorRegistry

from tests.support.configs import config_dict
from tests.unit.worker.test_ledger_store import FIELDS, record
from tests.unit.worker.test_pipeline import TP, ScriptedConsumer, TransactionalProducer
from tests.unit.worker.test_units import batch, sanitizer, sender_for, worker

#: how long a session may take to end once its transaction failed (it ends at once)
WITHIN_S = 5.0


def ledger_worker() -> tuple[Worker, LedgerStore, RecordPlan]:
    """A worker with a subject ledger whose partition 0 is restored (2 records a day), and
    its plan."""
    data = config_dict(FIELDS, epsilon=1.0)
    ledger = {"window": "1d", "epsilon": 2.0, "over_budget": "drop"}
    data["privacy"].update({"subject": "device_id", "ledger": ledger})
    config = parse_config(data)
    plan, runtime = build_plan(config), Runtime(b"k" * 32, "r0", None)
    metrics = Metrics(CollectorRegistry())
    store = LedgerStore.from_config(config, plan, runtime, metrics)
    assert store is not None
    store.ledger.restore(0, [])
    store._restored.add(0)
    w = Worker(config.kafka, plan, runtime, metrics=metrics, health=Health(), ledger=store)
    w.assignment.assigned = {TP}
    w.assignment.member = Member(1, "test-member")  # as an assignment sets it
    return w, store, plan


class FailingCommits(TransactionalProducer):
    """Its commit fails once ``fail`` is set, and so does its abort: the transaction
    stays open on the broker (what a ledger restore of its partitions waits for)."""

    def __init__(self) -> None:
        super().__init__()
        self.fail = asyncio.Event()

    async def commit_transaction(self) -> None:
        await self.fail.wait()
        self.log.append("commit refused")
        raise ConnectionError("broker gone")

    async def abort_transaction(self) -> None:
        self.log.append("abort refused")
        raise ConnectionError("broker gone")


async def test_a_commit_failing_before_a_charge_that_waits_for_a_restore_ends_the_session() -> None:
    """The batch in flight fails, its partition is revoked (the revoke waited for it)
    and assigned again, and the next batch's charge would wait for a restore that
    never ends: the session ends with the commit's error, the next batch uncharged."""
    w, ledger, plan = ledger_worker()
    producer, stop = FailingCommits(), asyncio.Event()
    producer.fail.set()
    consumer = ScriptedConsumer([[record(100, "a", "a")], [record(101, "a", "a")]], stop)
    getmany = consumer.getmany

    async def stuck() -> None:  # waits for the failed transaction, open until it expires
        await asyncio.Event().wait()

    async def rebalanced(timeout_ms: int, **kw: Any) -> Any:
        fetched = await getmany(timeout_ms, **kw)
        if fetched and fetched[TP][0].offset == 101:
            await w.listener(consumer).on_partitions_revoked({TP})  # type: ignore[arg-type]
            w.assignment.assigned, w.assignment.generation = {TP}, w.assignment.generation + 1
            ledger._restores[0] = asyncio.create_task(stuck())
        return fetched

    consumer.getmany = rebalanced  # type: ignore[method-assign]
    run = w.pipeline(stop, consumer, producer, sender_for(producer, plan))  # type: ignore[arg-type]
    with pytest.raises(ConnectionError):  # the failed commit ends the session
        await asyncio.wait_for(run, WITHIN_S)
    assert producer.log.count("begin") == 1 and "offsets 102" not in producer.log
    assert ledger.ledger.snapshot(0) == {}, "the batch prepared meanwhile was charged"
    restore = ledger._restores.get(0)
    # only the restore, which the session's teardown cancels, may outlive the session
    assert {t for t in asyncio.all_tasks() if t is not asyncio.current_task()} <= {restore}
    await ledger.close()
    assert restore is None or restore.cancelled()


async def test_a_commit_failing_during_the_sanitize_ends_the_session_without_its_result() -> None:
    """The sanitize thread cannot be stopped: the session ends without waiting for it, and
    what it returns afterwards goes nowhere (its future was cancelled)."""
    stop, producer = asyncio.Event(), FailingCommits()
    loop, sanitizing = asyncio.get_running_loop(), asyncio.Event()
    gate, finished = threading.Event(), threading.Event()
    sanitize = sanitizer()

    def slow(records: Sequence[ConsumerRecord[bytes, bytes]]) -> BatchResult:
        if records[0].offset != 101:
            return sanitize(records)
        loop.call_soon_threadsafe(sanitizing.set)
        gate.wait(4 * WITHIN_S)  # bounded: a failing test must not hang the suite
        try:
            return sanitize(records)
        finally:
            finished.set()

    w = worker(slow)
    w.assignment.assigned = {TP}
    w.assignment.member = Member(1, "test-member")  # as an assignment sets it
    consumer = ScriptedConsumer([batch([1.0], start=100), batch([2.0], start=101)], stop)

    async def fail_once_sanitizing() -> None:
        await sanitizing.wait()
        producer.fail.set()

    failing = asyncio.create_task(fail_once_sanitizing())
    run = w.pipeline(stop, consumer, producer, sender_for(producer))  # type: ignore[arg-type]
    with pytest.raises(ConnectionError):  # the failed commit ends the session
        await asyncio.wait_for(run, WITHIN_S)
    await failing
    assert not finished.is_set(), "the session waited for the sanitize thread"
    log, sent = list(producer.log), list(producer.sent)
    assert log.count("begin") == 1 and "commit refused" in log and "offsets 102" not in log
    assert {t for t in asyncio.all_tasks() if t is not asyncio.current_task()} == set()
    gate.set()
    assert await asyncio.to_thread(finished.wait, WITHIN_S)
    assert producer.log == log and producer.sent == sent  # nothing of it was released


async def test_a_commit_that_succeeds_while_the_next_charge_waits_for_a_restore_cuts_nothing() -> (
    None
):
    """The success path: the batch in flight commits, its partition is revoked and assigned
    again, and the next batch's charge waits for the restore: it is charged and released
    once the restore is done, not cut short by the commit."""
    w, ledger, plan = ledger_worker()
    producer, stop = TransactionalProducer(), asyncio.Event()
    consumer = ScriptedConsumer([[record(100, "a", "a")], [record(101, "a", "a")]], stop)
    getmany, restored, waiting = consumer.getmany, asyncio.Event(), asyncio.Event()

    async def restoring() -> None:
        await restored.wait()
        ledger.ledger.restore(0, [])
        ledger._restored.add(0)

    async def rebalanced(timeout_ms: int, **kw: Any) -> Any:
        fetched = await getmany(timeout_ms, **kw)
        if fetched and fetched[TP][0].offset == 101:
            producer.release.set()  # the revoke waits for this commit
            await w.listener(consumer).on_partitions_revoked({TP})  # type: ignore[arg-type]
            w.assignment.assigned, w.assignment.generation = {TP}, w.assignment.generation + 1
            ledger._restores[0] = asyncio.create_task(restoring())
        return fetched

    ready = ledger.ready

    async def spy(partitions: set[int]) -> None:
        if 0 not in ledger._restored:
            waiting.set()
        await ready(partitions)

    consumer.getmany = rebalanced  # type: ignore[method-assign]
    ledger.ready = spy  # type: ignore[method-assign]
    run = asyncio.create_task(
        w.pipeline(stop, consumer, producer, sender_for(producer, plan))  # type: ignore[arg-type]
    )
    await asyncio.wait_for(waiting.wait(), WITHIN_S)
    assert producer.log == ["begin", "offsets 101", "commit"] and not run.done()
    restored.set()
    await asyncio.wait_for(run, WITHIN_S)
    assert producer.log[3:] == ["begin", "offsets 102", "commit"]
    assert ledger.ledger.counts(0)["released"] == 1  # the second batch, charged once
