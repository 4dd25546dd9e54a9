"""Topics checked before the first record, and a replica with a fast clock, on a real broker.

The test broker runs with ``auto.create.topics.enable=true`` (deploy/local-kafka),
the setting under which a worker started before its input topic used to create
the changelog with ``cleanup.policy=delete`` and give each subject one budget
per partition. The fast clock is injected with the worker's documented hook
(``PRIVSTREAM_FAULT_CLOCK_OFFSET_MS``, ``privstream.worker.clock``) in a real
worker process.
"""

from __future__ import annotations

import time
from pathlib import Path

from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.protocol.metadata import MetadataRequest
from privstream.ledger import codec
from privstream.worker.clock import OFFSET_ENV
from privstream.worker.topics import describe

from tests.support.broker import create_topics
from tests.support.faults import Tail, fault_topics, free_port, metric, poll_until
from tests.support.http_get import http_get
from tests.support.ledger import (
    CAP,
    DAY_MS,
    accounted_for,
    assert_ledger_obeyed,
    body,
    expected_reasons,
    outcome,
    produce_timed,
    record,
    running,
    seq,
    source,
)
from tests.support.worker_proc import WorkerProcess, read_all, unique_topics, write_config

MAX_FUTURE_MS = 5 * 60_000  # ledger_support's max_future


async def exists(bootstrap: str, topic: str) -> bool:
    """Whether ``topic`` exists (asked without letting the broker create it)."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        return await describe(admin, topic) is not None
    finally:
        await admin.close()


async def ask_as_aiokafka_does(bootstrap: str, topic: str) -> None:
    """A metadata request for ``topic`` the way aiokafka sends one by default."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin._send_request(MetadataRequest([topic], allow_auto_topic_creation=True))
    finally:
        await admin.close()


async def test_a_worker_started_before_its_input_topic_refuses_and_creates_nothing(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    kafka = unique_topics("no-input")
    # the broker does auto-create: a default metadata request for a missing topic creates it
    control = f"{kafka['input_topic']}-control"
    await ask_as_aiokafka_does(kafka_bootstrap, control)
    await poll_until(lambda: exists(kafka_bootstrap, control), 30, "the control topic created")
    await create_topics(kafka_bootstrap, [kafka["output_topic"], kafka["dead_letter_topic"]], 2)
    config = write_config(tmp_path / "c.yaml", kafka_bootstrap, kafka, body())
    worker = WorkerProcess(config, tmp_path / "worker.log")
    await worker.start()
    code = await worker.wait(within_s=60)
    log = worker.log_text()
    assert code == 2, log[-3000:]
    assert f"topic '{kafka['input_topic']}' does not exist" in log, log[-3000:]
    assert f"--create --topic {kafka['input_topic']}" in log, log[-3000:]  # the fix
    assert "Traceback" not in log, log[-3000:]
    for topic in (kafka["input_topic"], f"{kafka['input_topic']}-privstream-ledger"):
        assert not await exists(kafka_bootstrap, topic), f"{topic} was created"


async def test_a_replica_with_a_fast_clock_charges_nothing_and_the_next_releases_on_time(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    """A replica 30 days fast refuses every batch (WARNING, metric, /readyz 503) and
    commits nothing, its clock above all; a replica on time then releases every
    correctly stamped record up to the cap, none of them late."""
    kafka = await fault_topics(kafka_bootstrap, "fast-clock")
    subjects, per_subject = 50, CAP + 1
    messages = [
        (*record(i, f"s{i % subjects}"), None) for i in range(subjects * per_subject)
    ]  # stamped by the producer, now: all in this hour's window
    await produce_timed(kafka_bootstrap, kafka["input_topic"], messages)
    config = write_config(
        tmp_path / "c.yaml", kafka_bootstrap, {**kafka, "transactions": True}, body()
    )

    fast_port = free_port()
    fast = WorkerProcess(config, tmp_path / "fast.log", env={OFFSET_ENV: str(30 * DAY_MS)})
    async with running(fast, fast_port):

        async def refused_twice() -> bool:
            assert fast.alive, fast.log_text()[-3000:]
            return (await metric(fast_port, "privstream_clock_refusals_total") or 0) >= 2

        await poll_until(refused_twice, 120, "two refusals", why=lambda: fast.log_text()[-2000:])
        status, _ = await http_get(fast_port, "/readyz")
        ahead = await metric(fast_port, "privstream_clock_ahead_seconds")
        assert fast.alive and await fast.terminate() == 0, fast.log_text()[-3000:]
    log = fast.log_text()
    assert status == 503
    assert ahead is not None and ahead > 30 * 86_400 - 600, ahead
    assert "WARNING" in log and "ahead of the broker's" in log and "max_future" in log
    changelog = f"{kafka['input_topic']}-privstream-ledger"
    assert await read_all(kafka_bootstrap, kafka["output_topic"], 4) == []
    assert await read_all(kafka_bootstrap, changelog, 4) == []  # its clock never committed

    port = free_port()
    worker = WorkerProcess(config, tmp_path / "worker.log")
    async with (
        Tail(kafka_bootstrap, kafka["output_topic"], identity=seq) as out_tail,
        Tail(kafka_bootstrap, kafka["dead_letter_topic"], identity=source) as dead_tail,
        running(worker, port),
    ):
        await accounted_for(out_tail, dead_tail, len(messages), worker, within_s=120)
        assert await worker.terminate() == 0, worker.log_text()[-3000:]
    raw, out, dead = await outcome(kafka_bootstrap, kafka)
    summary = f"{len(raw)} inputs, {len(out)} outputs, {len(dead)} dead letters"
    reasons = assert_ledger_obeyed(
        raw, out, dead, expected_reasons(raw, clock_ms=int(time.time() * 1000)), summary
    )
    assert reasons == {"budget_exhausted": subjects}, summary  # none late
    assert len(out) == subjects * CAP, summary
    clocks = [
        codec.decode_int(r.value)
        for r in await read_all(kafka_bootstrap, changelog, 4)
        if r.key == codec.CLOCK_KEY
    ]
    assert clocks and max(clocks) <= int(time.time() * 1000) + MAX_FUTURE_MS, clocks
