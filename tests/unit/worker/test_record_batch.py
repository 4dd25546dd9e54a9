"""The changelog's numpy-built record batches against aiokafka's own builder and reader."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import random
import struct

import numpy as np
import pytest
from aiokafka import TopicPartition
from aiokafka.producer.message_accumulator import MessageAccumulator
from aiokafka.producer.transaction_manager import TransactionManager
from aiokafka.record.default_records import (
    DefaultRecordBatch,
    DefaultRecordBatchBuilder,
    _DefaultRecordBatchBuilderPy,
)
from privstream.ledger import SubjectLedger
from privstream.ledger.updates import Updates
from privstream.worker.record_batch import HEADER_BYTES, changelog_batches, varint

from tests.unit.ledger.test_charge import POLICY

TIMESTAMP = 1_732_406_400_123
PRODUCER = (4_711, 3, 90_000)


def random_updates(rng: random.Random, records: int) -> Updates:
    """Runs as the ledger writes them: one-record puts, valued runs, tombstone runs."""
    updates = Updates()
    while len(updates) < records:
        kind = rng.choice(["put", "put-none", "values", "tombstones"])
        if kind.startswith("put"):
            value = None if kind == "put-none" else rng.randbytes(rng.choice([8, 70, 200]))
            updates.put(b"\x01" + rng.randbytes(rng.randint(1, 3)), value)
            continue
        count = rng.randint(1, 300)
        # names of a few lengths (0 included), distinct within the run
        names = list({rng.randbytes(rng.choice([0, 5, 12, 36])): None for _ in range(count)})
        width = rng.choice([8, 16])
        rows = None if kind == "tombstones" else np.frombuffer(
            rng.randbytes(width * len(names)), dtype=np.uint8
        ).reshape(len(names), width)  # fmt: skip
        updates.add(b"\x01W" + rng.randbytes(16), names, rows)
    return updates


def read(buffer: bytes | bytearray) -> list[tuple[bytes, bytes | None]]:
    batch = DefaultRecordBatch(bytes(buffer))
    assert batch.validate_crc()
    return [(bytes(r.key), None if r.value is None else bytes(r.value)) for r in batch]


def reference(records: list[tuple[bytes, bytes | None]], *, transactional: bool) -> bytes:
    """aiokafka's builder over the same records, timestamp and producer state."""
    builder = DefaultRecordBatchBuilder(2, 0, int(transactional), *PRODUCER, 1 << 30)
    for offset, (key, value) in enumerate(records):
        assert builder.append(offset, TIMESTAMP, key, value, []) is not None
    return bytes(builder.build())


def replay_runs(updates: Updates) -> list[set[tuple[bytes, bytes | None]]]:
    """What a replay depends on: the runs in order, each as a set (its keys are distinct)."""
    return [set(run.pairs()) for run in updates.runs]


def split_like(records: list[tuple[bytes, bytes | None]], updates: Updates) -> list[set[object]]:
    sets, at = [], 0
    for run in updates.runs:
        sets.append(set(records[at : at + len(run)]))
        at += len(run)
    assert at == len(records)
    return sets


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("transactional", [True, False])
def test_one_batch_is_byte_identical_to_aiokafkas(seed: int, transactional: bool) -> None:
    updates = random_updates(random.Random(seed), records=9_000 if seed == 0 else 600)
    [batch] = changelog_batches(
        updates.runs, max_bytes=1 << 30, transactional=transactional, timestamp_ms=TIMESTAMP
    )
    batch._set_producer_state(*PRODUCER)
    built = batch._build()
    records = read(built)
    assert batch.record_count() == len(records) == len(updates)
    assert split_like(records, updates) == replay_runs(updates)
    assert bytes(built) == reference(records, transactional=transactional)
    assert batch._build() is built, "a retry must send the very same bytes"


@pytest.mark.parametrize("max_bytes", [200, 4_096, 65_536])
def test_batches_are_cut_at_max_bytes_in_order(max_bytes: int) -> None:
    updates = random_updates(random.Random(max_bytes), records=5_000)
    batches = changelog_batches(
        updates.runs, max_bytes=max_bytes, transactional=True, timestamp_ms=TIMESTAMP
    )
    assert len(batches) > 1
    records = []
    for batch in batches:
        built = batch._build()
        part = read(built)
        assert len(part) == 1 or len(built) <= max_bytes
        records.extend(part)
    assert split_like(records, updates) == replay_runs(updates)


def test_a_record_larger_than_max_bytes_goes_alone() -> None:
    updates = Updates()
    updates.put(b"\x01C", bytes(8))
    updates.put(b"\x01N", bytes(500))
    updates.put(b"\x01E", bytes(8))
    batches = changelog_batches(
        updates.runs, max_bytes=HEADER_BYTES + 100, transactional=True, timestamp_ms=TIMESTAMP
    )
    assert [read(b._build()) for b in batches] == [[pair] for pair in updates]


@pytest.mark.parametrize("value", [0, 1, -1, 63, 64, -65, 8191, 8192, 1 << 20, -(1 << 40)])
def test_varint_is_kafkas_zigzag(value: int) -> None:
    zigzag = (value << 1) ^ (value >> 63)
    decoded, shift = 0, 0
    for byte in varint(value):
        decoded |= (byte & 0x7F) << shift
        shift += 7
    assert decoded == zigzag
    assert len(varint(value)) == max(1, -(-zigzag.bit_length() // 7))


def edge_updates(case: str) -> Updates:
    """The shapes the ledger can write that random runs rarely hit."""
    updates = Updates()
    if case == "empty-names":  # a subject b"" (key = the prefix), valued and tombstoned
        updates.add(b"\x01L", [b""], np.zeros((1, 8), dtype=np.uint8))
        updates.add(b"\x01W" + bytes(16), [b""], None)
    elif case == "huge-subject":  # one subject of 300 kB beside ordinary ones
        names = [b"h" * 300_000, b"a", b"bb"]
        updates.add(b"\x01W" + bytes(16), names, np.ones((3, 16), dtype=np.uint8))
    elif case == "many-lengths":  # every name length 0..80 in one run, shuffled
        names = [bytes([i % 251]) * i for i in range(81)]
        random.Random(5).shuffle(names)
        updates.add(b"\x01W" + bytes(16), names, np.arange(81 * 16, dtype=np.uint8).reshape(81, 16))
    elif case == "mixed":  # what one charge writes: clock, closed past, tombstones, spends, counts
        updates.put(b"\x01C", struct.pack(">q", TIMESTAMP))
        updates.put(b"\x01E", struct.pack(">q", TIMESTAMP - 86_400_000))
        updates.add(b"\x01W" + bytes(16), [b"gone-%d" % i for i in range(70)], None)
        updates.add(b"\x01W" + b"\x01" * 16, [b"d%05d" % i for i in range(9_000)], None)
        rows = np.frombuffer(random.Random(1).randbytes(16 * 9_000), dtype=np.uint8)
        updates.add(
            b"\x01W" + b"\x02" * 16, [b"d%d" % i for i in range(9_000)], rows.reshape(-1, 16)
        )
        counts = {"released": 123_456, "budget_exhausted": 7, "late_record": 1}
        updates.put(b"\x01N", json.dumps(counts, sort_keys=True, separators=(",", ":")).encode())
    return updates


@pytest.mark.parametrize("case", ["empty-names", "huge-subject", "many-lengths", "mixed"])
def test_edge_runs_are_byte_identical_to_aiokafkas(case: str) -> None:
    updates = edge_updates(case)
    [batch] = changelog_batches(
        updates.runs, max_bytes=1 << 30, transactional=True, timestamp_ms=TIMESTAMP
    )
    batch._set_producer_state(*PRODUCER)
    records = read(batch._build())
    assert split_like(records, updates) == replay_runs(updates)
    assert bytes(batch._build()) == reference(records, transactional=True)


def test_a_run_past_two_to_the_twenty_records_is_one_valid_batch() -> None:
    # offset deltas of 2^20 and more take a 4-byte varint (this raised StopIteration)
    count = (1 << 20) + 50
    names = np.frombuffer(np.arange(count, dtype=">u4").tobytes(), dtype="V4").tolist()
    updates = Updates()
    updates.add(b"\x01L", names, None)
    [batch] = changelog_batches(
        updates.runs, max_bytes=1 << 30, transactional=False, timestamp_ms=TIMESTAMP
    )
    batch._set_producer_state(*PRODUCER)
    records = read(batch._build())
    assert [key for key, _ in records] == [b"\x01L" + bytes(name) for name in names]
    assert bytes(batch._build()) == reference(records, transactional=False)


def aiokafka_split(records: list[tuple[bytes, bytes | None]], max_bytes: int) -> list[bytes]:
    """The batches aiokafka's builder cuts these records into at ``batch_size=max_bytes``:
    its Python one, which fills a batch up to ``max_bytes`` inclusive as the broker allows
    (``max.message.bytes`` refuses only larger ones); the C one stops a byte short."""
    built, at = [], 0
    while at < len(records):
        builder = _DefaultRecordBatchBuilderPy(2, 0, 1, *PRODUCER, max_bytes)
        start = at
        while at < len(records) and builder.append(at - start, TIMESTAMP, *records[at], []):
            at += 1
        built.append(bytes(builder.build()))
    return built


def test_every_max_bytes_cuts_where_aiokafkas_builder_cuts() -> None:
    updates = Updates()
    names = [bytes([65 + i]) * i for i in (3, 0, 9, 1, 20, 9 + 1, 2)]  # lengths mixed
    updates.add(b"\x01W" + bytes(16), names, np.arange(7 * 16, dtype=np.uint8).reshape(7, 16))
    updates.put(b"\x01N", b'{"released":1}')
    updates.add(b"\x01W" + b"\x01" * 16, [b"x" * 300, b"y", b"zz"], None)  # one large record
    updates.add(b"\x01L", [b"s%d" % i for i in range(70)], np.ones((70, 8), dtype=np.uint8))
    [whole] = changelog_batches(
        updates.runs, max_bytes=1 << 30, transactional=True, timestamp_ms=TIMESTAMP
    )
    records = read(whole._build())  # the order every split writes them in
    for max_bytes in range(HEADER_BYTES, len(whole._build()) + 2):
        batches = changelog_batches(
            updates.runs, max_bytes=max_bytes, transactional=True, timestamp_ms=TIMESTAMP
        )
        for batch in batches:
            batch._set_producer_state(*PRODUCER)
        assert [bytes(b._build()) for b in batches] == aiokafka_split(records, max_bytes), max_bytes


class OneBroker:
    """The cluster metadata aiokafka's accumulator asks: every partition led by node 0."""

    def leader_for_partition(self, tp: TopicPartition) -> int:
        return 0


def accumulator(txn: TransactionManager | None) -> MessageAccumulator:
    return MessageAccumulator(OneBroker(), 1 << 20, 0, 30.0, txn_manager=txn)


async def test_aiokafkas_accumulator_numbers_and_retries_the_batches_as_its_own() -> None:
    """Idempotent sequence numbers over several batches of a partition, and a retry."""
    txn = TransactionManager(None, 60_000)  # idempotent (transactions: false)
    txn.set_pid_and_epoch(4_711, 3)
    queue, tp = accumulator(txn), TopicPartition("changelog", 2)
    updates = random_updates(random.Random(3), records=400)
    batches = changelog_batches(
        updates.runs, max_bytes=2_000, transactional=False, timestamp_ms=TIMESTAMP
    )
    assert len(batches) > 2
    sequence, records = 0, []
    for batch in batches:
        await queue.add_batch(batch, tp, 5.0)
        [[(_, sent)]] = [list(n.items()) for n in queue.drain_by_nodes(set())[0].values()]
        buffer = bytes(sent.get_data_buffer())
        read_back = DefaultRecordBatch(buffer)
        assert (read_back.producer_id, read_back.producer_epoch) == (4_711, 3)
        assert read_back.base_sequence == sequence and read_back.validate_crc()
        queue.reenqueue(sent)  # a retriable error: the sender puts it back
        [[(_, again)]] = [list(n.items()) for n in queue.drain_by_nodes(set())[0].values()]
        assert again is sent and bytes(again.get_data_buffer()) == buffer, "a retry changed"
        again.done(base_offset=sequence)
        sequence += batch.record_count()
        records.extend(read(buffer))
    assert txn.sequence_number(tp) == sequence == len(updates)
    assert split_like(records, updates) == replay_runs(updates)


async def test_a_transaction_ending_with_a_changelog_batch_queued_does_not_break_the_sender() -> (
    None
):
    """``flush_for_commit`` (commit and abort alike) closes every queued batch: before
    ``ChangelogBatch.close`` this raised AttributeError in the sender, which died with
    "Unexpected error during batch delivery" instead of aborting."""
    queue, tp = accumulator(None), TopicPartition("changelog", 0)
    updates = Updates()
    updates.put(b"\x01C", bytes(8))
    [batch] = changelog_batches(updates.runs, max_bytes=1 << 20, transactional=False)
    delivered = await queue.add_batch(batch, tp, 5.0)

    async def sender() -> None:  # scheduled after the flush: it finds the batch queued
        [[(_, sent)]] = [list(n.items()) for n in queue.drain_by_nodes(set())[0].values()]
        sent.done(base_offset=0)

    flushing = asyncio.ensure_future(queue.flush_for_commit())
    sending = asyncio.ensure_future(sender())
    await asyncio.gather(flushing, sending)
    assert (await delivered).offset == 0


def replay(log: list[tuple[bytes, bytes | None]], into: dict[bytes, bytes]) -> dict[bytes, bytes]:
    """A compacted topic's reading of ``log``: the last value per key, a tombstone deletes."""
    for key, value in log:
        if value is None:
            into.pop(key, None)
        else:
            into[key] = value
    return into


def written(updates: Updates, max_bytes: int) -> list[tuple[bytes, bytes | None]]:
    """The records of ``updates`` as a reader of the batches gets them, in offset order."""
    batches = changelog_batches(
        updates.runs, max_bytes=max_bytes, transactional=True, timestamp_ms=TIMESTAMP
    )
    return [pair for batch in batches for pair in read(batch._build())]


@pytest.mark.parametrize("lifetime", [25, None])
def test_a_ledger_restored_from_the_batches_bytes_is_the_ledger(lifetime: int | None) -> None:
    """Charges with rollovers, tombstones, lifetime runs and subjects of many name
    lengths (each run reordered by length): replaying the bytes gives, after every
    charge, what replaying ``list(updates)`` gives, and a restore gives the ledger."""
    policy = dataclasses.replace(POLICY, lifetime_cap_units=lifetime)
    rng = np.random.default_rng(11)
    pool = [bytes([97 + i % 26]) * (i % 13) + b"%d" % i for i in range(60)]
    ledger = SubjectLedger(policy=policy, deployment="tests")
    log: list[tuple[bytes, bytes | None]] = []
    from_bytes: dict[bytes, bytes] = {}
    from_pairs: dict[bytes, bytes] = {}
    now = 10_000
    for step in range(120):
        now += int(rng.integers(0, 400))
        subjects = [pool[i] for i in rng.integers(0, len(pool), int(rng.integers(0, 200)))]
        ts = (now + rng.integers(-1_000, 150, len(subjects))).tolist()
        charge = ledger.charge(1, subjects=subjects, keys=subjects, timestamps_ms=ts, now_ms=now)
        records = written(charge.updates, max_bytes=[300, 4_096, 1 << 20][step % 3])
        assert sorted(records, key=repr) == sorted(charge.updates, key=repr)
        assert replay(records, from_bytes) == replay(list(charge.updates), from_pairs)
        log.extend(records)
    assert any(value is None for _, value in log), "no window was tombstoned"
    restored = SubjectLedger(policy=policy, deployment="tests")
    restored.restore(1, log)
    assert restored.snapshot(1) == ledger.snapshot(1) == from_bytes
    assert restored.counts(1) == ledger.counts(1)


def test_a_run_written_in_name_length_order_keeps_the_order_of_equal_names() -> None:
    """Names of a run are distinct; were one repeated, the stable sort by length keeps
    its records in their order (equal names have equal lengths), so the last still wins."""
    updates = Updates()
    names = [b"aa", b"b", b"aa", b"ccc", b"b", b"aa"]
    updates.add(b"\x01L", names, np.arange(6 * 8, dtype=np.uint8).reshape(6, 8))
    records = written(updates, max_bytes=1 << 20)
    assert replay(records, {}) == replay(list(updates), {})
