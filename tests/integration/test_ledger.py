"""The subject ledger on a real broker: its rules, restore, and the changelog checks.

The model and the checks are in ``ledger_support`` (see its docstring).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
from aiokafka import AIOKafkaProducer, ConsumerRecord, TopicPartition
from privstream.config import load_config
from privstream.config.runtime import Runtime
from privstream.kinds import build_plan
from privstream.ledger import SubjectLedger
from privstream.metrics import Metrics
from privstream.worker.ledger_store import LedgerStore
from privstream.worker.topics import check_topics
from prometheus_client import CollectorRegistry

from tests.support.broker import create_topics
from tests.support.faults import (
    Tail,
    fault_topics,
    free_port,
    samples,
)
from tests.support.http_get import http_get
from tests.support.ledger import (
    DAY_MS,
    HOUR_MS,
    Timed,
    accounted_for,
    assert_ledger_obeyed,
    body,
    expected_reasons,
    header,
    outcome,
    produce_timed,
    record,
    running,
    seq,
    source,
)
from tests.support.worker_proc import (
    TEST_SECRET,
    WorkerProcess,
    write_config,
)


async def test_ledger_semantics_on_a_broker(kafka_bootstrap: str, tmp_path: Path) -> None:
    """Rollover, lifetime cap, late, future, key mismatch, no subject, a burst in one batch."""
    kafka = await fault_topics(kafka_bootstrap, "ledger")
    now = int(time.time() * 1000)
    hour = now - now % HOUR_MS
    messages: list[Timed] = []

    def add(subject: str | None, ts: int | None, *, key: str | None = None) -> None:
        messages.append((*record(len(messages), subject, key=key), ts))

    for h in (3, 2):  # rollover: 5 in each of two windows, 3 released in each
        for i in range(5):
            add("roll", hour - h * HOUR_MS + i)
    for h in (5, 4, 3, 2):  # lifetime: 3 per window, 3 + 3 + 1 released, then nothing
        for i in range(3):
            add("life", hour - h * HOUR_MS + i)
    add("late", now - 3 * DAY_MS)  # its window ended more than grace (1d) ago
    add("future", now + HOUR_MS)  # more than max_future (5m) ahead
    add("mismatch", None, key="someone-else")
    add(None, None, key="nobody")
    for s in range(200):  # within their caps: all released
        add(f"quiet-{s}", None)
        add(f"quiet-{s}", None)
    for _ in range(5_000):  # a burst, produced before the worker starts: one or two batches
        add("burst", None)
    await produce_timed(kafka_bootstrap, kafka["input_topic"], messages)

    port = free_port()
    overrides = {**kafka, "transactions": True, "max_batch_records": 10_000}
    config = write_config(tmp_path / "config.yaml", kafka_bootstrap, overrides, body())
    worker = WorkerProcess(config, tmp_path / "worker.log")
    async with (
        Tail(kafka_bootstrap, kafka["output_topic"], identity=seq) as out_tail,
        Tail(kafka_bootstrap, kafka["dead_letter_topic"], identity=source) as dead_tail,
        running(worker, port),
    ):
        await accounted_for(out_tail, dead_tail, len(messages), worker, within_s=120)
        status, text = await http_get(port, "/metrics")
        assert status == 200
        assert await worker.terminate() == 0, worker.log_text()[-3000:]
    raw, out, dead = await outcome(kafka_bootstrap, kafka)
    expected = expected_reasons(raw, clock_ms=now)
    summary = f"{len(raw)} inputs, {len(out)} outputs, {len(dead)} dead letters"
    reasons = assert_ledger_obeyed(raw, out, dead, expected, summary)
    assert reasons == {
        "budget_exhausted": 2 + 2 + 4_997,
        "lifetime_exhausted": 2 + 3,
        "late_record": 1,
        "future_record": 1,
        "subject_key_mismatch": 1,
        "no_subject": 1,
    }, summary
    assert len(out) == 3 + 3 + 7 + 400 + 3, summary
    for r in out:
        assert (
            header(r, "privstream-subject-guarantee")
            == b"eps=4.5;delta=0;window=1h;lifetime_eps=10.5"
        )
    # the counts header of each partition's last output: everything released from it so far
    last: dict[int, ConsumerRecord] = {}
    for r in out:
        if r.partition not in last or r.offset > last[r.partition].offset:
            last[r.partition] = r
    for partition, r in last.items():
        counts = json.loads(header(r, "privstream-ledger-counts"))
        assert counts["partition"] == partition  # 4 input partitions onto 4 output ones
        assert counts["released"] == sum(1 for o in out if o.partition == partition), counts
    scraped = samples(text)
    suppressed = {
        dict(labels)["reason"]: value
        for (name, labels), value in scraped.items()
        if name == "privstream_ledger_suppressed_total"
    }
    assert suppressed == reasons, suppressed
    assert scraped["privstream_ledger_subjects", ()] > 0


async def test_restored_ledger_equals_the_ledger_before(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    """A ledger charged batch by batch, each batch's updates committed (one batch's
    aborted), is restored by a second store into exactly the same state."""
    kafka = await fault_topics(kafka_bootstrap, "ledger-restore")
    config_path = write_config(tmp_path / "c.yaml", kafka_bootstrap, kafka, body())
    config = load_config(config_path)
    plan = build_plan(config)
    runtime = Runtime(noise_secret=TEST_SECRET, replica_id="t", credentials=None)

    def new_store() -> LedgerStore:
        store = LedgerStore.from_config(config, plan, runtime, Metrics(CollectorRegistry()))
        assert store is not None
        return store

    creator = new_store()
    # check_topics creates it
    await creator.open(await check_topics(config.kafka, runtime.credentials, creator.topic))
    await creator.close()
    # charged with the committed steps only
    reference = SubjectLedger(policy=creator.policy, deployment=config.kafka.group_id)
    producer = AIOKafkaProducer(
        bootstrap_servers=kafka_bootstrap, transactional_id=kafka["group_id"]
    )
    await producer.start()
    rng = np.random.default_rng(20_261_123)
    now = int(time.time() * 1000)
    try:
        for step in range(12):  # 30 min of clock per step: the oldest windows expire
            clock = now + step * HOUR_MS // 2
            subjects = [f"s{k}".encode() for k in rng.integers(0, 40, 200)]
            stamps = clock - rng.integers(0, 25 * HOUR_MS, 200)  # some late, some expiring
            await producer.begin_transaction()
            if step == 5:  # an aborted batch: what it wrote must not be restored
                for partition in range(4):
                    await producer.send(creator.topic, b"junk", key=b"\x01W", partition=partition)
                await producer.abort_transaction()
                continue
            for partition in range(4):
                charge = reference.charge(
                    partition, subjects=subjects, keys=subjects, timestamps_ms=stamps, now_ms=clock
                )
                for key, value in charge.updates:
                    await producer.send(creator.topic, value, key=key, partition=partition)
            await producer.commit_transaction()
    finally:
        await producer.stop()
    restored = new_store()
    await restored.open(4)
    try:
        restored.assigned([TopicPartition(kafka["input_topic"], p) for p in range(4)])
        await restored.ready(range(4))
        assert restored.ledger.active_subject_windows() == reference.active_subject_windows() > 0
        for partition in range(4):
            assert restored.ledger.snapshot(partition) == reference.snapshot(partition)
            assert restored.ledger.counts(partition) == reference.counts(partition)
            assert reference.counts(partition)["late_record"] > 0  # tombstones were written
    finally:
        await restored.close()


async def test_changelog_of_another_shape_is_refused(kafka_bootstrap: str, tmp_path: Path) -> None:
    """A changelog with the wrong partition count, not compacted, or stamped by its
    producers (no broker clock to check the worker's against) stops the worker: exit 2."""
    kafka = await fault_topics(kafka_bootstrap, "ledger-refuse")
    wrong_count, not_compacted = f"{kafka['input_topic']}-two", f"{kafka['input_topic']}-del"
    create_time = f"{kafka['input_topic']}-ct"
    await create_topics(kafka_bootstrap, [wrong_count], partitions=2)
    await create_topics(kafka_bootstrap, [not_compacted], partitions=4)  # cleanup.policy=delete
    await create_topics(
        kafka_bootstrap, [create_time], partitions=4, configs={"cleanup.policy": "compact"}
    )
    for topic, says in (
        (wrong_count, "has 2 partitions"),
        (not_compacted, "cleanup.policy='delete'"),
        (create_time, "message.timestamp.type='CreateTime'"),
    ):
        config = write_config(
            tmp_path / f"{topic}.yaml", kafka_bootstrap, kafka, body(changelog_topic=topic)
        )
        worker = WorkerProcess(config, tmp_path / f"{topic}.log")
        await worker.start()
        code = await worker.wait(within_s=60)
        log = worker.log_text()
        assert code == 2 and says in log and "Traceback" not in log, log[-3000:]
        assert f"--entity-name {topic}" in log or "repartition" in log, log[-3000:]  # the fix


async def test_a_second_deployment_on_the_same_changelog_is_refused(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    """Two groups over one raw topic with the default changelog: the second one's restore
    finds the first one's markers and stops (exit 2) before it charges anything, naming
    both groups (each would otherwise restore the other's spending: docs/ledger.md)."""
    kafka = await fault_topics(kafka_bootstrap, "ledger-two")
    messages: list[Timed] = [(*record(i, f"s{i}"), None) for i in range(8)]
    await produce_timed(kafka_bootstrap, kafka["input_topic"], messages)
    blue = {**kafka, "transactions": True, "group_id": f"{kafka['group_id']}.blue"}
    green = {**blue, "group_id": f"{kafka['group_id']}.green", "transactional_id_prefix": "g"}
    first = WorkerProcess(
        write_config(tmp_path / "blue.yaml", kafka_bootstrap, blue, body()), tmp_path / "b.log"
    )
    async with (
        Tail(kafka_bootstrap, kafka["output_topic"], identity=seq) as out_tail,
        Tail(kafka_bootstrap, kafka["dead_letter_topic"], identity=source) as dead_tail,
        running(first, free_port()),
    ):
        await accounted_for(out_tail, dead_tail, len(messages), first, within_s=120)
        assert await first.terminate() == 0, first.log_text()[-3000:]
    second = WorkerProcess(
        write_config(tmp_path / "green.yaml", kafka_bootstrap, green, body()), tmp_path / "g.log"
    )
    await second.start()
    code = await second.wait(within_s=120)
    log = second.log_text()
    assert code == 2 and "Traceback" not in log, log[-3000:]
    assert f"'{blue['group_id']}'" in log and f"'{green['group_id']}'" in log, log[-3000:]
    _, out, _ = await outcome(kafka_bootstrap, kafka)
    assert len(out) == len(messages)  # the second deployment released nothing
