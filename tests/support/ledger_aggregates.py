"""What the ledger-with-aggregates integration tests recompute from the raw input.

``reference`` decides every raw record one at a time in offset order with
``JointLedger`` (docs/proofs/ledger-aggregates.md); ``expected_rows`` is its spending
and decisions as the changelog's ``W`` and ``A`` rows, ``changelog_rows`` the committed
changelog restored as the worker does, and ``window_rows`` the rows an uncrashed worker
releases over the records whose contributions were admitted (the file-mode pieces and
the test noise key).
"""

from __future__ import annotations

import json
import struct
from functools import reduce
from typing import Any

import orjson
from aiokafka import ConsumerRecord
from privstream.aggregates import KeyedCells, Partial, build_aggregates, merge, release
from privstream.aggregates.windows import window_label, window_start
from privstream.config import AppConfig
from privstream.kinds import build_plan
from privstream.ledger import LedgerPolicy, SubjectLedger, codec
from privstream.ledger.aggregate_charges import JointLedger, Verdict
from privstream.pipeline.subjects import subject_column
from privstream.worker.aggregate_charges import aggregate_costs_of

from tests.support.worker_proc import TEST_SECRET, read_all


def reference(config: AppConfig, raw: list[ConsumerRecord]) -> tuple[JointLedger, list[Verdict]]:
    """The decisions, one record at a time in offset order per partition (a subject's
    records share a partition, so one reference serves all). Every record must pass the
    ledger's screen (keyed by its subject, neither late nor in the future)."""
    policy = LedgerPolicy.from_config(config, build_plan(config))
    joint = JointLedger(policy, aggregate_costs_of(config))
    return joint, [joint.admit(m.key, m.timestamp, m.timestamp) for m in raw]


def expected_rows(config: AppConfig, joint: JointLedger) -> dict[bytes, bytes]:
    """The reference's spending and admitted decisions as the changelog's ``W`` and ``A``
    rows (a refusal is not written: deciding it again refuses it again, proof step 8)."""
    window_ms = joint.policy.window_ms
    rows = {
        codec.window_prefix(start, window_ms) + subject: struct.pack(">qq", *spent)
        for (subject, start), spent in joint.spent.items()
    }
    costs = aggregate_costs_of(config)
    for (subject, index, start, ledger_start), admitted in joint.decided.items():
        if not admitted:
            continue
        cost = costs[index]
        prefix = codec.decision_prefix((ledger_start, window_ms), start, cost.partial_id)
        kept = start + cost.window_ms + cost.grace_ms
        rows[prefix + subject] = codec.encode_decision(kept, admitted)
    return rows


async def changelog_rows(bootstrap: str, config: AppConfig, partitions: int) -> dict[bytes, bytes]:
    """The committed changelog's ``W`` and ``A`` rows, restored as the worker does."""
    kafka = config.needs_kafka("run")
    records = await read_all(bootstrap, f"{kafka.input_topic}-privstream-ledger", partitions)
    policy = LedgerPolicy.from_config(config, build_plan(config))
    costs = aggregate_costs_of(config)
    ledger = SubjectLedger(policy=policy, deployment=kafka.group_id, aggregates=costs)
    snap: dict[bytes, bytes] = {}
    for partition in range(partitions):
        ledger.restore(partition, [(m.key, m.value) for m in records if m.partition == partition])
        snap.update(ledger.snapshot(partition))
    return {k: v for k, v in snap.items() if k[:2] in (codec.WINDOW, codec.DECISION)}


def window_rows(
    config: AppConfig, records: list[ConsumerRecord], starts: list[int], partitions: int
) -> dict[tuple[str, str, str], bytes]:
    """(aggregate, window, group) -> the row an uncrashed worker releases over ``records``
    (offset order per partition) for each window start."""
    kafka = config.needs_kafka("run")
    noise = KeyedCells(TEST_SECRET, kafka.input_topic, kafka.noise_domain)
    subject = config.privacy.subject or ""
    out = {}
    for plan in build_aggregates(config):
        size = plan.spec.window.size_seconds * 1000 if plan.spec.window else 0
        for start in starts:
            label = window_label(start, size)
            parts = []
            for partition in range(partitions):
                acc = plan.accumulator(label)
                for m in records:
                    if m.partition == partition and window_start(m.timestamp, size) == start:
                        acc.add(orjson.loads(m.value), subject_column([m.value], subject)[0])
                parts.append(acc.partial())
            merged = reduce(merge, parts, Partial(plan.name, label))
            for row in release(plan, merged, noise):
                out[plan.name, label, _group(row["group"])] = orjson.dumps(row)
    return out


def _group(group: dict[str, Any]) -> str:
    return json.dumps(group, sort_keys=True)
