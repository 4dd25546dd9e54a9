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

import json
import struct
import time
from collections import Counter
from functools import reduce
from pathlib import Path
from typing import Any

import orjson
from aiokafka import ConsumerRecord
from privstream.aggregates import KeyedCells, Partial, build_aggregates, merge, release
from privstream.aggregates.windows import window_label, window_start
from privstream.config import AppConfig, load_config
from privstream.kinds import build_plan
from privstream.ledger import LedgerPolicy, SubjectLedger, codec
from privstream.ledger.aggregate_charges import JointLedger
from privstream.pipeline.subjects import subject_column
from privstream.worker.aggregate_charges import aggregate_costs_of

from tests.support import aggregate_stream as agg
from tests.support.aggregate_stream import running
from tests.support.broker import create_topics
from tests.support.faults import poll_until
from tests.support.worker_proc import (
    TEST_SECRET,
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
    reference, verdicts = _reference(loaded, raw)
    # the records: released or dead-lettered exactly as the reference decides
    dead = await read_all(kafka_bootstrap, kafka["dead_letter_topic"], 1)
    released = await read_all(kafka_bootstrap, kafka["output_topic"], PARTITIONS)
    refused = Counter(m.key for m, v in zip(raw, verdicts, strict=True) if not v.released)
    assert Counter(m.key for m in dead) == refused
    assert len(released) == len(raw) - sum(refused.values())
    assert refused[b"heavy"] == 8 and refused[b"medium"] == 1
    # the changelog: every subject's spending and every decision, charged once each
    assert await _changelog(kafka_bootstrap, kafka, loaded) == _expected_rows(loaded, reference)
    heavy = {k[2]: v for k, v in reference.decided.items() if k[0] == b"heavy"}
    medium = {k[2]: v for k, v in reference.decided.items() if k[0] == b"medium"}
    assert heavy == {base: True, base + SIZE: False}
    assert medium == {base: True, base + SIZE: True}
    # the windows: what the admitted contributions make, byte for byte, released once
    joined = [m for m, v in zip(raw, verdicts, strict=True) if v.contributes[0]]
    want = _rows(loaded, joined, [base, base + SIZE])
    assert want != _rows(loaded, raw, [base, base + SIZE])  # the ledger left some out
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


def _reference(config: AppConfig, raw: list[ConsumerRecord]) -> tuple[JointLedger, list[Any]]:
    """The decisions, one record at a time in offset order (a subject's records share a
    partition, so one reference serves both)."""
    policy = LedgerPolicy.from_config(config, build_plan(config))
    reference = JointLedger(policy, aggregate_costs_of(config))
    verdicts = [reference.admit(m.key, m.timestamp, m.timestamp) for m in raw]
    return reference, verdicts


def _expected_rows(config: AppConfig, reference: JointLedger) -> dict[bytes, bytes]:
    """The reference's spending and decisions as the changelog's ``W`` and ``A`` rows."""
    window_ms = reference.policy.window_ms
    rows = {
        codec.window_prefix(start, window_ms) + subject: struct.pack(">qq", *spent)
        for (subject, start), spent in reference.spent.items()
    }
    (cost,) = aggregate_costs_of(config)
    for (subject, _, start, ledger_start), admitted in reference.decided.items():
        key = codec.decision_prefix((ledger_start, window_ms), start, cost.partial_id) + subject
        rows[key] = codec.encode_decision(start + cost.window_ms + cost.grace_ms, admitted)
    return rows


async def _changelog(
    bootstrap: str, kafka: dict[str, str], config: AppConfig
) -> dict[bytes, bytes]:
    """The committed changelog's ``W`` and ``A`` rows, restored as the worker does."""
    topic = f"{kafka['input_topic']}-privstream-ledger"
    records = await read_all(bootstrap, topic, PARTITIONS)
    policy = LedgerPolicy.from_config(config, build_plan(config))
    ledger = SubjectLedger(
        policy=policy, deployment=kafka["group_id"], aggregates=aggregate_costs_of(config)
    )
    snap: dict[bytes, bytes] = {}
    for partition in range(PARTITIONS):
        ledger.restore(partition, [(m.key, m.value) for m in records if m.partition == partition])
        snap.update(ledger.snapshot(partition))
    return {k: v for k, v in snap.items() if k[:2] in (codec.WINDOW, codec.DECISION)}


def _rows(
    config: AppConfig, records: list[ConsumerRecord], starts: list[int]
) -> dict[tuple[str, str, str], bytes]:
    """(aggregate, window, group) -> the row an uncrashed worker releases over ``records``."""
    noise = KeyedCells(TEST_SECRET, config.kafka.input_topic, config.kafka.noise_domain)
    out = {}
    for plan in build_aggregates(config):
        for start in starts:
            label = window_label(start, SIZE)
            parts = []
            for partition in range(PARTITIONS):
                acc = plan.accumulator(label)
                for m in records:
                    if m.partition == partition and window_start(m.timestamp, SIZE) == start:
                        acc.add(orjson.loads(m.value), subject_column([m.value], "user")[0])
                parts.append(acc.partial())
            merged = reduce(merge, parts, Partial(plan.name, label))
            for row in release(plan, merged, noise):
                group = json.dumps(row["group"], sort_keys=True)
                out[plan.name, label, group] = orjson.dumps(row)
    return out


async def _released(rows: Collector, labels: set[str]) -> bool:
    return {orjson.loads(m.value)["window"] for m in rows.records} >= labels


async def _epoch(bootstrap: str, kafka: dict[str, str]) -> int | None:
    return (await agg.view(bootstrap, kafka)).epoch_ms


async def _sanitized(bootstrap: str, kafka: dict[str, str], total: int) -> bool:
    out = await read_all(bootstrap, kafka["output_topic"], PARTITIONS)
    dead = await read_all(bootstrap, kafka["dead_letter_topic"], 1)
    return len(out) + len(dead) >= total
