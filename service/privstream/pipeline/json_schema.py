"""JSON values under a JSON Schema, in the Confluent wire format: validated, then read as JSON.

A framed value is a magic byte 0, the writer schema's registry id (4 bytes,
big-endian) and JSON text; the text after the header is what the plan reads.
Pure: the writer schemas come in parsed, by id (``privstream.worker.schemas``).

The validation checks the **shape** of the parts the plan reads only: what is
validated is not the record but the canonical record of the shape of its
projection onto the read paths (``reads``: the configured fields' paths; a
read value kept whole with every key under it, each array's distinct item
shapes once, every string "", number 0, boolean false), against
the writer schema without its value keywords (``minimum``, ``enum``,
``pattern``, ``maxItems``, ``prefixItems``, ...; ``SHAPE_ONLY`` lists them) and
with ``integer`` read as ``number``. So whether a
record is dead-lettered never depends on a value within its type
(docs/protection.md, "Whether a record is released"): the field kinds clamp,
round or map such values instead. A key no path reads (a map's key, an
unconfigured field) is left out of what is validated, and a name no path reads
counts as present under ``required`` (and ``dependentRequired``,
``dependencies``), so unread content never decides a release;
the verdict's detail names the schema's location and keyword, never the
record's. The shape also makes verdicts cacheable:
a stream's records share a few shapes, and jsonschema costs ~100 µs a call.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping, Sequence
from typing import Any

import orjson
from jsonschema.exceptions import SchemaError, best_match
from jsonschema.validators import extend, validator_for
from referencing import Registry, Resource
from referencing.exceptions import Unresolvable
from referencing.jsonschema import DRAFT202012, specification_with

from privstream.pipeline.avro import HEADER_BYTES, Undecoded, schema_id
from privstream.pipeline.decode import Names, Tree, read_tree

#: dead-letter reasons
NO_MAGIC_BYTE = "json_schema_no_magic_byte"
UNKNOWN_SCHEMA_ID = "json_schema_unknown_schema_id"
UNSUPPORTED_SCHEMA = "json_schema_unsupported_schema"
UNKNOWN_REFERENCE = "json_schema_unknown_reference"
UNDECODABLE = "json_schema_undecodable"
INVALID = "json_schema_invalid"

#: keywords about values rather than shape, dropped before validating; with them the
#: keywords about an array's length or positions (an array's items are a set's values)
SHAPE_ONLY = frozenset(
    {
        *("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"),
        *("enum", "const", "pattern", "format", "minLength", "maxLength", "propertyNames"),
        *("minItems", "maxItems", "uniqueItems", "contains", "minContains", "maxContains"),
        *("minProperties", "maxProperties"),  # a map's size: its unread keys' number
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


class _Read(dict[str, Any]):
    """An object on a read path, holding its read keys only: ``reads`` names them all, so
    that a required name outside them counts as present (``_reading``)."""

    reads: frozenset[str] = frozenset()


def project(value: Any, tree: Tree | None) -> Any:
    """The parts of ``value`` that ``tree`` reads: at each object on a path its read keys
    only (a read value whole); an array or scalar where a path expects an object stays
    (its shape fails the schema's ``type``), an array without its items."""
    if tree is None:
        return value
    if type(value) is dict:
        return {key: project(value[key], sub) for key, sub in tree.items() if key in value}
    return [] if type(value) is list else value


def canonical(key: Shape, tree: Tree | None = None) -> Any:
    """The one record of a shape that is validated for all of its records; the objects on
    ``tree``'s paths as ``_Read``."""
    if isinstance(key, str):
        return _CANONICAL[key]
    if key[0] == "[":
        return [canonical(v) for v in key[1]]
    if tree is None:
        return dict(zip(key[1], map(canonical, key[2]), strict=True))
    found = _Read({k: canonical(v, tree[k]) for k, v in zip(key[1], key[2], strict=True)})
    found.reads = frozenset(tree)
    return found


class ShapeValidator:
    """A writer schema's verdicts on the shapes of what a plan reads: None (valid) or why
    not, cached by shape."""

    def __init__(self, sid: int, validator: Any, reads: Tree) -> None:
        self._sid = sid
        self._validator = validator
        self._reads = reads
        self._verdicts: dict[Shape, str | None] = {}

    def problem(self, record: Any) -> str | None:
        """Why the read parts of a parsed record fail the schema, or None.

        Raises ``referencing.exceptions.Unresolvable`` for a reference out of the schema.
        """
        key = shape(project(record, self._reads))
        if key in self._verdicts:
            return self._verdicts[key]
        error = best_match(self._validator.iter_errors(canonical(key, self._reads)))
        found = None if error is None else self._detail(error)
        if len(self._verdicts) >= SHAPES_CACHED:
            self._verdicts.clear()
        self._verdicts[key] = found
        return found

    def _detail(self, error: Any) -> str:
        """The schema's location and keyword: never the record's path, whose keys are data
        (a map's key: ``$.purchases['alice@example.com']``)."""
        where = "/".join(
            str(step).replace("~", "~0").replace("/", "~1") for step in error.absolute_schema_path
        )
        expected = json.dumps(error.validator_value)[:200]
        return (
            f"the record fails writer schema {self._sid} at #/{where[:200]}: "
            f"'{error.validator}' is {expected}"
        )


def parse_writer_schema(
    sid: int, text: str, references: Sequence[tuple[str, str]] = (), *, reads: Names
) -> ShapeValidator | Undecoded:
    """A validator of the shape of what ``reads`` reads under ``text``'s schema, or why the
    schema cannot be used.

    ``references`` (name, text) are the schemas its ``$ref``s name from other subjects,
    each found under its reference name, shape-only like the schema itself.
    """
    try:
        schema = json.loads(text)
        cls = validator_for(schema)
        cls.check_schema(schema)
        registry = _registry(cls, references)
        validator = _reading(cls)(shape_only(schema), registry=registry)
        return ShapeValidator(sid, validator, read_tree(reads))
    except (ValueError, SchemaError, TypeError, RecursionError) as exc:
        return Undecoded(
            UNSUPPORTED_SCHEMA,
            f"writer schema {sid} is not a usable JSON Schema ({type(exc).__name__})",
        )


def _registry(cls: Any, references: Sequence[tuple[str, str]]) -> Registry[Any]:
    """The referenced schemas by name; one without ``$schema`` in the writer's dialect."""
    dialect = specification_with(cls.META_SCHEMA.get("$schema", ""), default=DRAFT202012)
    resources = []
    for name, text in references:
        schema = json.loads(text)
        validator_for(schema, default=cls).check_schema(schema)
        contents = shape_only(schema)
        resources.append((name, Resource.from_contents(contents, default_specification=dialect)))
    return Registry().with_resources(resources)


@functools.cache  # a few dialects: one class each
def _reading(cls: Any) -> Any:
    """``cls`` whose keywords that name required keys (``required``, ``dependentRequired``,
    ``dependencies``) ask of a ``_Read`` object only the names read there."""
    wrapped = {
        keyword: _read_names_only(base, keyword)
        for keyword, base in cls.VALIDATORS.items()
        if keyword in ("required", "dependentRequired", "dependencies")
    }
    return extend(cls, wrapped)


def _read_names_only(base: Any, keyword: str) -> Any:
    """The keyword function ``base`` with its names cut to those read (``_read_only``)."""

    def check(validator: Any, value: Any, instance: Any, schema: Any) -> Any:
        if isinstance(instance, _Read):
            value = _read_only(value, instance.reads, keyword)
        return base(validator, value, instance, schema)

    return check


def _read_only(value: Any, reads: frozenset[str], keyword: str) -> Any:
    """A keyword's names (a list, or a map of lists) without those not in ``reads``."""
    if keyword == "required":
        return [name for name in value if name in reads] if isinstance(value, list) else value
    if not isinstance(value, dict):
        return value
    return {
        key: [name for name in names if name in reads] if isinstance(names, list) else names
        for key, names in value.items()
    }


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
    try:  # only the read parts' shape is validated: no value decides (module docstring)
        problem = validator.problem(_parsed(payload))
    except (ValueError, RecursionError) as exc:
        return Undecoded(
            UNDECODABLE,
            f"the payload after the 5-byte header is not JSON in UTF-8 ({type(exc).__name__})",
        )
    except Unresolvable as exc:
        return Undecoded(
            UNSUPPORTED_SCHEMA,
            f"writer schema {sid} refers to {exc}, which is neither in it nor in the "
            "references it was registered with",
        )
    return payload if problem is None else Undecoded(INVALID, problem)
