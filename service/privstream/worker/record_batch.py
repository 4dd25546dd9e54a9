"""The ledger's changelog records as Kafka record batches, written in numpy.

A batch of the input charges about one changelog record per record, and
aiokafka's ``BatchBuilder.append`` (a Python call, a key and a value object
per record) cost as much as the rest of the charge. The records of a
changelog run (``privstream.ledger.updates``) differ only in their name,
their value and their offset, so a block of them with names of one length
has one layout: it is a 2-d byte matrix, one row per record, whose columns
are written a column range at a time.

Kafka's record batch, message format v2 (KIP-98; integers big-endian)::

    baseOffset:int64 batchLength:int32 partitionLeaderEpoch:int32 magic:int8=2
    crc:uint32 attributes:int16 lastOffsetDelta:int32 baseTimestamp:int64
    maxTimestamp:int64 producerId:int64 producerEpoch:int16 baseSequence:int32
    recordCount:int32 records...

``crc`` is the CRC-32C of everything from ``attributes`` to the end;
``attributes`` bit 4 marks a transactional batch (no compression, create
time). Each record::

    length:varint attributes:int8=0 timestampDelta:varint=0 offsetDelta:varint
    keyLength:varint key valueLength:varint value headerCount:varint=0

A varint is the zigzag value ``(v << 1) ^ (v >> 63)`` in 7-bit groups, low
first, the high bit set on every byte but the last; a tombstone's value
length is -1. ``tests/unit/worker/test_record_batch.py`` checks the bytes
against aiokafka's own builder.

``ChangelogBatch`` (a ``BuiltBatch``, which the sanitized topic's batches of
``output_batch`` are too) is what ``AIOKafkaProducer.send_batch`` queues: the five
methods of ``BatchBuilder`` its accumulator and sender call (aiokafka 0.14:
``MessageBatch`` and ``MessageAccumulator.flush_for_commit``; ``append`` only
on a batch ``producer.send`` reuses, and nothing else sends to the changelog or
the sanitized topic: dead letters have a topic of their own). The producer
sets the producer id, epoch and base sequence just before it sends, so the
header (and the CRC over it) is finished then, in ``_build``.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from privstream.kafka.compat import calc_crc32c
from privstream.ledger.updates import Run
from privstream.worker import _records

_HEADER = struct.Struct(">qiibIhiqqqhii")
HEADER_BYTES = _HEADER.size  # 61
_CRC_AT = 17
_ATTRIBUTES_AT = 21
_PRODUCER = struct.Struct(">qhi")
_PRODUCER_AT = 43
_TRANSACTIONAL = 0x10
_NO_LEADER_EPOCH = -1
#: attributes, timestamp delta and header count: one zero byte each
_FIXED = 3
#: the batch CRC: SSE 4.2's crc32 instruction (``_records``), four times aiokafka's speed
_crc32c = _records.crc32c if _records.HARDWARE_CRC else calc_crc32c
#: offset deltas at which the offset's varint grows a byte (zigzag 2i reaches 2^(7k)); the
#: last is past int32, so every batch offset is below one of them
_OFFSET_STEPS = tuple(1 << (7 * k - 1) for k in range(1, 6))


def varint(value: int) -> bytes:
    """Kafka's zigzag varint of ``value``."""
    z = (value << 1) ^ (value >> 63)
    out = bytearray()
    while z >= 0x80:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)
    return bytes(out)


class _Layout(NamedTuple):
    #: the record's length varint
    length: bytes
    #: the key's length varint and the run's prefix
    key_head: bytes
    #: the value's length varint
    value_head: bytes
    #: bytes of the offset delta's varint
    offset_size: int
    #: bytes of one record
    size: int


@dataclass(frozen=True)
class _Block:
    """Records ``first..first+count`` of a run (names of one length) at offsets
    ``offset..offset+count`` of their batch."""

    run: Run
    names: Sequence[bytes]
    values: npt.NDArray[np.uint8] | None
    offset: int
    count: int

    @cached_property
    def layout(self) -> _Layout:
        """The layout every record of the block shares."""
        name = len(self.names[0])
        width = -1 if self.values is None else self.values.shape[1]
        offset_size = len(varint(self.offset + self.count - 1))
        key_head = varint(len(self.run.prefix) + name) + self.run.prefix
        value_head = varint(width)
        body = _FIXED + offset_size + len(key_head) + name + len(value_head) + max(width, 0)
        length = varint(body)
        return _Layout(length, key_head, value_head, offset_size, len(length) + body)

    def write(self, out: npt.NDArray[np.uint8]) -> None:
        """Fill ``out``, a (count, record size) view of the batch."""
        length, key_head, value_head, offset_size, _size = self.layout
        at = _put(out, 0, length) + 2  # attributes and timestamp delta: zero
        offsets = 2 * np.arange(self.offset, self.offset + self.count, dtype=np.uint64)
        for i in range(offset_size):
            byte = (offsets >> np.uint64(7 * i)) & np.uint64(0x7F)
            out[:, at + i] = byte | np.uint64(0x80 if i < offset_size - 1 else 0)
        at = _put(out, at + offset_size, key_head)
        name = len(self.names[0])
        if name:
            joined = np.frombuffer(b"".join(self.names), dtype=np.uint8)
            out[:, at : at + name] = joined.reshape(self.count, name)
        at = _put(out, at + name, value_head)
        if self.values is not None:
            out[:, at : at + self.values.shape[1]] = self.values
        # the header count, last, is zero


def _put(out: npt.NDArray[np.uint8], at: int, constant: bytes) -> int:
    out[:, at : at + len(constant)] = np.frombuffer(constant, dtype=np.uint8)
    return at + len(constant)


class BuiltBatch:
    """A finished record batch, queued whole by ``AIOKafkaProducer.send_batch``: its
    ``count`` records follow ``HEADER_BYTES`` bytes of ``buffer``, where the header goes."""

    def __init__(
        self, buffer: bytearray, count: int, *, timestamp_ms: int, transactional: bool
    ) -> None:
        _HEADER.pack_into(
            buffer, 0, 0, len(buffer) - 12, _NO_LEADER_EPOCH, 2, 0,
            _TRANSACTIONAL if transactional else 0, count - 1, timestamp_ms, timestamp_ms,
            -1, -1, -1, count,
        )  # fmt: skip
        self._buffer = buffer
        self._count = count
        self._built = False

    # what aiokafka's MessageAccumulator and Sender call on a BatchBuilder
    def record_count(self) -> int:
        return self._count

    def closed(self) -> bool:
        return True

    def close(self) -> None:
        """Built closed; called by ``flush_for_commit`` on every batch still queued when a
        transaction ends (commit or abort)."""

    def _set_producer_state(self, producer_id: int, epoch: int, base_sequence: int) -> None:
        _PRODUCER.pack_into(self._buffer, _PRODUCER_AT, producer_id, epoch, base_sequence)

    def _build(self) -> bytearray:
        if not self._built:  # once: a retry sends the same bytes
            crc = _crc32c(memoryview(self._buffer)[_ATTRIBUTES_AT:])
            struct.pack_into(">I", self._buffer, _CRC_AT, crc)
            self._built = True
        return self._buffer


class ChangelogBatch(BuiltBatch):
    """The changelog records of ``blocks``, as one batch."""

    def __init__(self, blocks: list[_Block], *, timestamp_ms: int, transactional: bool) -> None:
        sizes = [b.layout.size * b.count for b in blocks]
        buffer = bytearray(HEADER_BYTES + sum(sizes))
        body = np.frombuffer(buffer, dtype=np.uint8)
        at = HEADER_BYTES
        for block, size in zip(blocks, sizes, strict=True):
            block.write(body[at : at + size].reshape(block.count, -1))
            at += size
        count = sum(b.count for b in blocks)
        super().__init__(buffer, count, timestamp_ms=timestamp_ms, transactional=transactional)


def changelog_batches(
    runs: Sequence[Run], *, max_bytes: int, transactional: bool, timestamp_ms: int | None = None
) -> list[ChangelogBatch]:
    """The runs' records in order, cut into batches of at most ``max_bytes`` (a record
    larger than that goes alone, as aiokafka's builder takes its first record always)."""
    now = int(time.time() * 1000) if timestamp_ms is None else timestamp_ms
    batches: list[list[_Block]] = [[]]
    used, offset = HEADER_BYTES, 0
    for run, names, values in _by_name_length(runs):
        first = 0
        while first < len(names):
            # one offset varint size per block: stop at the next step
            count = min(len(names) - first, next(s for s in _OFFSET_STEPS if offset < s) - offset)
            rows = None if values is None else values[first : first + count]
            size = _Block(run, names[first : first + 1], rows, offset, 1).layout.size
            room = (max_bytes - used) // size
            if room <= 0 and offset:  # full: the next batch
                batches.append([])
                used, offset = HEADER_BYTES, 0
                continue
            count = min(count, max(room, 1))
            rows = None if rows is None else rows[:count]
            batches[-1].append(_Block(run, names[first : first + count], rows, offset, count))
            used += size * count
            offset += count
            first += count
    return [
        ChangelogBatch(blocks, timestamp_ms=now, transactional=transactional)
        for blocks in batches
        if blocks
    ]


def _by_name_length(
    runs: Sequence[Run],
) -> list[tuple[Run, Sequence[bytes], npt.NDArray[np.uint8] | None]]:
    """Each run's records grouped by name length (a run's names are distinct: any order
    replays alike), runs in order."""
    parts: list[tuple[Run, Sequence[bytes], npt.NDArray[np.uint8] | None]] = []
    for run in runs:
        lengths = run.lengths
        if lengths is None:
            lengths = np.fromiter(map(len, run.names), dtype=np.int64, count=len(run.names))
        if (lengths == lengths[0]).all():  # usual: ids of one format
            parts.append((run, run.names, run.values))
            continue
        order = np.argsort(lengths, kind="stable")
        cuts = np.flatnonzero(np.diff(lengths[order])) + 1
        for chosen in np.split(order, cuts):
            picks = chosen.tolist()
            names = [run.names[i] for i in picks]
            parts.append((run, names, None if run.values is None else run.values[chosen]))
    return parts
