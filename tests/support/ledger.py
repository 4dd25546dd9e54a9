"""What the ledger integration tests share: the config, the input, the model, the checks.

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
(``over_budget: dead_letter``; the rebalance test drops them) so every
input shows up exactly once in the output or the dead letters, and the kill
points can follow progress.
"""

from __future__ import annotations

import contextlib
import json
from collections import Counter
from collections.abc import AsyncIterator, Sequence
from typing import Any

from aiokafka import ConsumerRecord
from aiokafka.admin import AIOKafkaAdminClient
from privstream.ledger import LedgerPolicy, SubjectLedger

from tests.support.faults import (
    Tail,
    poll_until,
)
from tests.support.worker_proc import (
    Message,
    WorkerProcess,
    produce,
    read_all,
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
    await produce(bootstrap, topic, [(k, v, []) for k, v, _ in messages], [t for *_, t in messages])


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
    deployment: str,
) -> None:
    """The committed changelog, restored, holds exactly what the released records cost,
    and the marker of ``deployment`` (its ``kafka.group_id``) alone."""
    spent: Counter[tuple[int, int, bytes]] = Counter()
    lifetime: Counter[tuple[int, bytes]] = Counter()
    counts: dict[int, Counter[str]] = {}
    for r, why in zip(raw, expected, strict=True):
        counts.setdefault(r.partition, Counter())[why or "released"] += 1
        if why is None:
            spent[r.partition, r.timestamp - r.timestamp % HOUR_MS, r.key] += 1
            lifetime[r.partition, r.key] += 1
    ledger = SubjectLedger(policy=policy, deployment=deployment)
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
        marks = [k for k in snapshot if k[1:2] == b"D"]
        assert marks == [b"\x01D" + deployment.encode()], f"partition {partition}: {marks}"
        got = {k: v for k, v in ledger.counts(partition).items() if v}
        assert got == dict(counts[partition]), f"partition {partition}: counts differ"


async def group_committed(bootstrap: str, group: str) -> int:
    """Records the group has committed, summed over its partitions (0 before any commit)."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        offsets = await admin.list_consumer_group_offsets(group)
    finally:
        await admin.close()
    return sum(max(meta.offset, 0) for meta in offsets.values())
