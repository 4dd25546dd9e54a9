"""A batch dies by reference counting: the premise of the worker's collector setting.

``privstream.cli.run.tune_collector`` lets 50,000 young container objects
accumulate between two collections. That costs no memory only while a batch
leaves no reference cycle behind: a cycle holding a batch's records pins their
bytes (which the collector does not count) until a collection finds it, so a
few small cycles per batch could keep thousands of batches alive. These count
what a collection finds after batches went through the worker's own code
(sanitize, the ledger's charge, the pipeline with fake clients): nothing.
aiokafka's internals are not covered (they need a broker).
"""

from __future__ import annotations

import asyncio
import gc
import json
from collections.abc import Iterator
from typing import Any

import pytest
from aiokafka import ConsumerRecord
from privstream.config import parse_config
from privstream.kinds import build_plan
from privstream.mechanisms.rng import NoiseKeys
from privstream.worker.generation_fence import Member
from privstream.worker.sanitize import sanitize

from tests.support.configs import config_dict, consumer_record
from tests.unit.worker.test_ledger_store import FIELDS, charge, store
from tests.unit.worker.test_pipeline import TP, ScriptedConsumer, TransactionalProducer
from tests.unit.worker.test_units import batch, sender_for, worker


@pytest.fixture
def collector_off() -> Iterator[None]:
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def keyed(offset: int, subject: str) -> ConsumerRecord[Any, Any]:
    value = json.dumps({"device_id": subject, "x": offset % 11}).encode()
    return consumer_record(offset, value if offset % 7 else b"not json", subject.encode())


@pytest.mark.usefixtures("collector_off")
def test_sanitizing_and_charging_batches_leaves_no_cycles() -> None:
    s = store("dead_letter")
    s.ledger.restore(0, [])
    plan, keys = build_plan(parse_config(config_dict(FIELDS))), NoiseKeys(bytes(32), "raw")
    offsets = iter(range(10**6))

    def one_batch() -> None:
        records = [keyed(next(offsets), f"s{i % 40}") for i in range(500)]
        charge(s, records, sanitize(plan, keys, records, "device_id"))

    one_batch()  # first calls build lazy state (signatures, caches) once
    gc.collect()
    for _ in range(5):
        one_batch()
    assert gc.collect() == 0


@pytest.mark.usefixtures("collector_off")
async def test_the_worker_loop_leaves_no_cycles_per_batch() -> None:
    async def drain(batches: int) -> None:
        w, stop, producer = worker(), asyncio.Event(), TransactionalProducer()
        producer.release.set()
        w.assignment.assigned = {TP}
        w.assignment.member = Member(1, "test-member")  # as an assignment sets it
        fetched = [batch([float(i % 9) for i in range(300)], 100 + 300 * k) for k in range(batches)]
        consumer = ScriptedConsumer(fetched, stop)
        await w.pipeline(stop, consumer, producer, sender_for(producer))  # type: ignore[arg-type]
        assert producer.log.count("commit") == batches

    await drain(1)
    gc.collect()
    await drain(10)
    assert gc.collect() == 0
