"""The JSON Schema of the sanitized records, derived from the config's allow-list, and
their framing.

As for Avro output (``avro_schema``), never from the input schema: an object
of the config's released fields in the types their mechanisms output (a
categorical the ``enum`` of its domain, a set, a vector or a unary encoding an
array, a local-hashing report an object of seed and bucket, a public field any
JSON scalar, or any value with ``allow_nested``), objects nested as the
fields' paths say. The content model is closed (``additionalProperties:
false``) and a field is ``required`` unless it can be null (``on_missing:
null``, every public field): so a field added with ``on_missing: null`` is a
compatible change, and a field taken out, a required field added or a
narrowed type or domain is not, as the registry's BACKWARD check sees it.
Each field's ``description`` is the JSON of its release
(``avro_schema.release_doc``).

The value is the JSON output as released, after the magic byte and the
schema's registry id: framing costs a copy, never a re-encoding.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from privstream.config import FieldConfig
from privstream.config.fields import LOCAL_REAL_MECHANISMS
from privstream.config.paths import split_path
from privstream.mechanisms.selection import ARRAY_OUTPUTS
from privstream.pipeline.avro import HEADER_BYTES, MAGIC
from privstream.pipeline.avro_schema import nullable, release_doc
from privstream.pipeline.plan import PlannedField, RecordPlan
from privstream.pipeline.results import BatchResult

DRAFT = "http://json-schema.org/draft-07/schema#"
_SCALARS = ["null", "boolean", "number", "string"]
_NUMBERS = {"type": "array", "items": {"type": "number"}}


def output_json_schema(fields: Sequence[FieldConfig], plan: RecordPlan) -> dict[str, Any]:
    """The schema of ``plan``'s output records; ``fields`` are the config's entries."""
    specs = {spec.name: spec for spec in fields}
    tree: dict[str, Any] = {}
    for planned in plan.fields:
        path = split_path(planned.name)
        node = tree
        for key in path[:-1]:
            node = node.setdefault(key, {})
        node[path[-1]] = planned
    return {
        "$schema": DRAFT,
        "title": "privstream.Sanitized",
        "description": f"privstream sanitized record, config sha256 {plan.config_sha256}",
        **_object(tree, specs),
    }


def schema_text(schema: dict[str, Any]) -> str:
    """The canonical text registered: sorted keys, no spaces, ASCII."""
    return json.dumps(schema, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


def _object(tree: dict[str, Any], specs: dict[str, FieldConfig]) -> dict[str, Any]:
    properties: dict[str, Any] = {}
    required: list[str] = []
    for key, node in tree.items():
        if isinstance(node, dict):
            properties[key], optional = _object(node, specs), False
        else:
            spec = specs.get(node.name)
            optional = spec is not None and nullable(spec)
            value = _leaf(node, spec)
            if optional and value:  # ``{}`` (anything) holds null already
                value = {"anyOf": [{"type": "null"}, value]}
            properties[key] = {"description": release_doc(node), **value}
        if not optional:
            required.append(key)
    return {
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": False,
    }


def _leaf(planned: PlannedField, spec: FieldConfig | None) -> dict[str, Any]:
    if spec is None:  # ``<name>_present``: a randomized-response bit (kinds.presence)
        return {"type": "boolean"}
    if spec.kind == "public":
        return {} if spec.allow_nested else {"type": list(_SCALARS)}
    if spec.kind == "categorical":
        if planned.mechanism == "local_hashing" or spec.domain is None:
            return _REPORT
        values = {"enum": list(spec.domain)}
        return {"type": "array", "items": values} if planned.mechanism in ARRAY_OUTPUTS else values
    if spec.kind == "set":
        return {"type": "array", "items": {"enum": list(spec.universe)}}
    if spec.kind == "timestamp":
        return {"type": "string" if spec.output == "iso" else "integer"}
    if spec.kind == "integer" and planned.mechanism in LOCAL_REAL_MECHANISMS:
        return dict(_KINDS["real"])  # an integer on the real menu releases reals
    return dict(_KINDS[spec.kind])


_REPORT = {
    "type": "object",
    "properties": {"seed": {"type": "integer", "minimum": 0}, "bucket": {"type": "integer"}},
    "required": ["seed", "bucket"],
    "additionalProperties": False,
}
_KINDS: dict[str, dict[str, Any]] = {
    "real": {"type": "number"},
    "integer": {"type": "integer"},
    "boolean": {"type": "boolean"},
    "vector": _NUMBERS,
    "functional": _NUMBERS,
}


@dataclass(frozen=True)
class JsonSchemaEncoder:
    """Frames sanitized JSON records with one registered schema's id."""

    schema_id: int
    _header: bytes = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        header = bytes([MAGIC]) + self.schema_id.to_bytes(HEADER_BYTES - 1, "big")
        object.__setattr__(self, "_header", header)

    def encode(self, result: BatchResult) -> BatchResult:
        """``result`` with each output framed."""
        header = self._header
        return replace(result, outputs=[header + text for text in result.outputs])
