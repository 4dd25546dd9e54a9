"""The subject ledger on a real broker: no subject ever exceeds its cap, through faults.

Every test recomputes what the ledger must do from the raw input as the
broker holds it (keys, values, Kafka timestamps, offset order) with
``expected_reasons``, a record-at-a-time model written here from the rules
in docs/ledger.md (not from the vectorised code), and compares it with the
committed outputs and dead letters: a subject released more than its cap
(a lost or stale restore) and a subject released less (a charge counted
twice, e.g. an aborted batch's charge kept in memory) both fail.

The caps are small so they bite at once: a record costs epsilon 1.5 (two
noised fields), a window's cap is 4.5 (3 records) and the lifetime cap
10.5 (7 records); the suppressed records are dead-lettered
(``over_budget: dead_letter``) so every input shows up exactly once in
the output or the dead letters, and the kill points can follow progress.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from aiokafka import AIOKafkaProducer, ConsumerRecord, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from privstream.config import load_config
from privstream.config.runtime import Runtime
from privstream.ledger import LedgerPolicy, SubjectLedger
from privstream.metrics import Metrics
from privstream.pipeline import build_plan
from privstream.worker.ledger_store import LedgerStore
from prometheus_client import CollectorRegistry

from tests.broker import LocalBroker, create_topics, local_broker
from tests.http_get import http_get
from tests.integration.faults import (
    Tail,
    fault_topics,
    free_port,
    group_assignment,
    metric,
    poll_until,
    read_to_end,
    samples,
    stream,
)
from tests.integration.worker_proc import (
    TEST_SECRET,
    Message,
    WorkerProcess,
    read_all,
    replay_expected,
    write_config,
)

HOUR_MS = 3_600_000
DAY_MS = 24 * HOUR_MS
CAP = 3  # records per subject per window: 4.5 / 1.5
LIFETIME = 7  # records per subject: 10.5 / 1.5
LEDGER: dict[str, Any] = {
    "window": "1h",
    "epsilon": 4.5,
    "lifetime_epsilon": 10.5,
    "over_budget": "dead_letter",
    "grace": "1d",
    "max_future": "5m",
}
FIELDS: list[dict[str, Any]] = [
    {"name": "device_id", "kind": "drop"},
    {"name": "seq", "kind": "public"},
    {"name": "salary", "kind": "real", "bounds": [0, 100], "epsilon": 1.0},
    {"name": "state", "kind": "categorical", "domain": ["TX", "CA", "NY"], "epsilon": 0.5},
]


def body(**ledger: Any) -> dict[str, Any]:
    privacy = {"epsilon": 1.5, "subject": "device_id", "ledger": {**LEDGER, **ledger}}
    return {"privacy": privacy, "fields": FIELDS}


Timed = tuple[bytes | None, bytes, int | None]  # key, value, Kafka timestamp (None: now)


def record(seq: int, subject: str | None, *, key: str | None = None) -> tuple[bytes | None, bytes]:
    """Input ``seq`` of ``subject``, keyed by the subject unless ``key`` says otherwise."""
    value = {"device_id": subject, "seq": seq, "salary": seq % 100, "state": "TX"}
    chosen = subject if key is None else key
    return (None if chosen is None else chosen.encode()), json.dumps(value).encode()


def expected_reasons(
    raw: Sequence[ConsumerRecord], *, clock_ms: int, window_ms: int = HOUR_MS
) -> list[str | None]:
    """What the ledger must decide for each raw record (None: released), one at a time.

    ``raw`` in offset order per partition (a subject's records share one).
    The clock only matters for records far from the late and future limits.
    """
    grace, future = DAY_MS, 5 * 60_000
    spent: Counter[tuple[bytes, int]] = Counter()
    lifetime: Counter[bytes] = Counter()
    out: list[str | None] = []
    for r in raw:
        subject = json.loads(r.value)["device_id"]
        start = r.timestamp - r.timestamp % window_ms
        reason = None
        if subject is None:
            reason = "no_subject"
        elif r.key != subject.encode():
            reason = "subject_key_mismatch"
        elif r.timestamp > clock_ms + future:
            reason = "future_record"
        elif start + window_ms + grace < clock_ms:
            reason = "late_record"
        elif lifetime[r.key] >= LIFETIME:
            reason = "lifetime_exhausted"
        elif spent[r.key, start] >= CAP:
            reason = "budget_exhausted"
        else:
            spent[r.key, start] += 1
            lifetime[r.key] += 1
        out.append(reason)
    return out


async def produce_timed(bootstrap: str, topic: str, messages: Sequence[Timed]) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=20, acks="all")
    await producer.start()
    try:
        pending = [
            await producer.send(topic, value, key=key, timestamp_ms=ts)
            for key, value, ts in messages
        ]
        await asyncio.gather(*pending)
    finally:
        await producer.stop()


def seq(r: ConsumerRecord) -> int:
    return int(json.loads(r.value)["seq"])


def source(r: ConsumerRecord) -> str:
    return str(dict(r.headers)["privstream-source"].decode())


def header(r: ConsumerRecord, name: str) -> bytes:
    return bytes(dict(r.headers)[name])


async def outcome(
    bootstrap: str, kafka: dict[str, str], partitions: int = 4
) -> tuple[list[ConsumerRecord], list[ConsumerRecord], list[ConsumerRecord]]:
    """Raw input (offset order per partition), committed outputs, committed dead letters."""
    raw = await read_all(bootstrap, kafka["input_topic"], partitions)
    raw.sort(key=lambda r: (r.partition, r.offset))
    out = await read_all(bootstrap, kafka["output_topic"], partitions)
    dead = await read_all(bootstrap, kafka["dead_letter_topic"], 2)
    return raw, out, dead


def assert_ledger_obeyed(
    raw: list[ConsumerRecord],
    out: list[ConsumerRecord],
    dead: list[ConsumerRecord],
    expected: list[str | None],
    summary: str,
    *,
    dropped: bool = False,
) -> dict[str, int]:
    """Released exactly the model's records, once each; dead-lettered the rest, once each,
    with the model's reason (``dropped``: only those ``over_budget: drop`` never drops).
    Returns the count of each reason."""
    topic = raw[0].topic
    released = Counter(seq(r) for r in out)
    twice = [s for s, c in released.items() if c > 1]
    assert not twice, f"released more than once: seqs {twice[:10]}; {summary}"
    want = {seq(r) for r, why in zip(raw, expected, strict=True) if why is None}
    extra, missing = sorted(released.keys() - want), sorted(want - released.keys())
    assert not extra, f"released over a cap: seqs {extra[:10]} ({len(extra)}); {summary}"
    assert not missing, f"not released within a cap: {missing[:10]} ({len(missing)}); {summary}"
    always = {"subject_key_mismatch", "no_subject"}
    why_of = {
        f"{topic}/{r.partition}/{r.offset}": why
        for r, why in zip(raw, expected, strict=True)
        if why is not None and (not dropped or why in always)
    }
    letters = Counter(source(r) for r in dead)
    assert not [s for s, c in letters.items() if c > 1], f"dead letter twice; {summary}"
    assert letters.keys() == why_of.keys(), summary
    wrong = [
        source(r) for r in dead if header(r, "privstream-reason").decode() != why_of[source(r)]
    ]
    assert not wrong, f"dead letters with another reason: {wrong[:5]}; {summary}"
    return dict(Counter(why for why in expected if why is not None))


@contextlib.asynccontextmanager
async def running(worker: WorkerProcess, port: int) -> AsyncIterator[None]:
    """The worker started with its /metrics on ``port``; killed if a failed test left it."""
    await worker.start("--http-port", str(port))
    try:
        yield
    finally:
        if worker.alive:
            await worker.kill()


async def accounted_for(
    out: Tail, dead: Tail, total: int, worker: WorkerProcess, within_s: float
) -> None:
    """Wait until ``total`` distinct inputs were released or dead-lettered (committed)."""

    def done() -> bool:
        return len(out.distinct) + len(dead.distinct) >= total

    async def probe() -> bool:
        assert worker.alive, worker.log_text()[-5000:]
        return done()

    await poll_until(
        probe,
        within_s,
        f"{total} inputs released or dead-lettered",
        why=lambda: f"{len(out.distinct)} released, {len(dead.distinct)} dead-lettered",
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


def subject_message(i: int) -> Message:
    """Input i of the fault tests: subject ``s<i mod SUBJECTS>``, stamped when produced."""
    key, value = record(i, f"s{i % SUBJECTS}")
    return key, value, []


SUBJECTS = 1_500


def assert_changelog_is_the_ledger(
    changelog: list[ConsumerRecord],
    raw: list[ConsumerRecord],
    expected: list[str | None],
    policy: LedgerPolicy,
) -> None:
    """The committed changelog, restored, holds exactly what the released records cost."""
    spent: Counter[tuple[int, int, bytes]] = Counter()
    lifetime: Counter[tuple[int, bytes]] = Counter()
    counts: dict[int, Counter[str]] = {}
    for r, why in zip(raw, expected, strict=True):
        counts.setdefault(r.partition, Counter())[why or "released"] += 1
        if why is None:
            spent[r.partition, r.timestamp - r.timestamp % HOUR_MS, r.key] += 1
            lifetime[r.partition, r.key] += 1
    ledger = SubjectLedger(policy=policy)
    for partition in counts:
        entries = [(r.key, r.value) for r in changelog if r.partition == partition]
        ledger.restore(partition, entries)
        snapshot = ledger.snapshot(partition)
        windows = {k: v for k, v in snapshot.items() if k[1:2] == b"W"}
        want = {
            b"\x01W" + int(start).to_bytes(8, "big") + HOUR_MS.to_bytes(8, "big") + subject: (
                n * policy.cost_units
            ).to_bytes(8, "big")
            + bytes(8)
            for (p, start, subject), n in spent.items()
            if p == partition
        }
        assert windows == want, f"partition {partition}: window spending differs"
        lives = {k: v for k, v in snapshot.items() if k[1:2] == b"L"}
        assert lives == {
            b"\x01L" + subject: (n * policy.cost_units).to_bytes(8, "big")
            for (p, subject), n in lifetime.items()
            if p == partition
        }, f"partition {partition}: lifetime spending differs"
        got = {k: v for k, v in ledger.counts(partition).items() if v}
        assert got == dict(counts[partition]), f"partition {partition}: counts differ"


async def test_kill_nine_five_times_no_subject_over_its_cap(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    """kill -9 mid-transaction 5 times; the restored ledger equals the committed one."""
    total, kills, batch, ahead = 12_000, 5, 300, 3_000
    kafka = await fault_topics(kafka_bootstrap, "ledger-kill")
    overrides = {**kafka, "transactions": True, "max_batch_records": batch}
    overrides["session_timeout_ms"] = 6_000
    config = write_config(tmp_path / "config.yaml", kafka_bootstrap, overrides, body())
    changelog = f"{kafka['input_topic']}-privstream-ledger"
    messages = [subject_message(i) for i in range(total)]
    # kill points: one in each of `kills` equal strata of [5 %, 85 %] of the inputs
    thresholds = [int(total * (0.05 + 0.16 * k + 0.08)) for k in range(kills)]
    workers: list[WorkerProcess] = []
    async with (
        Tail(kafka_bootstrap, kafka["output_topic"], identity=seq) as out,
        Tail(kafka_bootstrap, kafka["dead_letter_topic"], identity=source) as dead,
        contextlib.AsyncExitStack() as stack,
    ):

        def accounted() -> int:
            return len(out.distinct) + len(dead.distinct)

        async def progressed(count: int) -> None:  # two tails: poll, either may move
            async def probe() -> bool:
                return accounted() >= count

            await poll_until(probe, 120, f"{count} inputs released or dead-lettered")

        async def gate(start: int) -> None:
            await progressed(start - ahead)

        async def start_worker(name: str) -> tuple[WorkerProcess, int]:
            worker, port = WorkerProcess(config, tmp_path / f"{name}.log"), free_port()
            await worker.start("--http-port", str(port))
            workers.append(worker)
            return worker, port

        def committed(worker: WorkerProcess, port: int) -> Callable[[], Awaitable[bool]]:
            async def probe() -> bool:
                assert worker.alive, worker.log_text()[-5000:]
                return bool(await metric(port, "privstream_records_in_total"))

            return probe

        producing = asyncio.create_task(
            stream(kafka_bootstrap, kafka["input_topic"], messages, chunk=500, before_chunk=gate)
        )
        worker, port = await start_worker("worker0")
        at_kill: list[int] = []
        try:
            # only once the worker created the changelog: reading a missing topic would
            # have the broker create it with its default partition count
            await poll_until(committed(worker, port), 120, "a first commit")
            unc = await stack.enter_async_context(
                Tail(kafka_bootstrap, changelog, isolation_level="read_uncommitted")
            )
            for k, threshold in enumerate(thresholds):
                await poll_until(committed(worker, port), 120, f"a commit before kill {k + 1}")
                await progressed(threshold)
                mark = len(unc.records)  # kill as the next changelog record of a batch shows
                await unc.wait_until(lambda m=mark: len(unc.records) > m, 60, "one more record")
                at_kill.append(accounted())
                assert await worker.kill() == -signal.SIGKILL
                worker, port = await start_worker(f"worker{k + 1}")
            coords = await producing
            await accounted_for(out, dead, total, worker, within_s=180)
            assert await worker.terminate() == 0, worker.log_text()[-5000:]
        finally:
            producing.cancel()
            for w in workers:
                if w.alive:
                    await w.kill()
    summary = f"accounted at each kill: {at_kill}"
    assert all(n < total for n in at_kill), summary
    raw, outputs, letters = await outcome(kafka_bootstrap, kafka)
    # every input was stamped within the last minutes: neither late nor in the future now
    expected = expected_reasons(raw, clock_ms=int(time.time() * 1000))
    reasons = assert_ledger_obeyed(raw, outputs, letters, expected, summary)
    assert set(reasons) <= {"budget_exhausted"}, reasons
    # the released bytes are the offline replay's: the kills changed no noise
    replay = replay_expected(
        config, TEST_SECRET, kafka["input_topic"], coords, [m[1] for m in messages]
    )
    assert all(r.value == replay[seq(r)] for r in outputs), summary
    # a batch a kill cut short left its changelog records aborted, not restored
    copies = await read_to_end(kafka_bootstrap, changelog, 4, isolation_level="read_uncommitted")
    committed_log = await read_all(kafka_bootstrap, changelog, 4)
    assert len(copies) > len(committed_log), f"no kill landed inside a transaction; {summary}"
    plan = build_plan(load_config(config))
    policy = LedgerPolicy.from_config(load_config(config), plan)
    committed_log.sort(key=lambda r: (r.partition, r.offset))
    assert_changelog_is_the_ledger(committed_log, raw, expected, policy)


async def group_committed(bootstrap: str, group: str) -> int:
    """Records the group has committed, summed over its partitions (0 before any commit)."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        offsets = await admin.list_consumer_group_offsets(group)
    finally:
        await admin.close()
    return sum(max(meta.offset, 0) for meta in offsets.values())


async def test_rebalance_the_survivor_restores_the_victims_ledger(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    """Two workers; one killed once half the input is committed; the other takes its
    partitions over and must refuse every subject the victim had already filled
    (``over_budget: drop``: nothing over budget reaches the dead letters)."""
    subjects, per_subject = 1_000, 8
    total, half = subjects * per_subject, subjects * per_subject // 2
    kafka = await fault_topics(kafka_bootstrap, "ledger-rebalance")
    overrides = {
        **kafka,
        "transactions": True,
        "max_batch_records": 300,
        "transaction_timeout_ms": 10_000,
        "session_timeout_ms": 6_000,
    }
    config = write_config(
        tmp_path / "config.yaml", kafka_bootstrap, overrides, body(over_budget="drop")
    )
    messages = [(*record(i, f"s{i % subjects}"), None) for i in range(total)]
    victim = WorkerProcess(config, tmp_path / "a.log", replica_id="a")
    survivor = WorkerProcess(config, tmp_path / "b.log", replica_id="b")
    port_a, port_b = free_port(), free_port()

    def committed_at_least(count: int) -> Callable[[], Awaitable[bool]]:
        async def probe() -> bool:
            assert survivor.alive, survivor.log_text()[-5000:]
            return await group_committed(kafka_bootstrap, kafka["group_id"]) >= count

        return probe

    async with running(victim, port_a), running(survivor, port_b):

        async def both_assigned() -> bool:
            assert victim.alive, victim.log_text()[-5000:]
            state, shares = await group_assignment(kafka_bootstrap, kafka["group_id"])
            return state == "Stable" and len(shares) == 2 and all(shares)

        await poll_until(both_assigned, 60, "both workers assigned partitions")
        await produce_timed(kafka_bootstrap, kafka["input_topic"], messages[:half])
        await poll_until(committed_at_least(half), 60, "the first half committed")
        victim_out = await metric(port_a, "privstream_records_out_total")
        assert victim_out, "the victim released nothing: its ledger would be empty"
        assert await victim.kill() == -signal.SIGKILL
        await produce_timed(kafka_bootstrap, kafka["input_topic"], messages[half:])
        await poll_until(committed_at_least(total), 90, "everything committed")
        text = (await http_get(port_b, "/metrics"))[1]
        assert await survivor.terminate() == 0, survivor.log_text()[-5000:]
    raw, out, dead = await outcome(kafka_bootstrap, kafka)
    expected = expected_reasons(raw, clock_ms=int(time.time() * 1000))
    summary = f"victim released {victim_out}, {len(out)} released in all"
    reasons = assert_ledger_obeyed(raw, out, dead, expected, summary, dropped=True)
    assert dead == [], summary
    assert len(out) == subjects * CAP, summary  # nobody over, nobody under
    # the survivor refused the victim's subjects: its own count shows the drops
    dropped = samples(text)["privstream_ledger_suppressed_total", (("reason", "budget_exhausted"),)]
    assert 0 < dropped <= reasons["budget_exhausted"], (dropped, reasons)
    assert "restored" in survivor.log_text()


@pytest.fixture
def own_broker() -> Iterator[LocalBroker]:
    """A broker of this test only: stopping it must not disturb the session broker."""
    with local_broker() as running_broker:
        yield running_broker


async def test_broker_restart_no_subject_over_its_cap(
    own_broker: LocalBroker, tmp_path: Path
) -> None:
    """The broker stops mid-stream and comes back; the worker carries on by itself."""
    bootstrap, subjects, total = own_broker.bootstrap, 600, 6_000
    kafka = await fault_topics(bootstrap, "ledger-restart")
    port = free_port()
    overrides = {**kafka, "transactions": True, "max_batch_records": 100}
    overrides["transaction_timeout_ms"] = 10_000
    config = write_config(tmp_path / "config.yaml", bootstrap, overrides, body())
    messages = [(*record(i, f"s{i % subjects}"), None) for i in range(total)]
    await produce_timed(bootstrap, kafka["input_topic"], messages[: total // 2])
    worker = WorkerProcess(config, tmp_path / "worker.log")

    async def ready_is(status: int) -> bool:
        assert worker.alive, worker.log_text()[-5000:]
        return (await http_get(port, "/readyz"))[0] == status

    async with running(worker, port):
        await poll_until(lambda: metric(port, "privstream_records_in_total"), 60, "a commit")
        await asyncio.to_thread(own_broker.stop)
        await poll_until(lambda: ready_is(503), 60, "not ready", every_s=0.2)
        before = await metric(port, "privstream_records_in_total")
        assert before is not None and before < total // 2, "finished before the outage"
        await asyncio.to_thread(own_broker.start)  # same port, same data
        await poll_until(lambda: ready_is(200), 120, "ready again", every_s=0.2)
        await produce_timed(bootstrap, kafka["input_topic"], messages[total // 2 :])
        async with (
            Tail(bootstrap, kafka["output_topic"], identity=seq) as out_tail,
            Tail(bootstrap, kafka["dead_letter_topic"], identity=source) as dead_tail,
        ):
            await accounted_for(out_tail, dead_tail, total, worker, within_s=180)
        assert await worker.terminate() == 0, worker.log_text()[-5000:]
    raw, out, dead = await outcome(bootstrap, kafka)
    expected = expected_reasons(raw, clock_ms=int(time.time() * 1000))
    summary = f"{before} consumed before the outage, {len(out)} released"
    assert_ledger_obeyed(raw, out, dead, expected, summary)
    assert len(out) == subjects * CAP, summary


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
    await creator.open()  # creates the changelog
    await creator.close()
    reference = SubjectLedger(policy=creator.policy)  # charged with the committed steps only
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
    await restored.open()
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
    """A changelog with the wrong partition count, or not compacted, stops the worker."""
    kafka = await fault_topics(kafka_bootstrap, "ledger-refuse")
    wrong_count, not_compacted = f"{kafka['input_topic']}-two", f"{kafka['input_topic']}-del"
    await create_topics(kafka_bootstrap, [wrong_count], partitions=2)
    await create_topics(kafka_bootstrap, [not_compacted], partitions=4)  # cleanup.policy=delete
    for topic, says in ((wrong_count, "has 2 partitions"), (not_compacted, "cleanup.policy")):
        config = write_config(
            tmp_path / f"{topic}.yaml", kafka_bootstrap, kafka, body(changelog_topic=topic)
        )
        worker = WorkerProcess(config, tmp_path / f"{topic}.log")
        await worker.start()
        code = await worker.wait(within_s=60)
        log = worker.log_text()
        assert code != 0 and says in log and "LedgerError" not in log, log[-3000:]
