"""Avro Object Container Files: read as the JSON texts the plan reads, written a block at a time.

A container file (Avro 1.11 spec, "Object Container Files") is the magic
``Obj\\x01``, a metadata map holding the writer schema (``avro.schema``) and
codec (``avro.codec``), a 16-byte sync marker, then blocks: a record count,
a byte count, the records' binary encodings back to back, the sync marker.

Reading goes through fastavro's reader (every codec it knows: null, deflate,
and snappy or zstandard where their packages are installed), each record
turned into JSON by ``avro.record_json``, as a framed value's is. Writing
takes records already in the binary encoding (``avro_encode.AvroEncoder``),
so a block is a count, a length and a join: codec ``null``, no second
encoding pass.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from typing import IO

from privstream.errors import PrivstreamError

MAGIC = b"Obj\x01"
SYNC_BYTES = 16


class ContainerFileError(PrivstreamError):
    """An Avro container file that cannot be read to its end (its header, a block)."""


def is_container(head: bytes) -> bool:
    """Whether the first bytes of a file are an Avro container file's magic."""
    return head.startswith(MAGIC)


def json_records(stream: IO[bytes], name: str, reports: Sequence[str] = ()) -> Iterator[bytes]:
    """Each record of the container file ``stream`` as JSON text, in file order.

    ``reports`` names the fields holding local-hashing reports, whose seeds a
    sanitized file holds as signed longs (``avro_encode.plain`` makes them unsigned
    again); a raw input has none.

    Raises ``ContainerFileError`` naming ``name`` and the record where reading
    stopped: the blocks after a damaged one cannot be found again (fastavro does
    not look for the next sync marker), so the file is refused rather than
    released in part without saying so.
    """
    # here, not at the top: a JSON Lines run checks the magic and never loads fastavro
    from fastavro import reader

    from privstream.pipeline.avro import record_json
    from privstream.pipeline.avro_encode import plain

    number = 0
    try:
        for record in reader(stream):
            number += 1
            if reports and isinstance(record, dict):
                record = plain(record, reports)
            yield record_json(record)
    except Exception as exc:  # fastavro raises many types for a damaged file
        # the type only: a message may quote the file's bytes, which are raw data
        raise ContainerFileError(
            f"{name}: the Avro container file does not read past record {number} "
            f"({type(exc).__name__}): a damaged or cut-short file, a codec whose package is "
            "not installed, or not a container file; fix the file (or convert it with its "
            "own tools) and run again"
        ) from None


def zigzag(number: int) -> bytes:
    """An Avro ``long``: zig-zag, then a little-endian base-128 varint."""
    value = (number << 1) ^ (number >> 63)
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _avro_bytes(data: bytes) -> bytes:
    return zigzag(len(data)) + data


class ContainerWriter:
    """Writes a container file of one schema: ``header`` once, then ``block`` per batch."""

    def __init__(self, schema_text: str) -> None:
        self._schema = schema_text.encode()
        # random, as every Avro writer's: a marker that is unlikely to occur in the data
        self.sync = os.urandom(SYNC_BYTES)

    def header(self) -> bytes:
        meta: Sequence[tuple[bytes, bytes]] = (
            (b"avro.codec", b"null"),
            (b"avro.schema", self._schema),
        )
        entries = b"".join(_avro_bytes(key) + _avro_bytes(value) for key, value in meta)
        return MAGIC + zigzag(len(meta)) + entries + zigzag(0) + self.sync

    def block(self, encoded: Sequence[bytes]) -> bytes:
        """One block of records in their binary encoding (empty: no block)."""
        if not encoded:
            return b""
        data = b"".join(encoded)
        return zigzag(len(encoded)) + zigzag(len(data)) + data + self.sync
