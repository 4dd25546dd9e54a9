"""JSON values under a JSON Schema, in the Confluent wire format: validated, then read as JSON.

A framed value is a magic byte 0, the writer schema's registry id (4 bytes,
big-endian) and JSON text; the text after the header is what the plan reads.
Pure: the writer schemas come in parsed, by id (``privstream.worker.schemas``).

The validation checks the record's **shape** only: what is validated is not
the record but its shape's canonical record (every key kept, each array's
distinct item shapes once, every string "", number 0, boolean false), against
the writer schema without its value keywords (``minimum``, ``enum``,
``pattern``, ``maxItems``, ``prefixItems``, ...; ``SHAPE_ONLY`` lists them) and
with ``integer`` read as ``number``. So whether a
record is dead-lettered never depends on a value within its type
(docs/protection.md, "Whether a record is released"): the field kinds clamp,
round or map such values instead. It also makes verdicts cacheable by shape:
a stream's records share a few shapes, and jsonschema costs ~100 µs a call.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import orjson
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

#: keywords about values rather than shape, dropped before validating; with them the
#: keywords about an array's length or positions (an array's items are a set's values)
SHAPE_ONLY = frozenset(
    {
        *("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"),
        *("enum", "const", "pattern", "format", "minLength", "maxLength", "propertyNames"),
        *("minItems", "maxItems", "uniqueItems", "contains", "minContains", "maxContains"),
        *("prefixItems", "additionalItems", "unevaluatedItems"),
        *("contentEncoding", "contentMediaType", "contentSchema"),
    }
)
# keywords whose value is a schema, a list of schemas, or a map of names to schemas
_ONE = ("items", "additionalProperties", "unevaluatedProperties", "not", "if", "then", "else")
_LIST = ("allOf", "anyOf", "oneOf")
_MAP = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")


#: verdicts kept per writer schema, by shape (all dropped when full: a hostile writer's
#: endless new shapes cost one validation each, as without the cache)
SHAPES_CACHED = 4096
_SCALARS = {type(None): "null", bool: "boolean", int: "number", float: "number", str: "string"}
_scalar = _SCALARS.get
_CANONICAL: dict[str, Any] = {"null": None, "boolean": False, "number": 0, "string": ""}
Shape = tuple[Any, ...] | str


def shape(value: Any) -> Shape:
    """A parsed JSON value's shape: its objects' keys in order, the distinct shapes of its
    arrays' items (not their number or order), and the type of each scalar, never a
    scalar's value."""
    kind = type(value)
    if kind is dict:
        return ("{", tuple(value), tuple([_scalar(type(v)) or shape(v) for v in value.values()]))
    if kind is list:
        items = {_scalar(type(v)) or shape(v) for v in value}
        return ("[", tuple(sorted(items, key=repr)))  # sorted: the same detail every run
    return _SCALARS[kind]


def canonical(key: Shape) -> Any:
    """The one record of a shape that is validated for all of its records."""
    if isinstance(key, str):
        return _CANONICAL[key]
    if key[0] == "{":
        return dict(zip(key[1], map(canonical, key[2]), strict=True))
    return [canonical(v) for v in key[1]]


class ShapeValidator:
    """A writer schema's verdicts on shapes: None (valid) or why not, cached by shape."""

    def __init__(self, sid: int, validator: Any) -> None:
        self._sid = sid
        self._validator = validator
        self._verdicts: dict[Shape, str | None] = {}

    def problem(self, key: Shape) -> str | None:
        """Why a record of shape ``key`` fails the schema, or None.

        Raises ``referencing.exceptions.Unresolvable`` for a reference out of the schema.
        """
        if key in self._verdicts:
            return self._verdicts[key]
        error = best_match(self._validator.iter_errors(canonical(key)))
        found = None if error is None else self._detail(error)
        if len(self._verdicts) >= SHAPES_CACHED:
            self._verdicts.clear()
        self._verdicts[key] = found
        return found

    def _detail(self, error: Any) -> str:
        expected = json.dumps(error.validator_value)[:200]
        return (
            f"the record fails writer schema {self._sid} at {error.json_path[:200]}: "
            f"'{error.validator}' is {expected}"
        )


def parse_writer_schema(sid: int, text: str) -> ShapeValidator | Undecoded:
    """A validator of the shape of ``text``'s schema, or why it cannot be used."""
    try:
        schema = json.loads(text)
        cls = validator_for(schema)
        cls.check_schema(schema)
        return ShapeValidator(sid, cls(shape_only(schema)))
    except (ValueError, SchemaError, TypeError, RecursionError) as exc:
        return Undecoded(
            UNSUPPORTED_SCHEMA,
            f"writer schema {sid} is not a usable JSON Schema ({type(exc).__name__})",
        )


def shape_only(schema: Any) -> Any:
    """``schema`` without the keywords of ``SHAPE_ONLY``, ``integer`` read as ``number``."""
    if not isinstance(schema, dict):
        return schema  # true or false
    out = {k: v for k, v in schema.items() if k not in SHAPE_ONLY}
    if "prefixItems" in schema or isinstance(schema.get("items"), list):
        out.pop("items", None)  # a tuple's items: by position, which the shape does not keep
    if "type" in out:
        out["type"] = _number_for_integer(out["type"])
    for key in _ONE:
        if key in out:
            out[key] = shape_only(out[key])
    for key in _LIST:
        if isinstance(out.get(key), list):
            out[key] = [shape_only(s) for s in out[key]]
    for key in (*_MAP, "dependencies"):
        if isinstance(out.get(key), dict):
            out[key] = {name: shape_only(s) for name, s in out[key].items()}
    return out


def _number_for_integer(kind: Any) -> Any:
    if kind == "integer":
        return "number"
    if isinstance(kind, list):
        return list(dict.fromkeys("number" if k == "integer" else k for k in kind))
    return kind


def to_json(
    values: Sequence[bytes | None], schemas: Mapping[int, ShapeValidator | Undecoded]
) -> list[bytes | Undecoded]:
    """Each framed value's JSON text, or why it cannot be read. ``schemas`` holds every
    id the values name (``Undecoded`` for an id the registry does not know)."""
    return [_one(value, schemas) for value in values]


def _zero(_: str) -> int:
    return 0


def _parsed(payload: bytes) -> Any:
    """The payload parsed: by orjson, else (a lone surrogate, a number beyond 64 bits or
    the double range, a text that is not JSON) by the standard library's parser with
    every number read as 0, so that no number's length or size decides."""
    try:
        return orjson.loads(payload)
    except orjson.JSONDecodeError:
        text = payload.decode("utf-8")
        return json.loads(text, parse_int=_zero, parse_float=_zero, parse_constant=_zero)


def _one(
    value: bytes | None, schemas: Mapping[int, ShapeValidator | Undecoded]
) -> bytes | Undecoded:
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
    try:  # only the shape is read: no value decides (module docstring)
        problem = validator.problem(shape(_parsed(payload)))
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
    return payload if problem is None else Undecoded(INVALID, problem)
