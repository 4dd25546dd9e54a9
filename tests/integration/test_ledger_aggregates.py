"""`privstream run` with aggregates beside the per-subject ledger, on a real broker.

The record path decides each contribution (subject, aggregate window, ledger window)
before the record's own release, and commits the decision and its charge with the
batch; the aggregate stream adds a record only once its decision is committed, and only
if it was admitted (docs/proofs/ledger-aggregates.md, steps 7 and 8). Everything is
recomputed from the raw input as the broker holds it, with ``JointLedger`` (the
decision's reference, one record at a time): the dead letters, the changelog's spending
and decision rows, and each window's released rows byte for byte (the file-mode pieces
and the test noise key over the records whose contributions were admitted).

A record costs epsilon 1.0, a window of ``by_os`` 1.0 (twice its 0.5), the cap is 5.0
per day. ``heavy`` sends 6 records into each of two windows: its first window and 4
records fit, then nothing (its second window is refused: it stops contributing).
``medium`` sends 3 then 1: its second window fits (4 + 1) but not that window's record,
which is dead-lettered and still counted (its contribution was admitted). Eight light
subjects send one record per window.
"""

from __future__ import annotations

import datetime
import json
import time
from collections import Counter
from pathlib import Path
from typing import Any

import orjson
from privstream.aggregates.windows import window_label, window_start
from privstream.config import load_config

from tests.support import aggregate_stream as agg
from tests.support import ledger as ledger_support
from tests.support import ledger_aggregates as la
from tests.support.aggregate_stream import running
from tests.support.broker import create_topics
from tests.support.faults import fault_topics, poll_until
from tests.support.kill_nine import KillPlan, stream_with_kills
from tests.support.worker_proc import (
    Collector,
    WorkerProcess,
    produce,
    read_all,
    unique_topics,
    write_config,
)

SIZE_S, GRACE_S = 3, 8
SIZE = SIZE_S * 1000
PARTITIONS = 2
LEDGER: dict[str, Any] = {
    "window": "1d",
    "epsilon": 5.0,
    "over_budget": "dead_letter",
    "grace": "1d",
    "max_future": "5m",
}
#: subject -> its records in the first and in the second window
SENDS = {"heavy": (6, 6), "medium": (3, 1), **{f"light{i}": (1, 1) for i in range(8)}}


async def test_contributions_are_charged_once_and_stop_at_the_cap(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    kafka, out, config = await _setup(kafka_bootstrap, tmp_path)
    worker = WorkerProcess(config, tmp_path / "worker.log")
    await worker.start()
    async with running(worker), Collector(kafka_bootstrap, out) as rows:
        await poll_until(
            lambda: _epoch(kafka_bootstrap, kafka),
            60,
            "the aggregates' epoch committed",
            every_s=0.2,
            why=lambda: worker.log_text()[-3000:],
        )
        base = window_start(time.time_ns() // 1_000_000, SIZE) + 2 * SIZE
        messages, stamps = _input(base)
        await produce(kafka_bootstrap, kafka["input_topic"], messages, stamps)
        second = window_label(base + SIZE, SIZE)
        await poll_until(
            lambda: _released(rows, {window_label(base, SIZE), second}),
            90,
            "both windows released",
            every_s=0.2,
            why=lambda: worker.log_text()[-3000:],
        )
        total = len(messages)
        await poll_until(
            lambda: _sanitized(kafka_bootstrap, kafka, total),
            60,
            "every record released or dead-lettered",
            every_s=0.2,
        )
    loaded = load_config(config)
    raw = await read_all(kafka_bootstrap, kafka["input_topic"], PARTITIONS)
    raw.sort(key=lambda m: (m.partition, m.offset))
    reference, verdicts = la.reference(loaded, raw)
    # the records: released or dead-lettered exactly as the reference decides
    dead = await read_all(kafka_bootstrap, kafka["dead_letter_topic"], 1)
    released = await read_all(kafka_bootstrap, kafka["output_topic"], PARTITIONS)
    refused = Counter(m.key for m, v in zip(raw, verdicts, strict=True) if not v.released)
    assert Counter(m.key for m in dead) == refused
    assert len(released) == len(raw) - sum(refused.values())
    assert refused[b"heavy"] == 8 and refused[b"medium"] == 1
    # the changelog: every subject's spending and every decision, charged once each
    changelog = await la.changelog_rows(kafka_bootstrap, loaded, PARTITIONS)
    assert changelog == la.expected_rows(loaded, reference)
    heavy = {k[2]: v for k, v in reference.decided.items() if k[0] == b"heavy"}
    medium = {k[2]: v for k, v in reference.decided.items() if k[0] == b"medium"}
    assert heavy == {base: True, base + SIZE: False}
    assert medium == {base: True, base + SIZE: True}
    # the windows: what the admitted contributions make, byte for byte, released once
    joined = [m for m, v in zip(raw, verdicts, strict=True) if v.contributes[0]]
    starts = [base, base + SIZE]
    want = la.window_rows(loaded, joined, starts, PARTITIONS)
    assert want != la.window_rows(loaded, raw, starts, PARTITIONS)  # the ledger left some out
    copies = agg.released(rows.records)
    got = {k: v for k, v in copies.items() if k[1] in {window_label(base, SIZE), second}}
    assert all(len(v) == 1 for v in got.values()), "a window released twice"
    assert {k: v[0] for k, v in got.items()} == want


async def _setup(bootstrap: str, tmp: Path) -> tuple[dict[str, str], str, Path]:
    kafka = unique_topics("ledgeragg")
    out = f"{kafka['input_topic']}.aggregates"
    await create_topics(bootstrap, [kafka["input_topic"]], partitions=PARTITIONS)
    await create_topics(bootstrap, [kafka["output_topic"]], partitions=PARTITIONS)
    await create_topics(bootstrap, [kafka["dead_letter_topic"], out])
    window = {"size_seconds": SIZE_S, "grace_seconds": GRACE_S}
    by_os = {
        "name": "by_os",
        "query": "histogram",
        "field": "os",
        "epsilon": 0.5,
        "window": window,
        "output_topic": out,
        "contribution": {"records_per_group": 2, "groups_per_subject": 2},
    }
    body = {
        "privacy": {"epsilon": 10.0, "delta": 1e-6, "subject": "user", "ledger": LEDGER},
        "fields": agg.FIELDS,
        "aggregates": [by_os],
    }
    kafka = {**kafka, "transactions": True}
    return kafka, out, write_config(tmp / "config.yaml", bootstrap, kafka, body)


def _input(base: int) -> tuple[list[tuple[bytes, bytes, list[Any]]], list[int | None]]:
    """Each subject's records, interleaved, ascending in time through the two windows."""
    timed = []
    for i, (subject, counts) in enumerate(SENDS.items()):
        for window, count in enumerate(counts):
            for j in range(count):
                at = base + window * SIZE + 7 * i + 100 * j
                timed.append((at, subject, j))
    timed.sort()
    messages = []
    for _, subject, j in timed:
        os_name = ("ios", "android", "web")[j % 3]
        value = {"user": subject, "os": os_name, "latency": 10 * j}
        messages.append((subject.encode(), json.dumps(value).encode(), []))
    return messages, [at for at, *_ in timed]


async def _released(rows: Collector, labels: set[str]) -> bool:
    return {orjson.loads(m.value)["window"] for m in rows.records} >= labels


async def _epoch(bootstrap: str, kafka: dict[str, str]) -> int | None:
    return (await agg.view(bootstrap, kafka)).epoch_ms


async def _sanitized(bootstrap: str, kafka: dict[str, str], total: int) -> bool:
    out = await read_all(bootstrap, kafka["output_topic"], PARTITIONS)
    dead = await read_all(bootstrap, kafka["dead_letter_topic"], 1)
    return len(out) + len(dead) >= total


KILL_SIZE_S, KILL_GRACE_S = 10, 45
#: subjects of the kill test: about ten records each, in several windows
KILL_SUBJECTS = 400


async def test_kill_nine_the_same_decisions_and_windows(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    """kill -9 three times while a changelog transaction is open (``kill_nine``'s loop),
    then a last worker releases the windows: the committed changelog holds exactly the
    reference's spending and decisions (a replay decided the cut batches again the same
    way, never a second charge), and every window is released once, byte for byte what
    the admitted contributions make. The grace (45 s) covers the restarts: no record is
    late for its window."""
    total, kills = 4_000, 3
    kafka = await fault_topics(kafka_bootstrap, "ledgeragg-kill")
    out = f"{kafka['input_topic']}.aggregates"
    await create_topics(kafka_bootstrap, [out])
    window = {"size_seconds": KILL_SIZE_S, "grace_seconds": KILL_GRACE_S}
    by_state = {
        "name": "by_state",
        "query": "histogram",
        "field": "state",
        "epsilon": 0.75,
        "window": window,
        "output_topic": out,
        "contribution": {"records_per_group": 1, "groups_per_subject": 1},
    }
    overrides = {**kafka, "transactions": True, "max_batch_records": 200}
    overrides["session_timeout_ms"] = 6_000
    body = ledger_support.body()
    # the fields' 1.5 and the aggregate's 2 x 0.75; a window costs the ledger 1.5 as a
    # record does, so a subject with two records in its first window (3 x 1.5 = 4.5,
    # the cap) is left out of every later window
    body["privacy"]["epsilon"] = 3.0
    body["aggregates"] = [by_state]
    config = write_config(tmp_path / "config.yaml", kafka_bootstrap, overrides, body)
    changelog = f"{kafka['input_topic']}-privstream-ledger"
    messages = [_subject_message(i) for i in range(total)]
    plan = KillPlan([int(total * f) for f in (0.2, 0.45, 0.7)], total, ahead=1_000, chunk=250)
    run = await stream_with_kills(
        kafka_bootstrap,
        kafka,
        config,
        messages,
        plan,
        logs=tmp_path,
        identity=ledger_support.seq,
        watch=(changelog, 4),
    )
    summary = f"kills={run.kills}"
    assert run.kills_before(total) == kills, summary
    loaded = load_config(config)
    raw = await read_all(kafka_bootstrap, kafka["input_topic"], 4)
    raw.sort(key=lambda m: (m.partition, m.offset))
    size = KILL_SIZE_S * 1000
    last = window_start(max(m.timestamp for m in raw), size)
    worker = WorkerProcess(config, tmp_path / "last.log")
    await worker.start()
    async with running(worker), Collector(kafka_bootstrap, out) as rows:
        await poll_until(
            lambda: _released(rows, {window_label(last, size)}),
            KILL_GRACE_S + 90,
            "the last window released",
            every_s=0.5,
            why=lambda: worker.log_text()[-3000:],
        )
        first = (await agg.view(kafka_bootstrap, kafka)).first_window("by_state", size)
    assert first is not None
    reference, verdicts = la.reference(loaded, raw)
    dead = await read_all(kafka_bootstrap, kafka["dead_letter_topic"], 2)
    refused = Counter(m.key for m, v in zip(raw, verdicts, strict=True) if not v.released)
    assert Counter(m.key for m in dead) == refused, summary
    assert await la.changelog_rows(kafka_bootstrap, loaded, 4) == la.expected_rows(
        loaded, reference
    ), summary
    assert not all(v.contributes[0] for v in verdicts)  # the caps bit: some left out
    joined = [m for m, v in zip(raw, verdicts, strict=True) if v.contributes[0]]
    starts = list(range(first, last + size, size))
    want = la.window_rows(loaded, joined, starts, 4)
    copies = agg.released(rows.records)
    got = {k: v for k, v in copies.items() if first <= _start_of(k[1]) <= last}
    assert all(len(v) == 1 for v in got.values()), "a window released twice"
    assert {k: v[0] for k, v in got.items()} == want, summary


def _subject_message(i: int) -> tuple[bytes, bytes, list[Any]]:
    """Input ``i``: subject ``s<i mod KILL_SUBJECTS>``, keyed by it, stamped when produced."""
    subject = f"s{i % KILL_SUBJECTS}"
    state = ("TX", "CA", "NY")[i % 3]
    value = {"device_id": subject, "seq": i, "salary": i % 100, "state": state}
    return subject.encode(), json.dumps(value).encode(), []


def _start_of(label: str) -> int:
    stamp = datetime.datetime.strptime(label.split("/")[0], "%Y-%m-%dT%H:%M:%S.%fZ")
    return int(stamp.replace(tzinfo=datetime.UTC).timestamp() * 1000)
