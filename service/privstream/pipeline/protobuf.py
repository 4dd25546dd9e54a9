"""Protobuf values in the Confluent wire format, turned into the JSON text the plan reads.

A framed value is a magic byte 0, the writer schema's registry id (4 bytes,
big-endian), the message indexes (a zigzag varint count, then that many
zigzag varint indexes: which message of the schema's file, then which nested
message; a count of 0 means the first message), and the Protobuf binary
payload. Pure: the writer schemas come in parsed, by id
(``privstream.worker.schemas`` fetches them).

The record handed to the plan has the ``.proto`` field names. A field without
presence (a proto3 scalar, a repeated field) that the payload leaves out has its
default, as every Protobuf reader sees it; a field with presence (``optional``,
a message, a oneof member) that is unset is absent, so ``on_missing`` decides.
Enums are their value names (a number the schema does not name stays a
number), bytes base64 strings, maps objects, messages nested objects, an
infinite double ``1e999`` (as JSON input would carry it), NaN null.
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Mapping, Sequence
from functools import lru_cache
from typing import Any

import msgspec
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import DecodeError

from privstream.pipeline.avro import HEADER_BYTES, Undecoded, real, schema_id
from privstream.pipeline.protobuf_schema import (
    UNSUPPORTED_SCHEMA,
    ProtoSchema,
    parse_writer_schema,
    protoc_path,
)

#: dead-letter reasons
NO_MAGIC_BYTE = "protobuf_no_magic_byte"
UNKNOWN_SCHEMA_ID = "protobuf_unknown_schema_id"
UNKNOWN_REFERENCE = "protobuf_unknown_reference"
UNDECODABLE = "protobuf_undecodable"
__all__ = [
    "NO_MAGIC_BYTE",
    "UNDECODABLE",
    "UNKNOWN_REFERENCE",
    "UNKNOWN_SCHEMA_ID",
    "UNSUPPORTED_SCHEMA",
    "parse_writer_schema",
    "protoc_path",
    "to_json",
]

#: message indexes deeper than this are not a real schema's nesting but garbage
MAX_INDEXES = 64
_ENCODE = msgspec.json.Encoder().encode


class _Malformed(ValueError):
    """The message-index array is not a varint array."""


def to_json(
    values: Sequence[bytes | None], schemas: Mapping[int, ProtoSchema | Undecoded]
) -> list[bytes | Undecoded]:
    """Each framed value as JSON text, or why it cannot be read. ``schemas`` holds every
    id the values name (``Undecoded`` for an id the registry does not know)."""
    return [_one(value, schemas) for value in values]


def _one(value: bytes | None, schemas: Mapping[int, ProtoSchema | Undecoded]) -> bytes | Undecoded:
    sid = schema_id(value)
    if sid is None or value is None:
        size = 0 if value is None else len(value)
        return Undecoded(
            NO_MAGIC_BYTE,
            f"a {size}-byte value without the Confluent wire format's magic byte 0 and "
            "schema id: produce it with a Protobuf serializer that uses the schema registry",
        )
    schema = schemas[sid]
    if isinstance(schema, Undecoded):
        return schema
    try:
        indexes, start = message_indexes(value, HEADER_BYTES)
        cls = schema.message_class(indexes)
        if cls is None:
            raise _Malformed(f"writer schema {sid} has no message at index {list(indexes)}")
        return _ENCODE(plain(cls.FromString(value[start:])))
    except (_Malformed, DecodeError, RecursionError) as exc:
        return Undecoded(
            UNDECODABLE,
            f"the payload does not decode with writer schema {sid} ({type(exc).__name__}: "
            f"{exc}): it is not the Protobuf encoding of a message of that schema",
        )


def message_indexes(value: bytes, at: int) -> tuple[tuple[int, ...], int]:
    """The message indexes that start at ``at``, and where the payload starts."""
    count, at = _zigzag(value, at)
    if count == 0:
        return (0,), at
    if not 0 < count <= MAX_INDEXES:
        raise _Malformed(f"{count} message indexes (1 to {MAX_INDEXES} expected)")
    indexes = []
    for _ in range(count):
        index, at = _zigzag(value, at)
        indexes.append(index)
    return tuple(indexes), at


def _zigzag(value: bytes, at: int) -> tuple[int, int]:
    raw = shift = 0
    while True:
        if at >= len(value) or shift > 63:
            raise _Malformed("the message-index varint runs past the value or 64 bits")
        byte = value[at]
        raw |= (byte & 0x7F) << shift
        at += 1
        shift += 7
        if byte < 0x80:
            return (raw >> 1) ^ -(raw & 1), at


def plain(message: Any) -> dict[str, Any]:
    """A message as a dict of its fields (the module docstring says which)."""
    out: dict[str, Any] = {}
    for name, present, convert in _fields(message.DESCRIPTOR):
        if present is None or present(message, name):
            out[name] = convert(getattr(message, name))
    return out


Convert = Callable[[Any], Any]


def _has(message: Any, name: str) -> bool:
    return bool(message.HasField(name))


@lru_cache(maxsize=4096)  # bounded: schema churn must not grow it forever
def _fields(descriptor: Any) -> tuple[tuple[str, Callable[[Any, str], bool] | None, Convert], ...]:
    """Per field of a message type: its name, its presence test (None: always there) and
    its converter; made once per descriptor."""
    return tuple(
        (f.name, _has if f.has_presence else None, _converter(f)) for f in descriptor.fields
    )


def _converter(field: Any) -> Convert:
    message = field.message_type
    if message is not None and message.GetOptions().map_entry:
        value = _scalar(message.fields_by_name["value"])
        return lambda entries: {str(k): value(v) for k, v in entries.items()}
    one = _scalar(field)
    if field.is_repeated:
        return lambda items: [one(item) for item in items]
    return one


def _scalar(field: Any) -> Convert:
    if field.type in (FieldDescriptor.TYPE_MESSAGE, FieldDescriptor.TYPE_GROUP):
        return plain
    if field.type == FieldDescriptor.TYPE_ENUM:
        names = {v.number: v.name for v in field.enum_type.values}
        return lambda number: names.get(number, number)
    if field.type == FieldDescriptor.TYPE_BYTES:
        return lambda data: base64.b64encode(data).decode("ascii")
    if field.type in (FieldDescriptor.TYPE_DOUBLE, FieldDescriptor.TYPE_FLOAT):
        return real
    return _same


def _same(value: Any) -> Any:
    return value
