"""JSON Schema output: the schema derived from the config, the framing, and the differences
that name a refused config (privstream.pipeline.json_schema_output,
privstream.worker.json_schema_output)."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
from jsonschema import Draft7Validator
from privstream.kinds import build_plan
from privstream.mechanisms.rng import NoiseKeys
from privstream.pipeline import process_batch
from privstream.pipeline.json_schema_output import JsonSchemaEncoder, output_json_schema
from privstream.pipeline.noise import Replayable
from privstream.worker.json_schema_output import JsonSchemaDerived

from tests.unit.pipeline.test_avro_output import EVERY_KIND, SECRET, config_of
from tests.unit.pipeline.test_protobuf_output import NESTED, nested_record

SCHEMA_ID = 2**31 + 9


def schema_of(fields: list[dict[str, Any]]) -> dict[str, Any]:
    config = config_of(fields)
    return output_json_schema(config.fields, build_plan(config))


def derived(fields: list[dict[str, Any]]) -> JsonSchemaDerived:
    config = config_of(fields)
    return JsonSchemaDerived.of(config, build_plan(config))


def test_every_output_record_is_valid_and_framed_under_the_derived_schema() -> None:
    """200 sanitized records of every kind (nested paths, a null set) validate against the
    derived schema with the jsonschema library, framed with magic byte and id as they are;
    a record with a key the config does not release, or a categorical outside its domain,
    does not (the schema is not vacuous)."""
    fields = EVERY_KIND + NESTED
    plan = build_plan(config_of(fields))
    messages = [json.dumps(nested_record(n)).encode() for n in range(200)]
    positions = np.arange(200, dtype=np.int64)
    noise = Replayable(NoiseKeys(SECRET, "raw"), np.zeros(200, np.int64), positions, messages)
    result = process_batch(plan, messages, noise)
    assert not result.dead_letters
    validator = Draft7Validator(schema_of(fields))
    framed = JsonSchemaEncoder(SCHEMA_ID).encode(result)
    header = b"\x00" + SCHEMA_ID.to_bytes(4, "big")
    records = []
    for text, value in zip(result.outputs, framed.outputs, strict=True):
        assert value == header + text
        records.append(json.loads(text))
        assert not list(validator.iter_errors(records[-1])), text
    assert any(r["tags"] is None for r in records) and any(r["i"] is None for r in records)
    assert not validator.is_valid({**records[0], "id": 1})
    assert not validator.is_valid({**records[0], "c": "not in the domain"})
    assert not validator.is_valid({**records[0], "device": {**records[0]["device"], "x": 1}})


def test_nullable_fields_are_optional_and_the_rest_required() -> None:
    schema = schema_of(EVERY_KIND + NESTED)
    assert "i" not in schema["required"] and "ts" not in schema["required"]  # can be null
    assert {"r", "c", "b_present", "device"} <= set(schema["required"])
    assert schema["additionalProperties"] is False
    assert schema["properties"]["c"]["enum"] == ["a", "b", "c"]
    assert schema["properties"]["ch"]["required"] == ["seed", "bucket"]
    assert '"mechanism":"randomized_response"' in schema["properties"]["c"]["description"]
    text = derived(EVERY_KIND).text
    assert derived(EVERY_KIND).text == text and text == json.dumps(
        json.loads(text), sort_keys=True, separators=(",", ":")
    )


def test_differences_name_the_fields_that_break_old_records() -> None:
    base = [
        {"name": "n", "kind": "real", "bounds": [0, 9], "epsilon": 1},
        {"name": "k", "kind": "integer", "bounds": [0, 9], "epsilon": 1},
        {"name": "c", "kind": "categorical", "domain": ["x", "y"], "epsilon": 1},
        {"name": "gone", "kind": "boolean", "epsilon": 1},
        {"name": "opt", "kind": "real", "bounds": [0, 1], "epsilon": 1, "on_missing": "null"},
    ]
    old = derived(base).text
    changed = [
        {"name": "n", "kind": "integer", "bounds": [0, 9], "epsilon": 1},  # number -> integer
        {"name": "k", "kind": "real", "bounds": [0, 9], "epsilon": 1},  # widened: no problem
        {"name": "c", "kind": "categorical", "domain": ["x", "z"], "epsilon": 1},
        {"name": "opt", "kind": "real", "bounds": [0, 1], "epsilon": 1},  # no longer nullable
        {"name": "new", "kind": "real", "bounds": [0, 1], "epsilon": 1},  # required
        {"name": "fine", "kind": "real", "bounds": [0, 1], "epsilon": 1, "on_missing": "null"},
    ]
    assert sorted(derived(changed).problems(old)) == [
        "field 'c' no longer has the domain values ['y'], which records hold",
        "field 'gone' is no longer in the config, and records already in the topic hold it",
        'field \'n\' changes from {"type":"number"} to {"type":"integer"}',
        "field 'new' is new and required (it is not on_missing: null), and the records "
        "already in the topic lack it",
        "field 'opt' can no longer be null, and records already in the topic are",
    ]
    widened = [dict(base[1], kind="real"), *base[2:], {**base[0], "epsilon": 2}]
    assert derived(widened).problems(old) == []
