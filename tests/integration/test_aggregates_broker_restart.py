"""The broker stops and comes back mid-stream: the aggregates go on, each window once.

A broker of this test only (the session broker is shared). One worker runs
throughout (the same process: no restart by hand); windows close by the wall
clock, records are stamped in its next window and the grace (30 s) is longer
than the outage, so no record is late (as in ``test_aggregates_stream``); some
windows close before the outage, the rest after. The
committed rows are, once each, what the file-mode pieces make of the input
with the same noise key.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest
from privstream.aggregates.windows import window_label, window_start

from tests.support import aggregate_stream as agg
from tests.support.broker import LocalBroker, local_broker
from tests.support.faults import Tail, poll_until
from tests.support.worker_proc import WorkerProcess, read_all

PER_WINDOW = 40
WINDOWS = 8
GRACE_S = 30


@pytest.fixture
def broker() -> Iterator[LocalBroker]:
    with local_broker() as running:
        yield running


async def test_broker_restart_each_window_once(broker: LocalBroker, tmp_path: Path) -> None:
    bootstrap = broker.bootstrap
    kafka, out, config = await agg.setup(bootstrap, tmp_path, "aggbroker", 1, GRACE_S)
    config = agg.with_kafka(config, {"transaction_timeout_ms": 10000})
    worker = WorkerProcess(config, tmp_path / "worker.log")
    topic = kafka["input_topic"]

    starts: list[int] = []

    async def window(k: int) -> None:
        index = range(k * PER_WINDOW, (k + 1) * PER_WINDOW)
        starts.append(await agg.produce_window(bootstrap, topic, index))

    def released(rows: Tail, k: int) -> bool:
        labels = {row[1] for row in agg.released(rows.records)}
        return window_label(starts[k], 1000) in labels

    await worker.start()
    async with agg.running(worker):
        epoch = await poll_until(lambda: _epoch(bootstrap, kafka), 60, "the epoch")
        async with Tail(bootstrap, out) as rows:
            for k in range(4):
                await window(k)
            await poll_until(lambda: _true(released(rows, 2)), 90, "window 2 released")
        await asyncio.to_thread(broker.stop)
        await asyncio.to_thread(broker.start)  # same port, same data
        assert worker.alive, worker.log_text()[-3000:]
        for k in range(4, WINDOWS):
            await window(k)
        async with Tail(bootstrap, out) as rows:
            await poll_until(
                lambda: _true(released(rows, WINDOWS - 1)),
                180,
                "the last window released after the outage",
                why=lambda: worker.log_text()[-3000:],
            )
        assert worker.alive, worker.log_text()[-3000:]
    every_start = list(range(window_start(epoch, 1000), starts[-1] + 1000, 1000))
    inputs = await read_all(bootstrap, topic, agg.PARTITIONS)
    expected = agg.expected(config, inputs, every_start, 1)
    labels = {window_label(s, 1000) for s in every_start}
    every = await read_all(bootstrap, out, 1)
    committed = {k: v for k, v in agg.released(every).items() if k[1] in labels}
    assert set(committed) == set(expected)
    assert all(len(v) == 1 for v in committed.values()), "a window released twice"
    assert {k: v[0] for k, v in committed.items()} == expected


async def _true(value: bool) -> bool:
    return value


async def _epoch(bootstrap: str, kafka: dict[str, str]) -> int | None:
    return (await agg.view(bootstrap, kafka)).epoch_ms
