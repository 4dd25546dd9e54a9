"""The changelog's numpy-built record batches against aiokafka's own builder and reader."""

from __future__ import annotations

import random

import numpy as np
import pytest
from aiokafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder
from privstream.ledger.updates import Updates
from privstream.worker.record_batch import HEADER_BYTES, changelog_batches, varint

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
