"""Infinite and NaN doubles in Avro and Protobuf input: one rule for both formats.

An infinity is the JSON number ``1e999`` of its sign, which the kinds clamp to
the bound of that sign as for JSON input: a record is released at infinity as
at ``1e308``. NaN, which has no sign, is null: an absent value, which the
field's ``on_missing`` decides (docs/protection.md, "Whether a record is
released"). Deterministic.
"""

from __future__ import annotations

import io
import json
from typing import Any

import orjson
import pytest
from fastavro import schemaless_writer
from privstream.pipeline import avro, process_batch, protobuf

from tests.support.protobuf import V1_FIELDS, frame, message_class, proto_text, reading_file
from tests.unit.pipeline.test_fast_path import noise, plan_of

HEADER = b"\x00\x00\x00\x00\x07"
AVRO_SCHEMA = {
    "type": "record",
    "name": "R",
    "fields": [
        {"name": "salary", "type": "double"},
        {"name": "rates", "type": {"type": "array", "items": "float"}},
        {"name": "by", "type": {"type": "map", "values": ["null", "double"]}},
    ],
}
AVRO_PARSED = avro.parse_writer_schema(7, json.dumps(AVRO_SCHEMA))
PROTO_SCHEMA = protobuf.parse_writer_schema(7, proto_text(V1_FIELDS))
READING = message_class(reading_file(V1_FIELDS))
SALARIES = [1e308, float("inf"), float("-inf"), float("nan"), 5.0]


def avro_texts(salaries: list[float]) -> list[bytes]:
    values = []
    for x in salaries:
        out = io.BytesIO()
        rate = 1.0 if x == 1e308 else x  # beyond a 32-bit float's range
        schemaless_writer(out, AVRO_PARSED, {"salary": x, "rates": [rate], "by": {"k": x}})
        values.append(HEADER + out.getvalue())
    return [t for t in avro.to_json(values, {7: AVRO_PARSED}) if isinstance(t, bytes)]


def protobuf_texts(salaries: list[float]) -> list[bytes]:
    values = [frame(7, [1], READING(salary=x).SerializeToString()) for x in salaries]
    return [t for t in protobuf.to_json(values, {7: PROTO_SCHEMA}) if isinstance(t, bytes)]


FORMATS = {"avro": avro_texts, "protobuf": protobuf_texts}


@pytest.mark.parametrize("fmt", FORMATS)
def test_an_infinity_is_1e999_of_its_sign_and_nan_null_in_every_position(fmt: str) -> None:
    texts = FORMATS[fmt](SALARIES)
    assert len(texts) == len(SALARIES)
    salaries = [orjson.loads(t)["salary"] if b"1e999" not in t else None for t in texts]
    assert salaries == [1e308, None, None, None, 5.0]
    assert b'"salary":1e999' in texts[1] and b'"salary":-1e999' in texts[2]
    assert b'"salary":null' in texts[3]
    if fmt == "avro":  # nested: an array's float, a map's nullable double
        assert b'"rates":[1e999],"by":{"k":1e999}' in texts[1]
        assert b'"rates":[-1e999],"by":{"k":-1e999}' in texts[2]
        assert b'"rates":[null],"by":{"k":null}' in texts[3]


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize(("on_missing", "released"), [("dead_letter", 4), ("null", 5)])
def test_only_on_missing_decides_a_nan_and_no_number_decides_anything(
    fmt: str, on_missing: str, released: int
) -> None:
    """Every number, infinities included, is released (clamped); NaN as an absent value."""
    field: dict[str, Any] = {"name": "salary", "kind": "real", "bounds": [0, 100]}
    field |= {"epsilon": 1.0, "on_missing": on_missing}
    texts = FORMATS[fmt](SALARIES)
    result = process_batch(plan_of([field]), texts, noise(texts))
    assert len(result.outputs) == released
    assert [d.index for d in result.dead_letters] == ([3] if released == 4 else [])
