"""The Protobuf schema of the sanitized records, derived from the config's allow-list.

As for Avro output (``avro_schema``), never from the input schema: the message
``privstream.Sanitized`` holds the config's released fields in the types their
mechanisms output. A categorical is a ``string`` (``int64`` for an integer
domain; a ``Scalar`` oneof for a mixed one), a set, a vector or a unary
encoding a ``repeated`` field, a local-hashing report a nested message of seed
(``uint64``) and bucket, a public field a ``Scalar`` (a oneof of bool, sint64,
double and string), a field at a path (``device.os``) a field of a nested
message per object on the way. A field released as null where its value is
missing (``on_missing: null``) is ``optional`` (a repeated one is wrapped in a
message, as a repeated field has no presence). Each field's comment is the JSON
of its release (``avro_schema.release_doc``).

**Field numbers come from the names, never from the config's order:** a hash
of the name into [20000, 2**25). Numbered by position, taking a field out would
renumber those after it, and a reader of the old records would read one
field's values as another's whenever the types agree, with no error. Hashed, a
field keeps its number whatever is added, removed or moved around it; the cost
is a 4-byte tag per field. Two names of one message hashing to the same number
(about 1 in 7,000 for 100 fields) are refused, naming both: resolving the
collision by name order would move a field's number when the other is added.

The text is canonical: one config gives one byte string, and one registry id.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from privstream.config import FieldConfig
from privstream.config.fields import LOCAL_REAL_MECHANISMS
from privstream.config.paths import split_path
from privstream.errors import OutputSchemaError
from privstream.mechanisms.selection import ARRAY_OUTPUTS
from privstream.pipeline.avro_schema import nullable, release_doc
from privstream.pipeline.plan import PlannedField, RecordPlan

PACKAGE = "privstream"
MESSAGE = "Sanitized"
#: field numbers: above the range Protobuf reserves (19000 to 19999), tags of 4 bytes
FIRST_NUMBER = 20_000
NUMBERS = 2**25 - FIRST_NUMBER
#: a .proto identifier (as an Avro name): a letter or _, then letters, digits, _
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
SCALAR = "Scalar"
_SCALAR_DEF = (
    f"message {SCALAR} {{ oneof value {{ bool bool_value = 1; sint64 long_value = 2; "
    "double double_value = 3; string string_value = 4; } }"
)
_INT64 = range(-(2**63), 2**63)

Adapt = Callable[[Any], Any]


@dataclass(frozen=True)
class ProtoOutput:
    """The derived ``.proto`` text and how a JSON record maps onto its message."""

    text: str
    #: a JSON output record -> the message's keyword arguments (None: as it is)
    adapt: Adapt | None
    #: the message read back as a dict (``protobuf.plain``) -> the JSON output record
    restore: Adapt


@dataclass(frozen=True)
class _Type:
    """One field's type: its .proto declaration and how its JSON value maps onto it."""

    name: str
    repeated: bool = False
    #: a message type (unset is absent, so it needs no ``optional``)
    message: bool = False
    #: nested message definitions it needs
    defs: tuple[str, ...] = ()
    wrap: Adapt | None = None
    unwrap: Adapt | None = None


def output_proto(fields: Sequence[FieldConfig], plan: RecordPlan) -> ProtoOutput:
    """The message of ``plan``'s output; ``fields`` are the config's entries.

    Raises ``OutputSchemaError`` naming the field Protobuf cannot hold.
    """
    specs = {spec.name: spec for spec in fields}
    tree: dict[str, Any] = {}
    for planned in plan.fields:
        _place(tree, split_path(planned.name), planned)
    lines, adapt, restore = _message(tree, specs)
    text = "\n".join(
        [
            'syntax = "proto3";',
            f"package {PACKAGE};",
            "",
            f"// privstream sanitized record, config sha256 {plan.config_sha256}",
            f"message {MESSAGE} {{",
            *lines,
            "}",
            "",
        ]
    )
    return ProtoOutput(text, adapt, restore)


def field_number(name: str) -> int:
    """The number of field ``name``: a function of the name alone."""
    digest = hashlib.sha256(name.encode()).digest()
    return FIRST_NUMBER + int.from_bytes(digest[:8], "big") % NUMBERS


def _place(tree: dict[str, Any], path: tuple[str, ...], planned: PlannedField) -> None:
    for key in path:
        if not _NAME.match(key):
            raise OutputSchemaError(
                f"field {planned.name!r}: {key!r} cannot be a Protobuf field name (a letter "
                "or _, then letters, digits and _); set kafka.output_format: json to release "
                "it as JSON"
            )
    for key in path[:-1]:
        tree = tree.setdefault(key, {})
    tree[path[-1]] = planned


def _message(
    tree: dict[str, Any], specs: dict[str, FieldConfig]
) -> tuple[list[str], Adapt | None, Adapt]:
    """One message's lines, with the adapter and restorer of its dicts."""
    numbers = _numbers(list(tree))
    lines: list[str] = []
    defs: list[str] = []
    wraps: list[tuple[str, Adapt]] = []
    unwraps: list[tuple[str, Adapt]] = []
    nulls: list[str] = []
    objects: list[str] = []
    for key, node in tree.items():
        if isinstance(node, dict):
            kind, comment, optional = _object(key, node, specs), "an object of the output", False
        else:
            spec = specs.get(node.name)
            kind, comment = _leaf(key, node, spec), release_doc(node)
            optional = spec is not None and nullable(spec)
            if optional and kind.repeated:
                kind = _listed(key, kind)
        label = (
            "repeated " if kind.repeated else "optional " if optional and not kind.message else ""
        )
        lines += [f"  // {comment}", f"  {label}{kind.name} {key} = {numbers[key]};"]
        defs += [d for d in kind.defs if d not in defs]
        wraps += [(key, kind.wrap)] if kind.wrap is not None else []
        unwraps += [(key, kind.unwrap)] if kind.unwrap is not None else []
        nulls += [key] if optional else []
        objects += [key] if isinstance(node, dict) else []
    nested = [f"  {line}" for definition in defs for line in definition.split("\n")]
    return [*lines, *nested], _adapter(wraps), _restorer(unwraps, nulls, objects)


def _numbers(keys: list[str]) -> dict[str, int]:
    """Each key's number; ``OutputSchemaError`` if two keys of one message share one."""
    taken: dict[int, str] = {}
    for key in sorted(keys):
        number = field_number(key)
        if number in taken:
            raise OutputSchemaError(
                f"fields {taken[number]!r} and {key!r} hash to one Protobuf field number "
                f"({number}); rename one of them, or set kafka.output_format: json"
            )
        taken[number] = key
    return {key: number for number, key in taken.items()}


def _object(key: str, tree: dict[str, Any], specs: dict[str, FieldConfig]) -> _Type:
    lines, adapt, restore = _message(tree, specs)
    name = f"{key}_Object"
    definition = "\n".join([f"message {name} {{", *lines, "}"])
    return _Type(name, message=True, defs=(definition,), wrap=adapt, unwrap=restore)


def _listed(key: str, kind: _Type) -> _Type:
    """A nullable repeated field: a message holding the list (null: unset)."""
    name = f"{key}_List"
    inner, outer = kind.wrap, kind.unwrap
    return _Type(
        name,
        message=True,
        defs=(*kind.defs, f"message {name} {{ repeated {kind.name} values = 1; }}"),
        wrap=lambda items: None if items is None else {"values": _map(inner, items)},
        unwrap=lambda held: _map(outer, held.get("values", [])),
    )


def _map(each: Adapt | None, items: Any) -> Any:
    return items if each is None else each(items)


def _leaf(key: str, planned: PlannedField, spec: FieldConfig | None) -> _Type:
    if spec is None:  # ``<name>_present``: a randomized-response bit (kinds.presence)
        return _Type("bool")
    if spec.kind == "public":
        if spec.allow_nested:
            raise OutputSchemaError(
                f"field {spec.name!r}: public with allow_nested copies objects and arrays of "
                "any shape, which no Protobuf message derived from the config can hold; set "
                "allow_nested: false or kafka.output_format: json"
            )
        return _SCALAR_TYPE
    if spec.kind == "categorical":
        if planned.mechanism == "local_hashing" or spec.domain is None:
            name = f"{key}_Report"
            report = f"message {name} {{ uint64 seed = 1; int64 bucket = 2; }}"
            return _Type(name, message=True, defs=(report,))
        values = _domain(spec.domain)
        return _repeated(values) if planned.mechanism in ARRAY_OUTPUTS else values
    if spec.kind == "set":
        return _repeated(_domain(spec.universe))
    if spec.kind == "timestamp":
        return _Type("string" if spec.output == "iso" else "int64")
    if spec.kind == "integer" and planned.mechanism in LOCAL_REAL_MECHANISMS:
        return _KINDS["real"]  # an integer on the real menu releases reals
    return _KINDS[spec.kind]


def _domain(domain: Sequence[str | int]) -> _Type:
    texts = sum(isinstance(v, str) for v in domain)
    if texts == len(domain):
        return _Type("string")
    return _Type("int64") if texts == 0 else _SCALAR_TYPE


def _repeated(item: _Type) -> _Type:
    wrap, unwrap = item.wrap, item.unwrap
    return _Type(
        item.name,
        repeated=True,
        defs=item.defs,
        wrap=None if wrap is None else lambda items: [wrap(i) for i in items],
        unwrap=None if unwrap is None else lambda items: [unwrap(i) for i in items],
    )


def scalar(value: Any) -> dict[str, Any] | None:
    """A public JSON value as a ``Scalar``: an integer beyond 64 bits as a double (as
    Avro output writes it), so it loses digits."""
    if value is None:
        return None
    kind = type(value)
    if kind is bool:
        return {"bool_value": value}
    if kind is int:
        return {"long_value": value} if value in _INT64 else {"double_value": float(value)}
    if kind is float:
        return {"double_value": value}
    if kind is str:
        return {"string_value": value}
    raise TypeError(f"a {kind.__name__} where a public value is a JSON scalar")


def unscalar(held: dict[str, Any]) -> Any:
    """A ``Scalar`` read back: its one value (none set: null)."""
    return next(iter(held.values()), None)


_SCALAR_TYPE = _Type(SCALAR, message=True, defs=(_SCALAR_DEF,), wrap=scalar, unwrap=unscalar)
_KINDS = {
    "real": _Type("double"),
    "integer": _Type("int64"),
    "boolean": _Type("bool"),
    "vector": _Type("double", repeated=True),
    "functional": _Type("double", repeated=True),
}


def _adapter(wraps: list[tuple[str, Adapt]]) -> Adapt | None:
    if not wraps:
        return None
    pairs = tuple(wraps)

    def adapt(record: dict[str, Any]) -> dict[str, Any]:
        for key, wrap in pairs:
            if key in record:
                record[key] = wrap(record[key])
        return record

    return adapt


def _restorer(unwraps: list[tuple[str, Adapt]], nulls: list[str], objects: list[str]) -> Adapt:
    """Unset nullable fields null, an unset object empty (its own restore fills it in), then
    each field's value as the JSON output holds it."""
    pairs, absent, empty = tuple(unwraps), tuple(nulls), tuple(objects)

    def restore(record: dict[str, Any]) -> dict[str, Any]:
        for key in absent:
            record.setdefault(key, None)
        for key in empty:
            record.setdefault(key, {})
        for key, unwrap in pairs:
            value = record.get(key)
            if value is not None:
                record[key] = unwrap(value)
        return record

    return restore
