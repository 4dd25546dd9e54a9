"""A ``TcpProxy`` that damages one record batch of one Fetch response in transit.

``corrupt_next_fetch(topic, partition)`` arms it: the next Fetch response
that carries records of that partition has one byte of its first record
batch flipped (a byte of the first record, past the 61-byte batch header),
so the client finds a batch whose CRC-32C does not match, as after a bit
flip on a link or in a NIC that no TCP checksum caught. Every other byte,
and every later response, passes unchanged: the next fetch of the same
offsets reads clean.

Fetch responses are parsed as aiokafka asks for them (versions 4 to 11, not
flexible): ``throttle_time_ms``, from v7 ``error_code`` and ``session_id``,
then per topic its name and per partition its index, error code, high
watermark, last stable offset, from v5 the log start offset, the aborted
transactions, from v11 the preferred read replica, and the records.
"""

from __future__ import annotations

import asyncio
import struct
from collections.abc import AsyncIterator

from tests.support.tcp_proxy import TcpProxy, _Link

FETCH = 1
#: the byte flipped: inside the first record of the first batch (its header is 61 bytes)
_FLIP_AT = 62


class CorruptingProxy(TcpProxy):
    def __init__(self, port: int, upstream_port: int) -> None:
        super().__init__(port, upstream_port)
        self._armed: tuple[str, int, asyncio.Event] | None = None

    def corrupt_next_fetch(self, topic: str, partition: int) -> asyncio.Event:
        """Arm the fault; the event is set once a response was damaged."""
        damaged = asyncio.Event()
        self._armed = (topic, partition, damaged)
        return damaged

    async def _forward(
        self, link: _Link, reader: asyncio.StreamReader, up_reader: asyncio.StreamReader
    ) -> None:
        fetches: dict[int, int] = {}  # correlation id -> Fetch version, of this connection
        pumps = [
            asyncio.create_task(self._pump(link, _requests(reader, fetches), link.upstream)),
            asyncio.create_task(self._pump(link, self._responses(up_reader, fetches), link.client)),
        ]
        try:
            await asyncio.wait(pumps, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for pump in pumps:
                pump.cancel()
            await asyncio.gather(*pumps, return_exceptions=True)

    async def _responses(
        self, reader: asyncio.StreamReader, fetches: dict[int, int]
    ) -> AsyncIterator[bytes]:
        async for frame in _frames(reader):
            version = fetches.pop(struct.unpack_from(">i", frame, 4)[0], None)
            if version is not None and self._armed is not None:
                topic, partition, damaged = self._armed
                at = _records_at(frame, 8, version, topic, partition)
                if at is not None:
                    frame = frame[:at] + bytes([frame[at] ^ 0x5A]) + frame[at + 1 :]
                    self._armed = None
                    damaged.set()
            yield frame


async def _frames(reader: asyncio.StreamReader) -> AsyncIterator[bytes]:
    """Kafka frames (int32 size, then the body), each whole."""
    while True:
        try:
            head = await reader.readexactly(4)
        except asyncio.IncompleteReadError:
            return
        yield head + await reader.readexactly(struct.unpack(">i", head)[0])


async def _requests(reader: asyncio.StreamReader, fetches: dict[int, int]) -> AsyncIterator[bytes]:
    """Request frames; a Fetch's correlation id and version are noted for its response."""
    async for frame in _frames(reader):
        api_key, version, correlation = struct.unpack_from(">hhi", frame, 4)
        if api_key == FETCH:
            fetches[correlation] = version
        yield frame


def _records_at(frame: bytes, pos: int, version: int, topic: str, partition: int) -> int | None:
    """The offset in ``frame`` of the byte to flip, if this response (body at ``pos``)
    carries a batch of ``topic``/``partition`` long enough; else None."""
    pos += 4 + (6 if version >= 7 else 0)  # throttle time; error code, session id
    (topics,) = struct.unpack_from(">i", frame, pos)
    pos += 4
    for _ in range(topics):
        (length,) = struct.unpack_from(">h", frame, pos)
        name = frame[pos + 2 : pos + 2 + length].decode()
        pos += 2 + length
        (partitions,) = struct.unpack_from(">i", frame, pos)
        pos += 4
        for _ in range(partitions):
            (index,) = struct.unpack_from(">i", frame, pos)
            pos += 4 + 2 + 8 + 8 + (8 if version >= 5 else 0)
            (aborted,) = struct.unpack_from(">i", frame, pos)
            pos += 4 + 16 * max(aborted, 0) + (4 if version >= 11 else 0)
            (size,) = struct.unpack_from(">i", frame, pos)
            pos += 4
            if (name, index) == (topic, partition) and size > _FLIP_AT + 8:
                return pos + _FLIP_AT
            pos += max(size, 0)
    return None
