"""Confluent-framed JSON under a JSON Schema (privstream.pipeline.json_schema): validated
for shape only, so that no value within its type decides whether a record is released."""

from __future__ import annotations

import json
from typing import Any

import pytest
from privstream.pipeline.avro import Undecoded
from privstream.pipeline.json_schema import (
    INVALID,
    NO_MAGIC_BYTE,
    SHAPES_CACHED,
    UNDECODABLE,
    UNSUPPORTED_SCHEMA,
    ShapeValidator,
    canonical,
    parse_writer_schema,
    shape,
    shape_only,
    to_json,
)

DRAFT_2020 = "https://json-schema.org/draft/2020-12/schema"
DRAFT_7 = "http://json-schema.org/draft-07/schema#"
SCHEMA: dict[str, Any] = {
    "$schema": DRAFT_2020,
    "type": "object",
    "properties": {
        "seq": {"type": "integer", "minimum": 0, "maximum": 100},
        "salary": {"type": "number", "exclusiveMaximum": 1e6, "multipleOf": 0.5},
        "state": {"type": "string", "enum": ["TX", "CA"], "pattern": "^[A-Z]{2}$"},
        "tags": {"type": "array", "items": {"type": "string", "maxLength": 3}, "maxItems": 2},
        "pattern": {"type": "string", "const": "x"},  # a field named like a keyword
    },
    "required": ["seq", "state", "pattern"],
    "additionalProperties": False,
}
#: the paths the plan reads: every property but ``email``
READS = ("seq", "salary", "state", "tags", "pattern")
VALIDATOR = parse_writer_schema(4, json.dumps(SCHEMA), reads=READS)


def framed(document: str, sid: int = 4) -> bytes:
    return b"\x00" + sid.to_bytes(4, "big") + document.encode()


def verdicts(*documents: str) -> list[bytes | Undecoded]:
    return to_json([framed(d) for d in documents], {4: VALIDATOR})


def test_a_valid_record_is_passed_on_as_received_after_the_header() -> None:
    text = '{"seq": 3, "state": "TX", "pattern": "x", "tags": ["a"]}'
    assert verdicts(text) == [text.encode()]


@pytest.mark.parametrize(
    "document",
    [
        '{"seq": 101, "state": "TX", "pattern": "x"}',  # above maximum
        '{"seq": 2.5, "state": "TX", "pattern": "x"}',  # a fraction under "integer"
        '{"seq": 1e999, "state": "TX", "pattern": "x"}',  # beyond the double range
        '{"seq": ' + "9" * 5000 + ', "state": "TX", "pattern": "x"}',  # past int's digit limit
        '{"seq": 1, "salary": 0.3, "state": "TX", "pattern": "x"}',  # not a multiple of 0.5
        '{"seq": 1, "state": "ny", "pattern": "y"}',  # outside enum, pattern, const
        '{"seq": 1, "state": "\\ud800", "pattern": "x"}',  # a lone surrogate
        '{"seq": 1, "state": "TX", "pattern": "x", "tags": ["long", "b", "c"]}',  # lengths
    ],
)
def test_no_value_within_its_type_decides_the_verdict(document: str) -> None:
    """Each record differs from a valid one in values only: released alike (the kinds clamp,
    round or map such values; docs/protection.md)."""
    assert verdicts(document) == [document.encode()]


@pytest.mark.parametrize(
    ("document", "where", "keyword"),
    [
        ('{"seq": 1, "state": "TX"}', "#/required", "required"),
        ('{"seq": "1", "state": "TX", "pattern": "x"}', "#/properties/seq/type", "type"),
        (
            '{"seq": 1, "state": "TX", "pattern": "a@b", "tags": [7]}',
            "#/properties/tags/items/type",
            "type",
        ),
    ],
)
def test_a_record_of_another_shape_is_invalid_naming_the_schema_location_not_the_value(
    document: str, where: str, keyword: str
) -> None:
    [found] = verdicts(document)
    assert isinstance(found, Undecoded)
    assert found.reason == INVALID
    assert f"writer schema 4 at {where}: '{keyword}'" in found.detail
    assert "a@b" not in found.detail


def test_a_key_no_field_reads_is_not_validated() -> None:
    """``additionalProperties: false`` holds for the read paths only: an unread key is not
    released, and its presence must not decide the record's release either."""
    text = '{"seq": 1, "state": "TX", "pattern": "x", "email": "a@b"}'
    assert verdicts(text) == [text.encode()]


def test_text_that_is_not_json_in_utf8_is_undecodable_and_unframed_values_are_named() -> None:
    found = verdicts('{"seq": 1', "not json")
    found += to_json([b'\x00\x00\x00\x00\x04{"seq": "\xff"}'], {4: VALIDATOR})
    assert [f.reason for f in found] == [UNDECODABLE] * 3  # type: ignore[union-attr]
    rejected = to_json([b'{"seq": 1}', None], {4: VALIDATOR})
    assert [f.reason for f in rejected] == [NO_MAGIC_BYTE] * 2  # type: ignore[union-attr]


@pytest.mark.parametrize("text", ["not json", '{"type": 5}', '{"minimum": "zero"}'])
def test_a_schema_that_is_not_a_json_schema_is_unsupported(text: str) -> None:
    found = parse_writer_schema(9, text, reads=READS)
    assert isinstance(found, Undecoded) and found.reason == UNSUPPORTED_SCHEMA
    assert "writer schema 9" in found.detail


def test_a_reference_to_another_schema_is_unsupported_not_invalid() -> None:
    validator = parse_writer_schema(5, '{"$ref": "https://example.com/other.json"}', reads=READS)
    [found] = to_json([framed("{}", sid=5)], {5: validator})
    assert isinstance(found, Undecoded) and found.reason == UNSUPPORTED_SCHEMA


def test_a_set_is_released_whatever_its_size_even_under_a_tuple_schema() -> None:
    pair = {"type": "array", "prefixItems": [{"type": "string"}], "items": False}
    draft7 = {"type": "array", "items": [{"type": "string"}], "additionalItems": False}
    for tuple_schema, dialect in ((pair, DRAFT_2020), (draft7, DRAFT_7)):
        top = {"$schema": dialect, "properties": {"s": tuple_schema}}
        validator = parse_writer_schema(6, json.dumps(top), reads=("s",))
        assert isinstance(validator, ShapeValidator), validator
        texts = ['{"s": []}', '{"s": ["a"]}', '{"s": ["a", "b", "c"]}']
        assert to_json([framed(t, sid=6) for t in texts], {6: validator}) == [
            t.encode() for t in texts
        ]
    assert shape_only(pair) == {"type": "array"}


def test_shape_only_keeps_properties_named_like_keywords_and_reads_integer_as_number() -> None:
    shape = shape_only(SCHEMA)
    assert set(shape["properties"]) == {"seq", "salary", "state", "tags", "pattern"}
    assert shape["properties"]["seq"] == {"type": "number"}
    assert shape["properties"]["pattern"] == {"type": "string"}
    assert shape["properties"]["tags"] == {"type": "array", "items": {"type": "string"}}
    assert shape_only({"type": ["integer", "number", "null"]}) == {"type": ["number", "null"]}
    assert shape_only({"anyOf": [{"enum": [1]}, True]}) == {"anyOf": [{}, True]}


def test_a_shape_keeps_keys_lengths_and_types_and_its_canonical_record_no_value() -> None:
    one = {"a": 1.5, "b": ["x", None, {"c": True}], "d": "secret"}
    other = {"a": -7, "b": ["yy", None, {"c": False}], "d": ""}
    assert shape(one) == shape(other)
    assert canonical(shape(one)) == {"a": 0, "b": [None, "", {"c": False}], "d": ""}
    assert shape({"a": 1}) != shape({"a": "1"}) != shape({"b": 1}) != shape({"a": [1]})
    # an array's items are a set's values: neither their number nor their order is shape
    assert shape({"a": [1]}) == shape({"a": [1, 2, 3]}) != shape({"a": []})
    assert shape(["x", 1]) == shape([2, "y", "z"])


def test_records_of_one_shape_are_validated_once() -> None:
    """The cache that makes a verdict cost a dict lookup: one validation per shape, dropped
    whole once ``SHAPES_CACHED`` shapes are held."""
    validator = parse_writer_schema(4, json.dumps(SCHEMA), reads=READS)
    assert isinstance(validator, ShapeValidator)
    seen: list[Any] = []
    inner = validator._validator

    class Counting:
        def iter_errors(self, document: Any) -> Any:
            seen.append(document)
            return inner.iter_errors(document)

    validator._validator = Counting()
    texts = [f'{{"seq": {n}, "state": "S{n}", "pattern": "x"}}' for n in range(50)]
    texts += ['{"seq": "one", "state": "TX", "pattern": "x"}'] * 2
    found = to_json([framed(t) for t in texts], {4: validator})
    assert found[:50] == [t.encode() for t in texts[:50]]
    assert [f.reason for f in found[50:]] == [INVALID] * 2  # type: ignore[union-attr]
    assert seen == [{"seq": 0, "state": "", "pattern": ""}, {"seq": "", "state": "", "pattern": ""}]
    for n in range(SHAPES_CACHED + 1):  # shapes under a read path (tags: read whole)
        validator.problem({"tags": [{f"k{n}": 1}]})
    assert 0 < len(validator._verdicts) <= SHAPES_CACHED
