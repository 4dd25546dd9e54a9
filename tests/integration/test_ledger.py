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
import time
from collections import Counter
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaProducer, ConsumerRecord

from tests.http_get import http_get
from tests.integration.faults import (
    Tail,
    fault_topics,
    free_port,
    poll_until,
    samples,
)
from tests.integration.worker_proc import (
    WorkerProcess,
    read_all,
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
) -> dict[str, int]:
    """Released exactly the model's records, once each; dead-lettered the rest, once each,
    with the model's reason. Returns the count of each reason."""
    topic = raw[0].topic
    released = Counter(seq(r) for r in out)
    twice = [s for s, c in released.items() if c > 1]
    assert not twice, f"released more than once: seqs {twice[:10]}; {summary}"
    want = {seq(r) for r, why in zip(raw, expected, strict=True) if why is None}
    extra, missing = sorted(released.keys() - want), sorted(want - released.keys())
    assert not extra, f"released over a cap: seqs {extra[:10]} ({len(extra)}); {summary}"
    assert not missing, f"not released within a cap: {missing[:10]} ({len(missing)}); {summary}"
    why_of = {
        f"{topic}/{r.partition}/{r.offset}": why for r, why in zip(raw, expected, strict=True)
    }
    letters = Counter(source(r) for r in dead)
    assert not [s for s, c in letters.items() if c > 1], f"dead letter twice; {summary}"
    assert letters.keys() == {s for s, why in why_of.items() if why is not None}, summary
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
        assert counts["released"] == sum(1 for o in out if o.partition == partition), counts
    scraped = samples(text)
    suppressed = {
        dict(labels)["reason"]: value
        for (name, labels), value in scraped.items()
        if name == "privstream_ledger_suppressed_total"
    }
    assert suppressed == reasons, suppressed
    assert scraped["privstream_ledger_subjects", ()] > 0
