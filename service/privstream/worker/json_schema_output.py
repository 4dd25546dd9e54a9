"""JSON Schema output: the schema derived from the config
(``privstream.pipeline.json_schema_output``), registered under
``<output_topic>-value`` as ``JSON``, BACKWARD (``output_schema`` does the
registry's part).

A config whose schema the registry refuses is named field by field from the
latest registered version: a field taken out (the closed content model would
refuse the records holding it), a new field that is required, a field that can
no longer be null, domain values that are gone, a type that changed (an
integer made a number is no change: every integer is a number).
"""

from __future__ import annotations

import json
from typing import Any

from privstream.config import AppConfig
from privstream.pipeline import RecordPlan
from privstream.pipeline.json_schema_output import (
    JsonSchemaEncoder,
    output_json_schema,
    schema_text,
)


class JsonSchemaDerived:
    """The derived JSON Schema of one config (``output_schema.Derived``)."""

    schema_type = "JSON"
    advice = (
        "keep each field as it was, add new fields with on_missing: null, or write to a new "
        "kafka.output_topic"
    )

    def __init__(self, schema: dict[str, Any]) -> None:
        self.schema = schema
        self.text = schema_text(schema)

    @classmethod
    def of(cls, config: AppConfig, plan: RecordPlan) -> JsonSchemaDerived:
        return cls(output_json_schema(config.fields, plan))

    def encoder(self, schema_id: int) -> JsonSchemaEncoder:
        return JsonSchemaEncoder(schema_id)

    def problems(self, latest: str) -> list[str]:
        old = json.loads(latest)
        return _differences(old, self.schema, "") if isinstance(old, dict) else []


def _differences(old: dict[str, Any], new: dict[str, Any], prefix: str) -> list[str]:
    """Why records valid under the object schema ``old`` are not under ``new``."""
    before, after = old.get("properties", {}), new.get("properties", {})
    problems = [
        f"field {prefix + key!r} is no longer in the config, and records already in the "
        "topic hold it"
        for key in before
        if key not in after
    ]
    problems += [
        f"field {prefix + key!r} is new and required (it is not on_missing: null), and the "
        "records already in the topic lack it"
        for key in new.get("required", [])
        if key not in before
    ]
    for key in (k for k in after if k in before):
        problems += _field(prefix + key, before[key], after[key], key in old.get("required", []))
    return problems


def _field(name: str, old: dict[str, Any], new: dict[str, Any], was_required: bool) -> list[str]:
    (old_null, was), (new_null, now) = _core(old), _core(new)
    if (old_null or not was_required) and not new_null and now != {}:
        return [f"field {name!r} can no longer be null, and records already in the topic are"]
    if was.get("type") == now.get("type") == "object" and "properties" in now:
        return _differences(was, now, f"{name}.")
    values, kept = _enum(was), _enum(now)
    if values is not None and kept is not None and was.get("type") == now.get("type"):
        gone = [v for v in values if v not in kept]  # values added are no problem
        return [f"field {name!r} no longer has the domain values {gone}, which records hold"][
            : bool(gone)
        ]
    widened = was.get("type") == "integer" and now.get("type") == "number"
    if was != now and now != {} and not widened:
        return [f"field {name!r} changes from {_brief(was)} to {_brief(now)}"]
    return []


def _core(schema: dict[str, Any]) -> tuple[bool, dict[str, Any]]:
    """Whether a field's schema admits null, and its schema without null or description."""
    body = {k: v for k, v in schema.items() if k != "description"}
    options = body.get("anyOf")
    if isinstance(options, list) and {"type": "null"} in options and len(options) == 2:
        return True, next(o for o in options if o != {"type": "null"})
    return "null" in (body.get("type") or ()), body


def _enum(schema: dict[str, Any]) -> list[Any] | None:
    found = schema.get("enum", schema.get("items", {}).get("enum"))
    return found if isinstance(found, list) else None


def _brief(schema: dict[str, Any]) -> str:
    return json.dumps(schema, sort_keys=True, separators=(",", ":"))[:120]
