"""The sanitized topic's record batches, written whole: one C loop a batch (``_records``).

aiokafka's ``BatchBuilder.append`` made two Python calls per record and
encoded the same five privstream headers again for every record (14.3 k
instructions a record with the batch's CRC, 1.1 k here: docs/benchmarks.md).
Here a record's headers are encoded once for the batch (``encoded_headers``:
the bytes that follow a record's value), ``_records.encode`` writes a run of
values with them as message format v2 records (layout: ``record_batch``)
into a buffer the size of a batch, and ``BuiltBatch`` frames them: the
61-byte header, and the producer id, epoch, base sequence and CRC (SSE 4.2's
``crc32``) when the producer sends it.

Every record of a batch has no key (raw keys are usually user ids), the
batch's one timestamp (create time: when the batch was built, as aiokafka's
builder stamps its first record) and offset deltas 0, 1, ... in order.
``tests/unit/worker/test_output_batch.py`` reads the batches back with
aiokafka's reader and compares them with its builder's.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import numpy as np

from privstream.errors import MisuseError
from privstream.worker import _records
from privstream.worker.record_batch import HEADER_BYTES, BuiltBatch, varint

#: the most a record adds to its value and headers: its length, attributes, timestamp
#: delta, offset delta, key length and value length (varints of at most 5 bytes)
_RECORD_OVERHEAD = 5 + 1 + 1 + 5 + 1 + 5


def encoded_headers(headers: Sequence[tuple[str, bytes]]) -> bytes:
    """A record's header count and headers (``key`` UTF-8), as they follow its value."""
    parts = [varint(len(headers))]
    for key, value in headers:
        name = key.encode()
        parts += [varint(len(name)), name, varint(len(value)), value]
    return b"".join(parts)


def output_batches(
    values: list[bytes],
    tails: list[bytes],
    *,
    max_bytes: int,
    transactional: bool,
    timestamp_ms: int | None = None,
) -> list[BuiltBatch]:
    """Each value with its tail (``encoded_headers``) as a record, in order, cut into
    batches of at most ``max_bytes`` (a record larger than that goes alone, as aiokafka's
    builder takes its first record always)."""
    now = int(time.time() * 1000) if timestamp_ms is None else timestamp_ms
    # bounds of the bytes records 0..i take: a batch's buffer is no larger than its records
    ends = np.cumsum(
        np.fromiter(map(len, values), dtype=np.int64, count=len(values))
        + np.fromiter(map(len, tails), dtype=np.int64, count=len(tails))
        + _RECORD_OVERHEAD
    )
    batches: list[BuiltBatch] = []
    start = 0
    while start < len(values):
        left = int(ends[-1] - (ends[start - 1] if start else 0))
        buffer = bytearray(max(min(max_bytes, HEADER_BYTES + left), HEADER_BYTES))
        count, end = _records.encode(values, tails, start, buffer, HEADER_BYTES)
        if not count:  # over a batch alone: a buffer its size
            alone = int(ends[start] - (ends[start - 1] if start else 0))
            buffer = bytearray(HEADER_BYTES + alone)
            count, end = _records.encode(values, tails, start, buffer, HEADER_BYTES)
            if not count:  # the C sizes by the bytes, this by len(): never an empty batch
                raise MisuseError(
                    f"output record {start} did not fit a batch of its own size: its value "
                    "and headers must be exactly bytes"
                )
        del buffer[end:]
        batches.append(BuiltBatch(buffer, count, timestamp_ms=now, transactional=transactional))
        start += count
    return batches
