"""Compressed batches of every codec decode; a batch that cannot be read stops its partition
right before it, and the fetch buffer turns into aiokafka's own fetch error (issue 30).

The bytes are real record batches from aiokafka's builder (gzip, snappy, lz4,
zstd), then damaged as a disk, a network or a hostile writer would: a flipped
payload byte (bad CRC), a truncated compressed payload with its CRC made
valid again, a codec id no client knows (attributes 5).
"""

from __future__ import annotations

import struct
from types import SimpleNamespace
from typing import Any

import pytest
from aiokafka.codec import gzip_encode, lz4_encode, snappy_encode, zstd_encode
from aiokafka.consumer import fetcher
from aiokafka.consumer.fetcher import READ_UNCOMMITTED
from aiokafka.record.default_records import DefaultRecordBatchBuilder
from aiokafka.record.util import calc_crc32c
from aiokafka.structs import TopicPartition
from privstream.errors import UndecodableBatchError
from privstream.kafka.decode import (
    UndecodableRecord,
    _StoppedFetch,
    _StoppingFetchResult,
    _TolerantPartitionRecords,
    _TolerantRecords,
)

from tests.unit.worker.test_decode import batch as hostile_batch

TP = TopicPartition("raw", 3)
CODECS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
_LENGTH_AT, _CRC_AT, _ATTRIBUTES_AT, _HEADER = 8, 17, 21, 61


def batch(base: int, count: int, codec: str = "none") -> bytes:
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=CODECS[codec],
        is_transactional=0,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        batch_size=1 << 20,
    )
    for i in range(count):
        builder.append(i, timestamp=None, key=b"k%d" % i, value=b"value %d " % i * 8, headers=[])
    raw = bytearray(builder.build())
    struct.pack_into(">q", raw, 0, base)
    return bytes(raw)


def _recrc(raw: bytearray) -> bytes:
    struct.pack_into(">I", raw, _CRC_AT, calc_crc32c(bytes(raw[_ATTRIBUTES_AT:])))
    return bytes(raw)


def flipped(raw: bytes) -> bytes:
    """A payload byte changed in transit: the CRC no longer matches."""
    out = bytearray(raw)
    out[-3] ^= 0x40
    return bytes(out)


def truncated(raw: bytes) -> bytes:
    """A compressed payload cut short, its length and CRC made consistent again."""
    out = bytearray(raw[:-12])
    struct.pack_into(">i", out, _LENGTH_AT, len(out) - 12)
    return _recrc(out)


def unknown_codec(raw: bytes) -> bytes:
    out = bytearray(raw)
    attributes = struct.unpack_from(">h", out, _ATTRIBUTES_AT)[0]
    struct.pack_into(">h", out, _ATTRIBUTES_AT, (attributes & ~0x07) | 5)
    return _recrc(out)


def compressed(raw: bytes, codec: str) -> bytes:
    """An uncompressed batch's records compressed with ``codec``, header made consistent."""
    encode = {"gzip": gzip_encode, "snappy": snappy_encode, "lz4": lz4_encode, "zstd": zstd_encode}
    out = bytearray(raw[:_HEADER] + encode[codec](raw[_HEADER:]))
    struct.pack_into(">i", out, _LENGTH_AT, len(out) - 12)
    attributes = struct.unpack_from(">h", out, _ATTRIBUTES_AT)[0]
    struct.pack_into(">h", out, _ATTRIBUTES_AT, attributes | CODECS[codec])
    return _recrc(out)


def partition_records(raw: bytes, fetch_offset: int = 0) -> _TolerantPartitionRecords:
    return _TolerantPartitionRecords(
        TP, _TolerantRecords(raw), [], fetch_offset, None, None, True, READ_UNCOMMITTED
    )


@pytest.mark.parametrize("codec", list(CODECS))
def test_every_codec_kafka_has_decodes_in_order(codec: str) -> None:
    parts = partition_records(batch(0, 4) + batch(4, 5, codec) + batch(9, 3, "zstd"))
    got = list(parts)
    assert [r.offset for r in got] == list(range(12))
    assert got[6].value == b"value 2 " * 8 and got[6].key == b"k2"
    assert parts.failure is None and parts.next_fetch_offset == 12


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_a_hostile_header_in_a_compressed_batch_is_a_dead_letter_not_a_stop(codec: str) -> None:
    """The tolerant re-read of a batch (``_read_records``) decompresses it too."""
    parts = partition_records(compressed(hostile_batch(20, 4, {2}), codec) + batch(24, 2, codec))
    got = list(parts)
    assert [r.offset for r in got] == list(range(20, 26))
    assert [r.offset for r in got if isinstance(r, UndecodableRecord)] == [22]
    assert got[2].value == b"v2" and parts.failure is None


@pytest.mark.parametrize(
    ("damage", "codec", "cause"),
    [
        (flipped, "zstd", "CorruptRecordException"),
        (flipped, "none", "CorruptRecordException"),
        (truncated, "zstd", "DecompressionError"),
        (truncated, "lz4", "DecompressionError"),
        (truncated, "snappy", "DecompressionError"),
        (truncated, "gzip", "EOFError"),
        (unknown_codec, "lz4", "UnsupportedCodecError"),
    ],
)
def test_a_batch_that_cannot_be_read_ends_the_records_right_before_it(
    damage: Any, codec: str, cause: str
) -> None:
    raw = batch(0, 4) + damage(batch(4, 5, codec)) + batch(9, 3)
    parts = partition_records(raw)
    assert [r.offset for r in parts] == [0, 1, 2, 3]  # nothing of it or after it
    failure = parts.failure
    assert isinstance(failure, UndecodableBatchError)
    assert (failure.topic, failure.partition, failure.offset) == ("raw", 3, 4)
    assert failure.cause.startswith(cause), failure.cause
    assert parts.next_fetch_offset == 4  # the consumer's position: the bad batch, not past it
    assert "raw/3: the record batch at offset 4 cannot be decoded" in str(failure)


def test_a_fetch_that_starts_at_the_bad_batch_returns_nothing_and_stays_there() -> None:
    parts = partition_records(truncated(batch(4, 5, "zstd")) + batch(9, 3), fetch_offset=4)
    assert list(parts) == []
    assert parts.failure is not None and parts.failure.offset == 4
    assert parts.next_fetch_offset == 4


class _Assignment:
    """What ``FetchResult`` asks of the consumer's assignment: active, the position."""

    def __init__(self, position: int) -> None:
        self.active = True
        self.state = SimpleNamespace(paused=False, position=position)

    def state_value(self, tp: TopicPartition) -> Any:
        assert tp == TP
        return self.state

    def consumed(self, offset: int) -> None:
        self.state.position = offset


def fetch_result(raw: bytes, fetch_offset: int = 0) -> tuple[Any, _Assignment]:
    assignment = _Assignment(fetch_offset)
    assignment.state.consumed_to = assignment.consumed
    result = _StoppingFetchResult(
        TP,
        assignment=assignment,
        partition_records=partition_records(raw, fetch_offset),
        backoff=0,
    )
    return result, assignment


def test_the_buffer_turns_into_aiokafkas_fetch_error_once_drained_up_to_the_bad_batch() -> None:
    """``fetched_records`` keeps an entry while ``has_more`` and raises a fetch error
    (not ``type(...) is FetchResult``) only when no record was taken in that call."""
    result, assignment = fetch_result(batch(0, 4) + truncated(batch(4, 5, "lz4")) + batch(9, 3))
    assert [r.offset for r in result.getall(max_records=3)] == [0, 1, 2]
    assert type(result) is _StoppingFetchResult  # more records to take
    assert [r.offset for r in result.getall()] == [3]
    assert assignment.state.position == 4  # the consumer stays at the bad batch
    assert type(result) is _StoppedFetch and not isinstance(result, fetcher.FetchResult)
    assert result.has_more()  # kept in the buffer: the partition is not fetched meanwhile
    with pytest.raises(UndecodableBatchError) as raised:
        result.check_raise()
    assert raised.value.offset == 4


def test_a_buffer_that_reads_to_its_end_stays_a_fetch_result() -> None:
    result, assignment = fetch_result(batch(0, 4, "zstd") + batch(4, 2, "snappy"))
    assert [r.offset for r in result.getall()] == list(range(6))
    assert type(result) is _StoppingFetchResult and not result.has_more()
    assert assignment.state.position == 6
