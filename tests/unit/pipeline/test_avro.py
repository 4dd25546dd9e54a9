"""Confluent-framed Avro to the JSON the plan reads (privstream.pipeline.avro)."""

from __future__ import annotations

import io
import json
from typing import Any

import orjson
from fastavro import schemaless_writer
from privstream.pipeline.avro import (
    NO_MAGIC_BYTE,
    UNDECODABLE,
    UNSUPPORTED_SCHEMA,
    Undecoded,
    parse_writer_schema,
    schema_id,
    to_json,
)

SCHEMA: dict[str, Any] = {
    "type": "record",
    "name": "R",
    "fields": [
        {"name": "seq", "type": "long"},
        {"name": "state", "type": ["null", "string"], "default": None},
        {"name": "blob", "type": ["null", "bytes"], "default": None},
    ],
}
PARSED = parse_writer_schema(7, json.dumps(SCHEMA))


def framed(record: dict[str, Any], sid: int = 7) -> bytes:
    out = io.BytesIO()
    schemaless_writer(out, PARSED, record)
    return b"\x00" + sid.to_bytes(4, "big") + out.getvalue()


def test_the_schema_id_is_read_from_the_wire_format_header() -> None:
    assert schema_id(framed({"seq": 1}, sid=2**31 + 5)) == 2**31 + 5
    assert schema_id(b"\x00\x00\x00\x01") is None  # shorter than the header
    assert schema_id(b'{"seq": 1}') is None
    assert schema_id(None) is None


def test_records_become_json_with_avro_null_as_json_null() -> None:
    values = [framed({"seq": 3, "state": "TX"}), framed({"seq": 2**40})]
    assert [orjson.loads(v) for v in to_json(values, {7: PARSED})] == [  # type: ignore[arg-type]
        {"seq": 3, "state": "TX", "blob": None},
        {"seq": 2**40, "state": None, "blob": None},
    ]


def test_avro_bytes_become_base64_strings() -> None:
    (out,) = to_json([framed({"seq": 1, "blob": b"\x00\xff"})], {7: PARSED})
    assert orjson.loads(out) == {"seq": 1, "state": None, "blob": "AP8="}  # type: ignore[arg-type]


def test_values_that_cannot_be_read_say_why_without_quoting_them() -> None:
    good = framed({"seq": 1, "state": "SECRET-STATE"})
    unknown = Undecoded("avro_unknown_schema_id", "schema id 9 is not in the registry")
    out = to_json(
        [
            b'{"state": "SECRET-STATE"}',  # JSON, not Avro
            None,  # a tombstone
            good[:-4],  # cut short
            good + b"\x00",  # trailing bytes
            b"\x00\x00\x00\x00\x09" + good[5:],  # an id the registry does not know
        ],
        {7: PARSED, 9: unknown},
    )
    assert [o.reason for o in out if isinstance(o, Undecoded)] == [
        NO_MAGIC_BYTE,
        NO_MAGIC_BYTE,
        UNDECODABLE,
        UNDECODABLE,
        "avro_unknown_schema_id",
    ]
    assert all("SECRET" not in o.detail for o in out if isinstance(o, Undecoded))


def test_a_schema_fastavro_refuses_is_unsupported_not_a_crash() -> None:
    refused = parse_writer_schema(
        4,
        json.dumps(
            {
                "type": "record",
                "name": "R",
                "fields": [
                    {"name": "x", "type": "com.example.Elsewhere"}  # not in it, no references
                ],
            }
        ),
    )
    assert isinstance(refused, Undecoded)
    assert refused.reason == UNSUPPORTED_SCHEMA
    assert "4" in refused.detail
