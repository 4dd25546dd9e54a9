"""The config's JSON Schema, generated from the pydantic models (never written twice).

``privstream schema > privstream.schema.json``; a config that starts with
``# yaml-language-server: $schema=privstream.schema.json`` is then validated
and completed by editors that use the YAML language server. The schema
checks shape and types; ``privstream explain --config`` checks everything
(budgets, memo references, what a mechanism can honour).
"""

from __future__ import annotations

from typing import Any

from privstream.config.models import AppConfig

SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"


def config_schema() -> dict[str, Any]:
    """JSON Schema (draft 2020-12) of a privstream config file."""
    schema = AppConfig.model_json_schema(mode="validation")
    # a real field's calibration defaults by mechanism (a before-validator fills it in),
    # which pydantic's schema cannot say: it is optional in the file
    real = schema["$defs"]["RealField"]
    real["required"] = [name for name in real["required"] if name != "calibration"]
    for definition in schema["$defs"].values():
        _name_or_path(definition)
    return {"$schema": SCHEMA_DIALECT, **schema, "title": "privstream config"}


#: ``path: [device, os]``, which a before-validator turns into ``name`` (``config.paths``)
_PATH = {"type": "array", "items": {"type": "string", "minLength": 1}, "minItems": 1}


def _name_or_path(definition: dict[str, Any]) -> None:
    """A field entry names its value by ``name`` or by ``path``, exactly one of them."""
    properties = definition.get("properties", {})
    if "name" not in properties or "kind" not in properties:
        return
    properties["path"] = dict(_PATH)
    definition["required"] = [key for key in definition["required"] if key != "name"]
    definition["oneOf"] = [{"required": ["name"]}, {"required": ["path"]}]
