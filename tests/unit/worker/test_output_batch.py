"""The sanitized topic's record batches (``output_batch``, C ``_records``) against aiokafka's
own builder and reader."""

from __future__ import annotations

import random

import pytest
from aiokafka import TopicPartition
from aiokafka.producer.transaction_manager import TransactionManager
from aiokafka.record.default_records import (
    DefaultRecordBatch,
    DefaultRecordBatchBuilder,
    _DefaultRecordBatchBuilderPy,
)
from aiokafka.record.util import calc_crc32c
from privstream.worker import _records
from privstream.worker.output_batch import encoded_headers, output_batches
from privstream.worker.record_batch import HEADER_BYTES

from tests.unit.worker.test_record_batch import PRODUCER, TIMESTAMP, accumulator

Headers = list[tuple[str, bytes]]
HEADERS: Headers = [
    ("privstream-config-sha256", b"c" * 64),
    ("privstream-field-releases", b'{"temp_c":"0123456789abcdef"}'),
    ("privstream-epsilon", b"1.0"),
    ("ü-non-ascii", b""),
]
Record = tuple[bytes | None, Headers]


def read(buffer: bytes | bytearray) -> list[Record]:
    batch = DefaultRecordBatch(bytes(buffer))
    assert batch.validate_crc()
    records = list(batch)
    assert [r.offset for r in records] == list(range(len(records)))
    assert all(r.key is None and r.timestamp == TIMESTAMP for r in records)
    return [(r.value, list(r.headers)) for r in records]


def reference(records: list[tuple[bytes, Headers]], *, transactional: bool) -> bytes:
    """aiokafka's builder over the same records, timestamp and producer state."""
    builder = DefaultRecordBatchBuilder(2, 0, int(transactional), *PRODUCER, 1 << 30)
    for offset, (value, headers) in enumerate(records):
        assert builder.append(offset, TIMESTAMP, None, value, headers) is not None
    return bytes(builder.build())


def batches_of(
    values: list[bytes], tails: list[bytes], max_bytes: int, transactional: bool = True
) -> list[bytes]:
    built = []
    for batch in output_batches(
        values, tails, max_bytes=max_bytes, transactional=transactional, timestamp_ms=TIMESTAMP
    ):
        batch._set_producer_state(*PRODUCER)
        built.append(bytes(batch._build()))
    return built


def random_values(rng: random.Random, count: int) -> list[bytes]:
    """Lengths on every varint boundary of a value's and a record's length."""
    lengths = [0, 1, 62, 63, 64, 65, 200, 8_000, 8_191, 8_192, 20_000]
    return [rng.randbytes(rng.choice(lengths)) for _ in range(count)]


@pytest.mark.parametrize("count", [1, 63, 64, 65, 8_191, 8_193])  # offset delta varint sizes
@pytest.mark.parametrize("transactional", [True, False])
def test_one_batch_is_byte_identical_to_aiokafkas(count: int, transactional: bool) -> None:
    values = random_values(random.Random(count), count)
    [built] = batches_of(values, [encoded_headers(HEADERS)] * count, 1 << 30, transactional)
    assert read(built) == [(v, HEADERS) for v in values]
    assert built == reference([(v, HEADERS) for v in values], transactional=transactional)


def test_records_with_headers_of_their_own() -> None:
    """The ledger's counts header on some records: each record keeps its own tail."""
    rng = random.Random(2)
    values = random_values(rng, 300)
    extra = [*HEADERS, ("privstream-ledger-counts", b'{"released":7}')]
    headers = [extra if rng.random() < 0.1 else HEADERS for _ in values]
    [built] = batches_of(values, list(map(encoded_headers, headers)), 1 << 30)
    assert read(built) == list(zip(values, headers, strict=True))
    assert built == reference(list(zip(values, headers, strict=True)), transactional=True)


def aiokafka_split(values: list[bytes], max_bytes: int) -> list[bytes]:
    """The batches aiokafka's (Python) builder cuts these records into at ``batch_size=
    max_bytes``: filled up to ``max_bytes`` inclusive, a record over it alone."""
    built, at = [], 0
    while at < len(values):
        builder = _DefaultRecordBatchBuilderPy(2, 0, 1, *PRODUCER, max_bytes)
        start = at
        while at < len(values) and builder.append(at - start, TIMESTAMP, None, values[at], HEADERS):
            at += 1
        built.append(bytes(builder.build()))
    return built


def test_every_max_bytes_cuts_where_aiokafkas_builder_cuts() -> None:
    values = [b"x" * n for n in (3, 0, 90, 1, 400, 10, 2, 64, 63)] * 3
    tails = [encoded_headers(HEADERS)] * len(values)
    whole = sum(map(len, batches_of(values, tails, 1 << 30)))
    for max_bytes in range(HEADER_BYTES, whole + 2, 7):
        assert batches_of(values, tails, max_bytes) == aiokafka_split(values, max_bytes), max_bytes


def test_a_record_larger_than_max_bytes_goes_alone_in_order() -> None:
    values = [b"a" * 10, b"b" * 5_000, b"c" * 10, b"d" * 10]
    tails = [encoded_headers(HEADERS)] * 4
    batches = batches_of(values, tails, max_bytes=HEADER_BYTES + 500)
    assert [[v for v, _ in read(b)] for b in batches] == [[values[0]], [values[1]], values[2:]]


async def test_aiokafkas_accumulator_numbers_and_retries_the_batches_as_its_own() -> None:
    """Idempotent sequence numbers over several batches of a partition, and a retry."""
    txn = TransactionManager(None, 60_000)
    txn.set_pid_and_epoch(4_711, 3)
    queue, tp = accumulator(txn), TopicPartition("sanitized", 1)
    values = random_values(random.Random(3), 60)
    batches = output_batches(
        values, [encoded_headers(HEADERS)] * 60, max_bytes=30_000, transactional=False
    )
    assert len(batches) > 2
    sequence, got = 0, []
    for batch in batches:
        await queue.add_batch(batch, tp, 5.0)
        [[(_, sent)]] = [list(n.items()) for n in queue.drain_by_nodes(set())[0].values()]
        buffer = bytes(sent.get_data_buffer())
        back = DefaultRecordBatch(buffer)
        assert (back.producer_id, back.producer_epoch, back.base_sequence) == (4_711, 3, sequence)
        queue.reenqueue(sent)  # a retriable error: the sender puts it back
        [[(_, again)]] = [list(n.items()) for n in queue.drain_by_nodes(set())[0].values()]
        assert again is sent and bytes(again.get_data_buffer()) == buffer, "a retry changed"
        again.done(base_offset=sequence)
        sequence += batch.record_count()
        got.extend(r.value for r in back)
    assert txn.sequence_number(tp) == sequence == len(values) and got == values


@pytest.mark.parametrize(
    ("values", "tails", "start", "out", "at", "error", "match"),
    [
        ([b"a", "b"], [b"", b""], 0, bytearray(99), 0, TypeError, r"values\[1\] is str"),
        ([b"a"], [None], 0, bytearray(99), 0, TypeError, r"tails\[0\] is NoneType"),
        ([b"a"], [], 0, bytearray(99), 0, TypeError, "0 tails for 1 values"),
        ([b"a"], [b""], 2, bytearray(99), 0, ValueError, "start 2 of 1 values"),
        ([b"a"], [b""], 0, bytearray(99), 100, ValueError, "at 100 of 99 bytes"),
        ([b"a"], [b""], 0, memoryview(bytearray(8)).cast("i"), 0, ValueError, "format i"),
        ([b"a"], [b""], 0, b"read-only", 0, BufferError, "not writable"),
    ],
)
def test_encode_refuses_what_it_cannot_write(
    values: list[object],
    tails: list[object],
    start: int,
    out: object,
    at: int,
    error: type[Exception],
    match: str,
) -> None:
    with pytest.raises(error, match=match):
        _records.encode(values, tails, start, out, at)  # type: ignore[arg-type]


def test_encode_writes_nothing_when_the_first_record_does_not_fit() -> None:
    out = bytearray(HEADER_BYTES + 10)
    assert _records.encode([b"x" * 20], [b"\x00"], 0, out, HEADER_BYTES) == (0, HEADER_BYTES)
    assert out == bytearray(HEADER_BYTES + 10)


def test_the_hardware_crc_is_aiokafkas_at_every_length_and_alignment() -> None:
    if not _records.HARDWARE_CRC:  # record_batch then uses aiokafka's; this one refuses
        with pytest.raises(RuntimeError, match=r"no SSE 4\.2"):
            _records.crc32c(b"123456789")
        return
    assert _records.crc32c(b"123456789") == 0xE3069283  # the CRC-32C check value
    data = random.Random(4).randbytes(70_000)
    for start in range(9):  # unaligned starts: the 8-byte loads go through memcpy
        for length in [*range(40), 1_000, 65_537]:
            view = memoryview(data)[start : start + length]
            assert _records.crc32c(view) == calc_crc32c(view), (start, length)


def test_the_crc_reads_bytes_only() -> None:
    if _records.HARDWARE_CRC:
        with pytest.raises(ValueError, match="format i"):
            _records.crc32c(memoryview(bytearray(8)).cast("i"))
        with pytest.raises(TypeError):
            _records.crc32c("text")  # type: ignore[arg-type]
