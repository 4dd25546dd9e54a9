"""Stop and restart the broker mid-stream: no loss, no duplicate, no manual step.

A broker of its own (the session broker is shared, this one is stopped):
20,000 records go through one worker; the broker is stopped while the
worker is half-way, the worker must report not-ready and stay up, and once
the broker is back on the same port (data kept) it must carry on by itself.
Every record is released exactly once (read_committed), byte-identical to
the offline replay, and even the aborted copies a read_uncommitted reader
may see carry the very same bytes (no second, independent noise draw).
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.broker import LocalBroker, create_topics, local_broker
from tests.support.faults import free_port, metric, poll_until, read_to_end
from tests.support.http_get import http_get
from tests.support.worker_proc import (
    PRIVACY,
    TEST_SECRET,
    Collector,
    Message,
    WorkerProcess,
    decode,
    produce,
    raw_in_log,
    read_all,
    replay_expected,
    started,
    unique_topics,
    wait_while_alive,
    write_config,
)

BEFORE = 18_000  # produced before the outage
AFTER = 2_000  # produced once the broker is back
TOTAL = BEFORE + AFTER
DEVICE_CANARY = "CANARY-DEVICE-5d1e"
KEY_CANARY = "CANARY-KEY-"
HEADER_CANARY = b"CANARY-HEADER-0b7a"


def messages(seqs: range) -> list[Message]:
    return [
        (
            f"{KEY_CANARY}{seq}".encode(),
            json.dumps(
                {
                    "device_id": f"{DEVICE_CANARY}-{seq}",
                    "seq": seq,
                    "salary": 1504 + (seq % 2996) + 0.123456,
                    "state": ["TX", "CA", "NY"][seq % 3],
                    "opted_in": seq % 2 == 0,
                }
            ).encode(),
            [("trace", HEADER_CANARY)],
        )
        for seq in seqs
    ]


@pytest.fixture
def broker() -> Iterator[LocalBroker]:
    """A broker of this test only: stopping it must not disturb the session broker."""
    with local_broker() as running:
        yield running


async def readiness_becomes(port: int, status: int, worker: WorkerProcess, within_s: float) -> None:
    """Poll /readyz until it answers ``status``; the worker must stay up meanwhile."""
    seen: list[int] = []

    async def answers() -> bool:
        assert worker.alive, f"worker exited:\n{worker.log_text()[-5000:]}"
        code, _ = await http_get(port, "/readyz")
        seen.append(code)
        return code == status

    await poll_until(
        answers, within_s, f"/readyz {status}", every_s=0.2, why=lambda: f"last seen {seen[-1:]}"
    )


async def test_broker_restart_mid_stream(broker: LocalBroker, tmp_path: Path) -> None:
    bootstrap = broker.bootstrap
    kafka = unique_topics("restart")
    await create_topics(bootstrap, [kafka["input_topic"]], partitions=4)
    await create_topics(bootstrap, [kafka["output_topic"], kafka["dead_letter_topic"]], 2)
    port = free_port()
    config = write_config(
        tmp_path / "config.yaml",
        bootstrap,
        # small batches: many transactions, so the outage falls in the middle of the stream
        {**kafka, "transactions": True, "max_batch_records": 100, "transaction_timeout_ms": 10000},
        {**PRIVACY, "http": {"host": "127.0.0.1", "port": port}},
    )
    coords = await produce(bootstrap, kafka["input_topic"], messages(range(BEFORE)))

    worker = WorkerProcess(config, tmp_path / "worker.log")
    async with started(worker) as pid:
        async with Collector(bootstrap, kafka["output_topic"]) as seen:
            await wait_while_alive(seen, 1_000, worker, within_s=120)
        await readiness_becomes(port, 200, worker, within_s=30)

        await asyncio.to_thread(broker.stop)
        await readiness_becomes(port, 503, worker, within_s=60)
        done_before_outage = await metric(port, "privstream_records_in_total")
        assert done_before_outage is not None, "privstream_records_in_total not exported"
        assert done_before_outage < BEFORE, "the worker finished before the outage: no test"

        await asyncio.to_thread(broker.start)  # same port, same data dir
        await readiness_becomes(port, 200, worker, within_s=120)
        coords += await produce(bootstrap, kafka["input_topic"], messages(range(BEFORE, TOTAL)))
        async with Collector(bootstrap, kafka["output_topic"]) as seen:
            await wait_while_alive(seen, TOTAL, worker, within_s=300)
        # the very process started above, never restarted
        assert worker.alive and worker.proc is not None and worker.proc.pid == pid, (
            worker.log_text()[-5000:]
        )
        assert await worker.terminate() == 0, worker.log_text()[-5000:]

    sanitized = await read_all(bootstrap, kafka["output_topic"], partitions=2)
    seqs = [body["seq"] for body in decode(sanitized)]
    assert len(seqs) == TOTAL, Counter(Counter(seqs).values())
    assert sorted(seqs) == list(range(TOTAL))
    values = [value for _, value, _ in messages(range(TOTAL))]
    expected = replay_expected(config, TEST_SECRET, kafka["input_topic"], coords, values)
    assert Counter(r.value for r in sanitized) == Counter(expected)
    for record in sanitized:
        assert record.key is None
        assert b"CANARY" not in record.value
    assert await read_all(bootstrap, kafka["dead_letter_topic"], partitions=2) == []

    # aborted attempts (if the outage cut a transaction) repeat the same bytes, never new noise
    everything = await read_to_end(
        bootstrap, kafka["output_topic"], 2, isolation_level="read_uncommitted", within_s=None
    )
    assert len(everything) >= TOTAL
    assert {r.value for r in everything} == set(expected)

    leaks = raw_in_log(worker.log_text())
    assert not leaks, f"{len(leaks)} log lines hold raw data, e.g.:\n" + "\n".join(leaks[:5])
