"""Red team 15d: ``_records.encode`` at every buffer size, hostile callers, and batches
that end exactly where their last record ends (no stale or padding bytes).

Run under ASan and UBSan too (tests/csan: ``make csan`` with this file in CSAN_TESTS):
a write one byte past the computed size is then an error, not a passing test.
"""

from __future__ import annotations

import random
import subprocess
import sys

import numpy as np
from aiokafka.record.default_records import DefaultRecordBatch
from privstream.worker import _records
from privstream.worker.output_batch import encoded_headers, output_batches
from privstream.worker.record_batch import HEADER_BYTES

from tests.unit.worker.test_output_batch import HEADERS

SENTINEL = 0xA5
#: value lengths on each boundary of a record's length varint (zigzag: 63/64, 8191/8192)
BOUNDARIES = [0, 1, 50, 51, 52, 53, 54, 55, 60, 61, 62, 63, 64, 65, 8_170, 8_180, 8_191, 8_192]


def varint_at(data: bytes, at: int) -> tuple[int, int]:
    """Kafka's zigzag varint read from ``data[at:]``: (value, the byte after it)."""
    shift = z = 0
    while True:
        byte = data[at]
        at += 1
        z |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            return (z >> 1) ^ -(z & 1), at


def record_ends(buffer: bytes, at: int, count: int) -> int:
    """The byte after ``count`` records from ``at``, each skipped by its length varint."""
    for _ in range(count):
        length, at = varint_at(buffer, at)
        at += length
    return at


def test_every_buffer_size_writes_a_prefix_of_whole_records_and_not_a_byte_more() -> None:
    rng = random.Random(15)
    values = [rng.randbytes(rng.choice(BOUNDARIES)) for _ in range(12)]
    tails = [encoded_headers(HEADERS) if rng.random() < 0.5 else b"\x00" for _ in values]
    full = np.full(HEADER_BYTES + 200_000, SENTINEL, dtype=np.uint8)
    count, total = _records.encode(values, tails, 0, full, HEADER_BYTES)
    assert count == len(values)
    reference = bytes(full[:total])
    ends = [record_ends(reference, HEADER_BYTES, n) for n in range(count + 1)]
    assert ends[-1] == total
    for size in range(HEADER_BYTES, total + 2):
        # a numpy array of exactly `size` bytes: ASan sees a write past it
        out = np.full(size, SENTINEL, dtype=np.uint8)
        written, end = _records.encode(values, tails, 0, out, HEADER_BYTES)
        assert end == ends[written] <= size, size
        assert written == count or ends[written + 1] > size, f"record {written} fit at {size}"
        assert bytes(out[:end]) == reference[:end], size
        assert (out[:HEADER_BYTES] == SENTINEL).all() and (out[end:] == SENTINEL).all(), size


def test_an_index_that_empties_the_lists_while_parsed_is_range_checked_after() -> None:
    values, tails = [b"v" * 100] * 5, [b"\x00"] * 5

    class Start:
        def __index__(self) -> int:
            values.clear()  # runs inside PyArg_ParseTuple, before the lists are read
            tails.clear()
            return 3

    out = bytearray(1_000)
    try:
        _records.encode(values, tails, Start(), out, 0)  # type: ignore[arg-type]
    except ValueError as error:
        assert "start 3 of 0 values" in str(error)
    else:
        raise AssertionError("encode read values past the end of an emptied list")
    assert out == bytearray(1_000)


def test_each_batch_ends_where_its_last_record_ends() -> None:
    """No bytes after the records (a stale copy of another record, or zeroes) that a
    consumer would skip but the log would keep; lengths on every varint boundary."""
    rng = random.Random(16)
    values = [rng.randbytes(rng.choice(BOUNDARIES)) for _ in range(400)]
    tails = [encoded_headers(HEADERS)] * len(values)
    for max_bytes in (HEADER_BYTES, 200, 1_000, 16_384, 1 << 20):
        got = []
        for batch in output_batches(
            values, tails, max_bytes=max_bytes, transactional=True, timestamp_ms=1
        ):
            buffer = bytes(batch._build())
            assert record_ends(buffer, HEADER_BYTES, batch.record_count()) == len(buffer)
            got += [r.value for r in DefaultRecordBatch(buffer)]
        assert got == values, max_bytes


FALLBACK = """
import importlib
from aiokafka.record.default_records import DefaultRecordBatch
from privstream.kafka.compat import calc_crc32c
from privstream.worker import _records, record_batch
_records.HARDWARE_CRC = False  # as on a CPU without SSE 4.2: read when record_batch loads
importlib.reload(record_batch)  # in its own dict: BuiltBatch._build sees the choice
from privstream.worker.output_batch import encoded_headers, output_batches
assert record_batch._crc32c is calc_crc32c, record_batch._crc32c
values = [bytes([i % 251]) * i for i in range(300)]
for batch in output_batches(values, [b"\\x00"] * 300, max_bytes=5_000, transactional=True):
    batch._set_producer_state(7, 1, 0)
    read = DefaultRecordBatch(bytes(batch._build()))
    assert read.validate_crc()
    print(len(list(read)))
"""


def test_without_sse42_every_batch_gets_aiokafkas_crc() -> None:
    done = subprocess.run(
        [sys.executable, "-c", FALLBACK], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert sum(map(int, done.stdout.split())) == 300


LYING_LENGTH = """
from privstream.worker.output_batch import output_batches
from privstream.worker.record_batch import HEADER_BYTES

class Liar(bytes):  # len() says 1; the C reads the object's 100 bytes
    def __len__(self) -> int:
        return 1

try:
    output_batches([Liar(b"x" * 100)], [b"\\x00"], max_bytes=HEADER_BYTES + 10, transactional=True)
except (TypeError, ValueError) as error:
    print("refused:", error)
else:
    print("returned")
"""


def test_a_value_whose_length_lies_is_refused_not_looped_on() -> None:
    """FINDING (LOW): ``output_batches`` sizes the lone-record buffer from ``len()`` while
    ``_records.encode`` reads ``PyBytes_GET_SIZE`` and accepts bytes subclasses; when they
    disagree encode writes 0 records and the loop appends empty batches (recordCount 0,
    lastOffsetDelta -1) forever, without ``start`` moving. Bounded here by a timeout."""
    try:
        done = subprocess.run(
            [sys.executable, "-c", LYING_LENGTH], capture_output=True, text=True, timeout=10
        )
    except subprocess.TimeoutExpired:
        raise AssertionError("output_batches looped for 10 s on a 1-record input") from None
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("refused:"), done.stdout
