"""Avro values in the Confluent wire format, turned into the JSON text the plan reads.

A framed value is a magic byte 0, the writer schema's registry id (4 bytes,
big-endian) and the Avro binary payload. Pure: the writer schemas come in
parsed, by id (``privstream.worker.schemas`` fetches them). The decoded record
is handed to the plan as JSON, so every field rule (names, ``on_missing``, an
Avro ``null`` read as JSON ``null``) applies to it as to a JSON message; the
cost of that seam is in docs/avro.md. An infinite float or double is the JSON
number ``1e999`` of its sign and NaN is null, as in Protobuf input (``real``).
"""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import msgspec
import orjson
from fastavro import parse_schema, schemaless_reader

MAGIC = 0
HEADER_BYTES = 5

#: dead-letter reasons
NO_MAGIC_BYTE = "avro_no_magic_byte"
UNKNOWN_SCHEMA_ID = "avro_unknown_schema_id"
UNSUPPORTED_SCHEMA = "avro_unsupported_schema"
UNKNOWN_REFERENCE = "avro_unknown_reference"
UNDECODABLE = "avro_undecodable"


@dataclass(frozen=True)
class Undecoded:
    """Why a value (or every value written with one schema id) cannot be read."""

    reason: str
    detail: str


#: a schema id's parsed writer schema, or why none can be used
WriterSchema = Any

# msgspec, not orjson: orjson's per-call buffer makes a batch of small records cost ~5x
# more than one record alone (bench/avro_decode.py). Avro bytes and fixed become base64
# strings, decimals strings, timestamps and dates RFC 3339 strings.
_ENCODE = msgspec.json.Encoder().encode
_INFINITE = {True: msgspec.Raw(b"1e999"), False: msgspec.Raw(b"-1e999")}


def real(value: float) -> Any:
    """A float as the plan reads it: an infinity as the JSON number beyond the double range
    (``1e999``), which the kinds clamp to the bound of its sign as they do for JSON input,
    so that a record is released at infinity as at 1e308; NaN, which has no sign, stays
    NaN (JSON null: an absent value, which ``on_missing`` decides, docs/protection.md)."""
    if value - value == 0.0 or value != value:
        return value
    return _INFINITE[value > 0]


def _infinite(value: Any) -> bool:
    """Whether a decoded record holds an infinity."""
    kind = type(value)
    if kind is float:
        return bool(value - value != 0.0 and value == value)
    if kind is dict:
        return any(map(_infinite, value.values()))
    if kind is list:
        return any(map(_infinite, value))
    return False


def _reals(value: Any) -> Any:
    """A decoded record with its infinities as ``real`` gives them."""
    kind = type(value)
    if kind is float:
        return real(value)
    if kind is dict:
        return {key: _reals(item) for key, item in value.items()}
    if kind is list:
        return [_reals(item) for item in value]
    return value


def schema_id(value: bytes | None) -> int | None:
    """The writer schema id of a framed value; None if it is not in the wire format."""
    if value is None or len(value) < HEADER_BYTES or value[0] != MAGIC:
        return None
    return int.from_bytes(value[1:HEADER_BYTES], "big")


def parse_writer_schema(
    schema_id: int, text: str, references: Sequence[tuple[str, str]] = ()
) -> WriterSchema | Undecoded:
    """fastavro's parsed form of a registry's schema text, or why it cannot be used.

    ``references`` (name, text), dependencies first, hold the named types the schema
    uses from other subjects: each is parsed first, so its names are known to the next.
    """
    named: dict[str, Any] = {}
    try:
        for _name, reference in references:
            parse_schema(orjson.loads(reference), named_schemas=named)
        return parse_schema(orjson.loads(text), named_schemas=named)
    except Exception as exc:  # fastavro raises several types for a schema it refuses
        return Undecoded(
            UNSUPPORTED_SCHEMA,
            f"writer schema {schema_id} cannot be parsed ({type(exc).__name__}): not an "
            "Avro schema, or a named type it uses is neither in it nor in its references",
        )


def record_json(record: Any) -> bytes:
    """A decoded Avro record (fastavro's Python form) as the JSON text the plan reads."""
    text = _ENCODE(record)
    # msgspec writes an infinity as null: a record with a null may hold one
    return _ENCODE(_reals(record)) if b"null" in text and _infinite(record) else text


def to_json(
    values: Sequence[bytes | None], schemas: Mapping[int, WriterSchema | Undecoded]
) -> list[bytes | Undecoded]:
    """Each framed value as JSON text, or why it cannot be read. ``schemas`` holds every
    id the values name (``Undecoded`` for an id the registry does not know)."""
    return [_one(value, schemas) for value in values]


def _one(value: bytes | None, schemas: Mapping[int, WriterSchema | Undecoded]) -> bytes | Undecoded:
    sid = schema_id(value)
    if sid is None or value is None:
        size = 0 if value is None else len(value)
        return Undecoded(
            NO_MAGIC_BYTE,
            f"a {size}-byte value without the Confluent wire format's magic byte 0 and "
            "schema id: produce it with an Avro serializer that uses the schema registry",
        )
    schema = schemas[sid]
    if isinstance(schema, Undecoded):
        return schema
    buffer = io.BytesIO(value)
    buffer.seek(HEADER_BYTES)
    try:
        record = schemaless_reader(buffer, schema, None)
        left = len(value) - buffer.tell()
        if left:
            raise ValueError(f"{left} bytes left after the record")
        return record_json(record)
    except Exception as exc:  # a payload that does not match its schema
        return Undecoded(
            UNDECODABLE,
            f"the payload does not decode with writer schema {sid} ({type(exc).__name__}): "
            "it is not the Avro binary encoding of a record of that schema",
        )
