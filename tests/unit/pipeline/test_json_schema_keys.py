"""Red team (session 12): JSON Schema input (i33-protobuf) and the keys of a record.

The shape the writer schema is checked against keeps every key of the record, including
the keys of objects the config never reads (a map such as ``purchases``), and the
verdict's detail names the JSON path where it failed:

1. the ``json_schema_invalid`` detail quotes a key of the raw record into the dead-letter
   header (``$.purchases['alice@example.com HIV test']``): a map's keys are data, and
   every other reason's detail names config paths only (``avro_encode._why``: "never put
   a raw value in a dead-letter header");
2. a schema registered under the topic's subject (a producer may register one; producers
   with ``use.latest.version`` then write under it) decides a record's release by the
   text of such keys (``patternProperties``): ``{"purchases": {"HIV test": 1}}`` is
   dead-lettered, ``{"purchases": {"flu test": 1}}`` released, though no field reads
   ``purchases``.

Fixed by validating only the paths the plan reads (``reads``) and naming the schema's
location in the detail. Deterministic.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from privstream.pipeline.json_schema import parse_writer_schema, to_json

KEY = "alice@example.com HIV test"
#: the paths a plan reads: a top-level field and a nested one
READS = ("x", ("device", "os"))


def framed(sid: int, record: dict[str, Any]) -> bytes:
    return b"\x00" + sid.to_bytes(4, "big") + json.dumps(record).encode()


def test_the_invalid_detail_never_quotes_a_key_of_the_record() -> None:
    schema = {
        "type": "object",
        "properties": {"purchases": {"type": "object", "additionalProperties": {"type": "number"}}},
    }
    # a field reads purchases whole (public, allow_nested): its shape is validated
    validator = parse_writer_schema(3, json.dumps(schema), reads=("x", "purchases"))
    (verdict,) = to_json([framed(3, {"x": 1, "purchases": {KEY: "positive"}})], {3: validator})
    assert not isinstance(verdict, bytes)  # dead-lettered: the shape is wrong
    assert verdict.reason == "json_schema_invalid"
    assert "alice" not in verdict.detail  # was: "... at $.purchases['alice@example.com ..."
    assert "at #/properties/purchases/additionalProperties/type: 'type'" in verdict.detail


def test_the_verdict_does_not_depend_on_the_text_of_a_key_no_field_reads() -> None:
    schema = {
        "type": "object",
        "properties": {"purchases": {"type": "object", "patternProperties": {"^HIV": False}}},
    }
    validator = parse_writer_schema(4, json.dumps(schema), reads=("x",))
    verdicts = to_json(
        [framed(4, {"x": 1, "purchases": {k: 1}}) for k in ("HIV test", "flu test")],
        {4: validator},
    )
    released = [isinstance(v, bytes) for v in verdicts]
    assert released == [True, True], f"released: {released} (HIV test, flu test)"


DRAFT_7 = "http://json-schema.org/draft-07/schema#"
#: (a rule on unread content, whether records whose read parts fit are released)
UNREAD_RULES: list[tuple[dict[str, Any], bool]] = [
    ({"required": ["x", "diagnosis"]}, True),  # an unread name counts as present
    ({"dependentRequired": {"x": ["diagnosis"]}}, True),
    ({"$schema": DRAFT_7, "dependencies": {"x": ["diagnosis"]}}, True),
    ({"properties": {"diagnosis": {"type": "string"}}}, True),
    ({"additionalProperties": False, "properties": {"x": {}, "device": {}}}, True),
    ({"patternProperties": {"^HIV": False}}, True),
    ({"minProperties": 3}, True),
    # present for every record alike, so then applies to every record alike
    ({"if": {"required": ["diagnosis"]}, "then": {"properties": {"x": {"type": "string"}}}}, False),
]


@pytest.mark.parametrize(("rule", "released"), UNREAD_RULES)
def test_no_unread_key_or_value_decides_whatever_the_schema_says_of_it(
    rule: dict[str, Any], released: bool
) -> None:
    """Records equal on the read paths (``x``, ``device.os``) get one verdict, whatever
    they hold elsewhere: present, absent, of another type, under any key."""
    validator = parse_writer_schema(5, json.dumps({"type": "object", **rule}), reads=READS)
    read = {"x": 1, "device": {"os": "ios"}}
    others = [
        {},
        {"diagnosis": 7},
        {"diagnosis": "HIV", "HIV test": [1, {"a": None}]},
        {"device": {"os": "ios", "serial": "alice"}},
    ]
    verdicts = to_json([framed(5, {**read, **other}) for other in others], {5: validator})
    assert [isinstance(v, bytes) for v in verdicts] == [released] * len(others), verdicts


def test_a_read_path_is_validated_with_nested_paths_and_names_only_the_schema() -> None:
    schema = {
        "type": "object",
        "properties": {"device": {"type": "object", "properties": {"os": {"type": "string"}}}},
        "required": ["x", "device"],
    }
    validator = parse_writer_schema(6, json.dumps(schema), reads=READS)
    records = [
        {"x": 1, "device": {"os": "ios", "serial": 5}},  # valid: serial unread
        {"x": 1, "device": {"os": 5}},  # a read value of another type
        {"x": 1, "device": ["alice"]},  # an array where the path expects an object
        {"device": {"os": "ios"}},  # a required name that is read, absent
    ]
    verdicts = to_json([framed(6, r) for r in records], {6: validator})
    assert isinstance(verdicts[0], bytes)
    details = [v.detail for v in verdicts[1:] if not isinstance(v, bytes)]
    assert [d.split(" at ")[1] for d in details] == [
        "#/properties/device/properties/os/type: 'type' is \"string\"",
        "#/properties/device/type: 'type' is \"object\"",
        '#/required: \'required\' is ["x", "device"]',
    ]
    assert not any("alice" in d or "$" in d for d in details)
