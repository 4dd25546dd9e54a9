"""The ledger store's parts that need no broker: routing a charged batch, its headers.

Restore, the changelog transaction and the topic checks run against a real
broker in tests/integration/test_ledger.py.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
from typing import Any

import numpy as np
import pytest
from aiokafka import ConsumerRecord
from aiokafka.partitioner import DefaultPartitioner
from aiokafka.record.default_records import DefaultRecordBatchBuilder
from hypothesis import given, settings
from hypothesis import strategies as st
from privstream.config import parse_config
from privstream.config.runtime import Runtime
from privstream.errors import LedgerError
from privstream.kinds import build_plan
from privstream.metrics import Metrics
from privstream.pipeline import BatchResult
from privstream.pipeline.results import DeadLetter, Observation
from privstream.pipeline.subjects import subject_column
from privstream.worker.ledger_store import LedgerStore, Verdict
from privstream.worker.partitioner import partitions_of
from prometheus_client import CollectorRegistry

from tests.support.configs import config_dict, consumer_record
from tests.unit.worker.test_units import SizeLimitedProducer, sender_for

FIELDS = [
    {"name": "device_id", "kind": "drop"},
    {"name": "x", "kind": "real", "bounds": [0, 10], "epsilon": 1.0},
]


def store(over_budget: str) -> LedgerStore:
    """Records cost epsilon 1; a subject may have 2 released per day."""
    data = config_dict(FIELDS, epsilon=1.0)
    ledger = {"window": "1d", "epsilon": 2.0, "over_budget": over_budget}
    data["privacy"].update({"subject": "device_id", "ledger": ledger})
    config = parse_config(data)
    made = LedgerStore.from_config(
        config, build_plan(config), Runtime(b"k" * 32, "r0", None), Metrics(CollectorRegistry())
    )
    assert made is not None
    return made


def record(offset: int, subject: str, key: str, partition: int = 0) -> ConsumerRecord[Any, Any]:
    value = json.dumps({"device_id": subject, "x": 1.0}).encode()
    return consumer_record(offset, value, key.encode(), partition=partition)


def charge(s: LedgerStore, records: list[ConsumerRecord[Any, Any]], result: BatchResult) -> Verdict:
    """``LedgerStore.charge`` given each record's partition, as the worker gives them."""
    return s.charge(records, result, np.array([r.partition for r in records], dtype=np.int64))


def subjects(records: list[ConsumerRecord[Any, Any]], result: BatchResult) -> BatchResult:
    """``result`` with the subject column ``sanitize(..., subject=)`` gives the ledger."""
    values = [records[i].value for i in result.output_index]
    return dataclasses.replace(result, subjects=subject_column(values, "device_id"))


def suppressed(s: LedgerStore) -> dict[str, float]:
    registry = s._metrics.registry
    return {
        reason: registry.get_sample_value("privstream_ledger_suppressed_total", {"reason": reason})
        or 0.0
        for reason in ("budget_exhausted", "subject_key_mismatch")
    }


@pytest.mark.parametrize("over_budget", ["drop", "dead_letter"])
def test_a_batch_is_released_up_to_the_cap_and_the_rest_routed_by_policy(
    over_budget: str,
) -> None:
    s = store(over_budget)
    s.ledger.restore(0, [])
    # subject a four times, one record keyed by someone else, one the pipeline refused
    records = [record(10 + i, "a", "a") for i in range(4)]
    records += [record(14, "b", "x"), record(15, "c", "c")]
    result = BatchResult(
        outputs=[b"out-%d" % i for i in range(5)],
        output_index=[0, 1, 2, 3, 4],
        dead_letters=[DeadLetter(5, "invalid_json", "not JSON")],
        observations={"x": Observation(clamped=1)},
    )
    verdict = charge(s, records, subjects(records, result))
    # suppressed records must not reach the clamped counts: the batch feeds them nothing
    assert result.observations == {} and verdict.result.observations == {}
    assert verdict.result.outputs == [b"out-0", b"out-1"]
    assert verdict.result.output_index == [0, 1]
    letters = [(d.index, d.reason) for d in verdict.result.dead_letters]
    if over_budget == "drop":
        assert verdict.dropped == 2
        assert letters == [(4, "subject_key_mismatch"), (5, "invalid_json")]
    else:
        assert verdict.dropped == 0
        assert letters == [
            (2, "budget_exhausted"),
            (3, "budget_exhausted"),
            (4, "subject_key_mismatch"),
            (5, "invalid_json"),
        ]
    # the counts ride on the partition's last released record only
    assert list(verdict.headers) == [1]
    [(name, counts)] = verdict.headers[1]
    assert name == "privstream-ledger-counts"
    assert json.loads(counts) == {
        "partition": 0,
        "released": 2,
        "budget_exhausted": 2,
        "subject_key_mismatch": 1,
        "lifetime_exhausted": 0,
        "late_record": 0,
        "future_record": 0,
        "subject_partition_mismatch": 0,
        "subject_too_long": 0,
        "no_subject": 0,
    }
    # suppressions are counted once the batch commits (a voided batch is charged again)
    assert suppressed(s) == {"budget_exhausted": 0.0, "subject_key_mismatch": 0.0}
    s.committed(verdict)
    assert suppressed(s) == {"budget_exhausted": 2.0, "subject_key_mismatch": 1.0}
    assert s._metrics.registry.get_sample_value("privstream_ledger_subjects") == 1.0
    assert verdict.updates[0], "the charge must be written to the changelog"
    assert s.output_headers == [("privstream-subject-guarantee", b"eps=2;delta=0;window=1d")]


def test_the_next_batch_sees_what_the_last_one_spent() -> None:
    s = store("dead_letter")
    s.ledger.restore(0, [])
    seen = {"x": Observation(clamped=1)}
    one = [record(1, "a", "a")]
    first = charge(
        s, one, subjects(one, BatchResult(outputs=[b"o"], output_index=[0], observations=seen))
    )
    assert first.result.outputs == [b"o"]
    assert first.result.observations == {"x": Observation(clamped=1)}  # all admitted: kept
    records = [record(2, "a", "a"), record(3, "a", "a")]
    second = charge(s, records, subjects(records, BatchResult([b"p", b"q"], [0, 1])))
    assert second.result.outputs == [b"p"]
    assert [d.reason for d in second.result.dead_letters] == ["budget_exhausted"]


def test_a_result_without_its_subject_column_is_refused_not_charged() -> None:
    s = store("drop")
    s.ledger.restore(0, [])
    with pytest.raises(LedgerError, match="without its subject column"):
        charge(s, [record(1, "a", "a")], BatchResult(outputs=[b"o"], output_index=[0]))


def test_a_subject_column_of_another_length_is_refused_not_charged() -> None:
    """A column one subject short or long is shifted against the outputs somewhere."""
    s = store("drop")
    s.ledger.restore(0, [])
    records = [record(1, "a", "a"), record(2, "b", "b")]
    for column in ([b"a"], [b"a", b"b", b"c"]):
        result = BatchResult(outputs=[b"o", b"p"], output_index=[0, 1], subjects=column)
        with pytest.raises(LedgerError, match=r"2 outputs came with \d subjects"):
            charge(s, records, result)


def test_outputs_out_of_input_order_are_charged_to_their_own_subjects() -> None:
    """``charge`` sorts the outputs by input index: their subjects move with them."""
    s = store("dead_letter")
    s.ledger.restore(0, [])
    records = [record(1, "a", "a"), record(2, "a", "a"), record(3, "b", "b")]
    result = BatchResult(
        outputs=[b"ob", b"oa1", b"oa2"], output_index=[2, 0, 1], subjects=[b"b", b"a", b"a"]
    )
    verdict = charge(s, records, result)
    assert verdict.result.dead_letters == [] and verdict.result.output_index == [2, 0, 1]
    more = [record(4, "a", "a"), record(5, "b", "b")]
    after = charge(s, more, subjects(more, BatchResult([b"oa3", b"ob2"], [0, 1])))
    # a has spent its two releases, b one
    assert after.result.outputs == [b"ob2"]
    assert [(d.index, d.reason) for d in after.result.dead_letters] == [(0, "budget_exhausted")]


async def test_a_partition_never_restored_is_refused_not_charged_from_empty() -> None:
    with pytest.raises(LedgerError, match=r"partitions \[3\] not restored"):
        await store("drop").ready([3])


def test_the_quick_size_check_agrees_with_the_producers_estimate_with_counts_headers() -> None:
    """Partition headers (the ledger's counts) shrink what passes without an estimate."""
    limit = 4_096
    sender = sender_for(SizeLimitedProducer(limit))
    counts = json.dumps({"released": 10**9, "budget_exhausted": 10**9}).encode()
    headers, fits = sender._with([("privstream-ledger-counts", counts)])
    for length in range(limit - 500, limit + 2):
        value = b"x" * length
        too_large = DefaultRecordBatchBuilder.estimate_size_in_bytes(None, value, headers) > limit
        assert (length > fits and sender._too_large(value, headers)) == too_large


@pytest.mark.parametrize("over_budget", ["drop", "dead_letter"])
def test_a_record_off_its_keys_partition_is_dead_lettered_not_charged(over_budget: str) -> None:
    """One subject on two partitions would have two ledgers: one budget per partition."""
    s = store(over_budget)
    s._input_partitions = 4  # as the changelog check found the input
    keys = [f"dev-{i}" for i in range(40)]
    home = {key: int(partitions_of([key.encode()], 4)[0]) for key in keys}
    here, elsewhere = [k for k in keys if home[k] == 1], [k for k in keys if home[k] != 1]
    s.ledger.restore(1, [])
    records = [record(0, here[0], here[0], partition=1), record(1, elsewhere[0], elsewhere[0], 1)]
    result = BatchResult(outputs=[b"o0", b"o1"], output_index=[0, 1])
    verdict = charge(s, records, subjects(records, result))
    assert verdict.result.outputs == [b"o0"]
    # dead-lettered under both policies: it is a writer's mistake, not a spent budget
    assert [(d.index, d.reason) for d in verdict.result.dead_letters] == [
        (1, "subject_partition_mismatch")
    ]
    assert s.ledger.counts(1)["released"] == 1


DAY_MS = 86_400_000
#: (partition, subject, key: None / "=" the subject / another, timestamp shift in days)
ROWS = st.lists(
    st.tuples(
        st.integers(0, 2),
        st.sampled_from(["a", "bb", "dev-7", "dev-123456", "zz"]),
        st.sampled_from([None, "=", "", "a", "dev-123456"]),
        st.sampled_from([0, 0, 0, -2, 1]),  # now, late (window closed), future
    ),
    max_size=40,
)


@settings(max_examples=120, deadline=None, derandomize=True, database=None)
@given(ROWS)
def test_any_batch_is_charged_as_each_partition_alone_and_none_released_off_its_keys_partition(
    rows: list[tuple[int, str, str | None, int]],
) -> None:
    """Random batches: interleaved partitions, missing keys, keys of mixed lengths (and
    empty), repeated subjects, late and future records. The batch's verdict and ledgers
    are each partition's records charged alone; no released keyed record is off the
    partition aiokafka's own partitioner gives its key."""
    offsets = [0, 0, 0]
    records = []
    for partition, subject, key, days in rows:
        r = record(offsets[partition], subject, subject if key == "=" else key or "", partition)
        offsets[partition] += 1
        object.__setattr__(r, "timestamp", r.timestamp + days * DAY_MS)
        if key is None:
            object.__setattr__(r, "key", None)
        records.append(r)
    whole, alone = store("dead_letter"), store("dead_letter")
    for s in (whole, alone):
        s._input_partitions = 3
        for p in range(3):
            s.ledger.restore(p, [])
    batch = BatchResult(outputs=[b"o"] * len(records), output_index=list(range(len(records))))
    verdict = charge(whole, records, subjects(records, batch))
    ids = [(r.partition, r.offset) for r in records]
    released = {ids[i] for i in verdict.result.output_index}
    reasons = {ids[d.index]: d.reason for d in verdict.result.dead_letters}
    kept: set[tuple[int, int]] = set()
    expected: dict[tuple[int, int], str] = {}
    for p in range(3):
        own = [r for r in records if r.partition == p]
        one = charge(
            alone, own, subjects(own, BatchResult([b"o"] * len(own), list(range(len(own)))))
        )
        kept.update((p, own[i].offset) for i in one.result.output_index)
        expected.update({(p, own[d.index].offset): d.reason for d in one.result.dead_letters})
    assert released == kept and reasons == expected
    assert len(released) + len(reasons) == len(records)
    every = [0, 1, 2]
    for r in records:
        if (r.partition, r.offset) in released and r.key is not None:
            assert DefaultPartitioner()(r.key, every, every) == r.partition
    clock = b"\x01C"  # the wall-clock time of each charge differs
    for p in range(3):
        assert {k: v for k, v in whole.ledger.snapshot(p).items() if k != clock} == {
            k: v for k, v in alone.ledger.snapshot(p).items() if k != clock
        }


@pytest.mark.parametrize("shift", ["shorter", "longer", "runs-swapped", "one-off"])
def test_partitions_that_do_not_match_the_records_are_refused_not_charged(shift: str) -> None:
    s = store("drop")
    for p in range(2):
        s.ledger.restore(p, [])
    records = [record(i, "a", "a", partition=0) for i in range(3)]
    records += [record(i, "b", "b", partition=1) for i in range(2)]
    partitions = {
        "shorter": [0, 0, 0, 1],
        "longer": [0, 0, 0, 1, 1, 1],
        "runs-swapped": [1, 1, 0, 0, 0],
        "one-off": [0, 0, 1, 1, 1],
    }[shift]
    result = subjects(records, BatchResult([b"o"] * 5, list(range(5))))
    with pytest.raises(LedgerError, match="partitions that do not match"):
        s.charge(records, result, np.array(partitions, dtype=np.int64))
    assert s.ledger.snapshot(0) == s.ledger.snapshot(1) == {}


def test_a_subject_too_long_for_the_changelog_is_dead_lettered_even_under_drop() -> None:
    """A writer's oversized key must not reach the changelog (the broker would refuse the
    record and the batch would fail on every replay): the record is dead-lettered."""
    s = store("drop")
    s.ledger.restore(0, [])
    huge = "d" * 5_000
    records = [record(10, huge, huge), record(11, "a", "a")]
    verdict = charge(s, records, subjects(records, BatchResult([b"o1", b"o2"], [0, 1])))
    assert [(d.index, d.reason) for d in verdict.result.dead_letters] == [(0, "subject_too_long")]
    assert verdict.result.output_index == [1] and verdict.dropped == 0
    assert all(len(key) < 100 for key, _ in verdict.updates[0])


async def test_an_idle_replica_restores_nothing_and_logs_no_error(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """More replicas than partitions: one is assigned none at a rebalance. A restore of
    no partition asked the changelog reader to seek "every assigned partition" and
    raised in a task nobody awaited: an ERROR traceback at each rebalance (issue 30)."""
    s = store("drop")
    before = asyncio.all_tasks()
    with caplog.at_level(logging.DEBUG):
        s.assigned(set())
        await s.ready([])  # the worker asks before a batch: nothing to wait for
    assert asyncio.all_tasks() == before  # no restore task was started
    assert [(r.levelno, r.getMessage()) for r in caplog.records] == [
        (logging.INFO, "no input partitions assigned: no ledger to restore")
    ]
