"""A record aiokafka cannot decode is returned in its place, marked, never raised (issue 13).

Batches are built with aiokafka's own builder, then a header key is
overwritten with bytes that are not UTF-8 and the batch CRC recomputed, so
the broker-side bytes are exactly what ``kcat -H $'\\xff\\xfekey=val'`` makes.
"""

from __future__ import annotations

import struct

import pytest
from aiokafka.consumer.fetcher import READ_UNCOMMITTED
from aiokafka.record.default_records import DefaultRecordBatchBuilder
from aiokafka.record.memory_records import MemoryRecords
from aiokafka.record.util import calc_crc32c
from aiokafka.structs import TopicPartition
from privstream.kafka.decode import (
    UNDECODABLE_HEADER,
    UndecodableRecord,
    _TolerantPartitionRecords,
    _TolerantRecords,
)

_CRC_AT, _CRC_FROM = 17, 21  # v2 batch header: crc (uint32) at 17, covers bytes 21..


def batch(base: int, count: int, bad: set[int]) -> bytes:
    """``count`` records from offset ``base``; those in ``bad`` get a non-UTF-8 header key."""
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=0,
        is_transactional=0,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        batch_size=1 << 20,
    )
    for i in range(count):
        name = f"Z{i:03d}" if i in bad else "trace"
        builder.append(i, timestamp=None, key=b"k%d" % i, value=b"v%d" % i, headers=[(name, b"h")])
    raw = bytearray(builder.build())
    struct.pack_into(">q", raw, 0, base)
    for i in bad:
        at = raw.find(f"Z{i:03d}".encode())
        raw[at : at + 4] = b"\xff\xfe" + b"%02d" % (i % 100)
    struct.pack_into(">I", raw, _CRC_AT, calc_crc32c(bytes(raw[_CRC_FROM:])))
    return bytes(raw)


def test_the_bytes_really_break_aiokafka() -> None:
    plain = MemoryRecords(batch(0, 3, {1})).next_batch()
    assert plain is not None and plain.validate_crc()
    with pytest.raises(UnicodeDecodeError):
        list(plain)


def records(raw: bytes) -> list[object]:
    parts = _TolerantPartitionRecords(
        TopicPartition("raw", 0), _TolerantRecords(raw), [], 0, None, None, True, READ_UNCOMMITTED
    )
    return list(parts)


def test_every_record_comes_back_in_order_with_the_bad_ones_marked() -> None:
    raw = batch(0, 5, {1, 3}) + batch(5, 3, set()) + batch(8, 2, {0})
    got = records(raw)
    assert [r.offset for r in got] == list(range(10))  # type: ignore[attr-defined]
    bad = [r.offset for r in got if isinstance(r, UndecodableRecord)]  # type: ignore[attr-defined]
    assert bad == [1, 3, 8]
    letter = got[1]
    assert isinstance(letter, UndecodableRecord)
    assert letter.problem == UNDECODABLE_HEADER
    assert letter.key == b"k1" and letter.value == b"v1"  # raw bytes kept
    assert letter.headers == (("\\xff\\xfe01", b"h"),)  # the key escaped, the value raw
    assert got[2].headers == (("trace", b"h"),)  # type: ignore[attr-defined]


def test_a_batch_that_decodes_is_read_by_aiokafka_alone() -> None:
    got = records(batch(40, 4, set()))
    assert [r.offset for r in got] == [40, 41, 42, 43]  # type: ignore[attr-defined]
    assert not any(isinstance(r, UndecodableRecord) for r in got)
