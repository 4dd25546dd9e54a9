"""The Avro schema of the sanitized records, derived from the config's allow-list.

Never from the input schema: what is released is what the config says, in the
types the mechanisms output (a categorical is an enum or a string of its
domain, a set or vector an array, a local-hashing report a record of seed and
bucket), so a field upstream adds never reaches the output schema either. A
field released as null where its value is missing (``on_missing: null``), and
every public field, is a union with null (default null).

Each field's ``doc`` is canonical JSON of its release: kind, mechanism,
epsilon, delta and release id (``PlannedField.release_id``, hex). The text is
canonical (sorted keys, no spaces, fields in config order), so one config
gives one byte string, and the registry one id, on every start.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from privstream.config import FieldConfig
from privstream.config.fields import LOCAL_REAL_MECHANISMS
from privstream.errors import OutputSchemaError
from privstream.mechanisms.selection import ARRAY_OUTPUTS
from privstream.pipeline.plan import PlannedField, RecordPlan

#: the record's full name in the registry
NAMESPACE = "privstream"
RECORD_NAME = "Sanitized"
#: Avro names (fields, enum symbols): a letter or _, then letters, digits, _
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
#: what a public field may hold: a JSON scalar (``allow_nested`` is refused)
_PUBLIC = ["null", "boolean", "long", "double", "string"]
_DOUBLES = {"type": "array", "items": "double"}

Avro = str | list[Any] | dict[str, Any]


def output_schema(fields: Sequence[FieldConfig], plan: RecordPlan) -> dict[str, Any]:
    """The record schema of ``plan``'s output; ``fields`` are the config's entries.

    Raises ``OutputSchemaError`` naming the field Avro cannot hold.
    """
    specs = {spec.name: spec for spec in fields}
    return {
        "type": "record",
        "name": RECORD_NAME,
        "namespace": NAMESPACE,
        "doc": f"privstream sanitized record, config sha256 {plan.config_sha256}",
        "fields": [_field(planned, specs.get(planned.name)) for planned in plan.fields],
    }


def schema_text(schema: dict[str, Any]) -> str:
    """The canonical text registered: sorted keys, no spaces, ASCII."""
    return json.dumps(schema, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


def hash_report_fields(plan: RecordPlan) -> tuple[str, ...]:
    """The fields released as local-hashing reports (their seed is an unsigned 64-bit
    number, written as the signed ``long`` of the same bits)."""
    return tuple(f.name for f in plan.fields if f.mechanism == "local_hashing")


def _field(planned: PlannedField, spec: FieldConfig | None) -> dict[str, Any]:
    name = planned.name
    if not _NAME.match(name):
        raise OutputSchemaError(
            f"field {name!r} cannot be an Avro field name (a letter or _, then letters, "
            "digits and _); set kafka.output_format: json to release it as JSON"
        )
    avro = _type(planned, spec)
    entry: dict[str, Any] = {"name": name, "doc": release_doc(planned)}
    if spec is None or not nullable(spec):
        return {**entry, "type": avro}
    if isinstance(avro, list):  # a union: null first (a public field's has it already)
        union = avro if "null" in avro else ["null", *avro]
        return {**entry, "type": union, "default": None}
    return {**entry, "type": ["null", avro], "default": None}


def nullable(spec: FieldConfig) -> bool:
    """The field is released as null where it has no value (every public field too)."""
    return spec.kind == "public" or getattr(spec, "on_missing", None) == "null"


def release_doc(planned: PlannedField) -> str:
    """Canonical JSON of one field's release (the Avro and Protobuf output schemas' docs)."""
    mechanism = planned.handler.mechanism
    release = {
        "kind": planned.kind,
        "mechanism": planned.mechanism,
        "epsilon": None if mechanism is None else mechanism.epsilon,
        "delta": None if mechanism is None else mechanism.delta,
        "release_id": planned.release_id.hex(),
    }
    return json.dumps(release, sort_keys=True, separators=(",", ":"))


def _type(planned: PlannedField, spec: FieldConfig | None) -> Avro:
    """The Avro type of one released field's values (its null, if any, added by the caller)."""
    if spec is None:  # ``<name>_present``: a randomized-response bit (kinds.presence)
        return "boolean"
    if spec.kind == "public":
        if spec.allow_nested:
            raise OutputSchemaError(
                f"field {spec.name!r}: public with allow_nested copies objects and arrays of "
                "any shape, which no Avro schema derived from the config can hold; set "
                "allow_nested: false or kafka.output_format: json"
            )
        return list(_PUBLIC)
    if spec.kind == "categorical":
        return _categorical(planned, spec.domain)
    if spec.kind == "set":
        return {"type": "array", "items": _domain(spec.name, spec.universe)}
    if spec.kind == "timestamp":
        return "string" if spec.output == "iso" else "long"
    if spec.kind == "integer" and planned.mechanism in LOCAL_REAL_MECHANISMS:
        return "double"  # an integer on the real menu releases reals
    return _SCALAR[spec.kind]


_SCALAR: dict[str, Avro] = {
    "real": "double",
    "integer": "long",
    "boolean": "boolean",
    "vector": _DOUBLES,
    "functional": _DOUBLES,
}


def _categorical(planned: PlannedField, domain: Sequence[str | int] | None) -> Avro:
    if planned.mechanism == "local_hashing" or domain is None:
        return {
            "type": "record",
            "name": f"{planned.name}_report",
            "fields": [{"name": "seed", "type": "long"}, {"name": "bucket", "type": "long"}],
        }
    values = _domain(planned.name, domain)
    if planned.mechanism in ARRAY_OUTPUTS:  # OUE's values whose noisy bit is 1, SS's subset
        return {"type": "array", "items": values}
    return values


def _domain(name: str, domain: Sequence[str | int]) -> Avro:
    """An enum of the domain when every value is an Avro name, else string or long."""
    texts = [v for v in domain if isinstance(v, str)]
    if len(texts) == len(domain) and all(map(_NAME.match, texts)):
        return {"type": "enum", "name": f"{name}_domain", "symbols": list(texts)}
    if not texts:
        return "long"
    return "string" if len(texts) == len(domain) else ["long", "string"]
