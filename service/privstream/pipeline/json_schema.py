"""JSON values under a JSON Schema, in the Confluent wire format: validated, then read as JSON.

A framed value is a magic byte 0, the writer schema's registry id (4 bytes,
big-endian) and JSON text; the text after the header is what the plan reads.
Pure: the writer schemas come in parsed, by id (``privstream.worker.schemas``).

The validation checks the record's **shape** only: the writer schema is used
without its value keywords (``minimum``, ``enum``, ``pattern``, ``maxItems``,
...; ``SHAPE_ONLY`` lists them), ``integer`` counts as ``number``, and every
number is read as 0 before validating. So whether a record is dead-lettered
never depends on a value within its type (docs/protection.md, "Whether a record
is released"): the field kinds clamp, round or map such values instead.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from jsonschema.exceptions import SchemaError, best_match
from jsonschema.validators import validator_for
from referencing.exceptions import Unresolvable

from privstream.pipeline.avro import HEADER_BYTES, Undecoded, schema_id

#: dead-letter reasons
NO_MAGIC_BYTE = "json_schema_no_magic_byte"
UNKNOWN_SCHEMA_ID = "json_schema_unknown_schema_id"
UNSUPPORTED_SCHEMA = "json_schema_unsupported_schema"
UNDECODABLE = "json_schema_undecodable"
INVALID = "json_schema_invalid"

#: keywords about values rather than shape, dropped before validating
SHAPE_ONLY = frozenset(
    {
        *("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"),
        *("enum", "const", "pattern", "format", "minLength", "maxLength", "propertyNames"),
        *("minItems", "maxItems", "uniqueItems", "contains", "minContains", "maxContains"),
        *("contentEncoding", "contentMediaType", "contentSchema"),
    }
)
# keywords whose value is a schema, a list of schemas, or a map of names to schemas
_ONE = ("items", "additionalItems", "additionalProperties", "not", "if", "then", "else")
_ONE_MORE = ("unevaluatedItems", "unevaluatedProperties")
_LIST = ("allOf", "anyOf", "oneOf", "prefixItems")
_MAP = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")


def parse_writer_schema(sid: int, text: str) -> Any:
    """A validator of the shape of ``text``'s schema, or why it cannot be used."""
    try:
        schema = json.loads(text)
        cls = validator_for(schema)
        cls.check_schema(schema)
        return cls(shape_only(schema))
    except (ValueError, SchemaError, TypeError, RecursionError) as exc:
        return Undecoded(
            UNSUPPORTED_SCHEMA,
            f"writer schema {sid} is not a usable JSON Schema ({type(exc).__name__})",
        )


def shape_only(schema: Any) -> Any:
    """``schema`` without the keywords of ``SHAPE_ONLY``, ``integer`` read as ``number``."""
    if not isinstance(schema, dict):
        return schema  # true, false, or a draft-4 items list handled by the caller
    out = {k: v for k, v in schema.items() if k not in SHAPE_ONLY}
    if "type" in out:
        out["type"] = _number_for_integer(out["type"])
    for key in (*_ONE, *_ONE_MORE):
        if key in out:
            out[key] = _each(out[key])
    for key in _LIST:
        if isinstance(out.get(key), list):
            out[key] = [shape_only(s) for s in out[key]]
    for key in (*_MAP, "dependencies"):
        if isinstance(out.get(key), dict):
            out[key] = {name: shape_only(s) for name, s in out[key].items()}
    return out


def _each(schema: Any) -> Any:
    return [shape_only(s) for s in schema] if isinstance(schema, list) else shape_only(schema)


def _number_for_integer(kind: Any) -> Any:
    if kind == "integer":
        return "number"
    if isinstance(kind, list):
        return list(dict.fromkeys("number" if k == "integer" else k for k in kind))
    return kind


def to_json(values: Sequence[bytes | None], schemas: Mapping[int, Any]) -> list[bytes | Undecoded]:
    """Each framed value's JSON text, or why it cannot be read. ``schemas`` holds every
    id the values name (``Undecoded`` for an id the registry does not know)."""
    return [_one(value, schemas) for value in values]


def _zero(_: str) -> int:
    return 0


def _one(value: bytes | None, schemas: Mapping[int, Any]) -> bytes | Undecoded:
    sid = schema_id(value)
    if sid is None or value is None:
        size = 0 if value is None else len(value)
        return Undecoded(
            NO_MAGIC_BYTE,
            f"a {size}-byte value without the Confluent wire format's magic byte 0 and "
            "schema id: produce it with a JSON Schema serializer that uses the schema registry",
        )
    validator = schemas[sid]
    if isinstance(validator, Undecoded):
        return validator
    payload = value[HEADER_BYTES:]
    try:  # numbers read as 0: their values never decide (module docstring)
        document = json.loads(payload.decode("utf-8"), parse_int=_zero, parse_float=_zero)
        error = best_match(validator.iter_errors(document))
    except (ValueError, RecursionError) as exc:
        return Undecoded(
            UNDECODABLE,
            f"the payload after the 5-byte header is not JSON in UTF-8 ({type(exc).__name__})",
        )
    except Unresolvable as exc:
        return Undecoded(
            UNSUPPORTED_SCHEMA,
            f"writer schema {sid} refers to {exc}, which is not in it: schemas with "
            "references are not supported yet",
        )
    if error is not None:
        return Undecoded(
            INVALID,
            f"the record fails writer schema {sid} at {error.json_path}: "
            f"'{error.validator}' is {json.dumps(error.validator_value)[:200]}",
        )
    return payload
