"""Confluent-framed Protobuf to the JSON the plan reads (privstream.pipeline.protobuf);
the writer schema compiled from .proto text by protoc, or read from a base64 descriptor."""

from __future__ import annotations

import base64
from typing import Any

import orjson
import pytest
from privstream.errors import ConfigError
from privstream.pipeline import protobuf_schema
from privstream.pipeline.avro import Undecoded
from privstream.pipeline.protobuf import (
    NO_MAGIC_BYTE,
    UNDECODABLE,
    UNSUPPORTED_SCHEMA,
    message_indexes,
    parse_writer_schema,
    protoc_path,
    to_json,
)
from privstream.pipeline.protobuf_schema import ProtoSchema

from tests.support.protobuf import (
    V1_FIELDS,
    frame,
    message_class,
    proto_text,
    reading_file,
    zigzag_varints,
)

PROTO = """
syntax = "proto3";
package t;
import "google/protobuf/timestamp.proto";
message Other { int32 x = 1; }
message Reading {
  enum State { UNKNOWN = 0; TX = 1; CA = 2; }
  message Inner { string name = 1; }
  string device_id = 1;
  int64 seq = 2;
  double salary = 3;
  State state = 4;
  optional int32 age = 5;
  repeated string tags = 6;
  map<string, int32> counts = 7;
  bytes blob = 8;
  Inner inner = 9;
  google.protobuf.Timestamp at = 10;
}
"""


def parsed(text: str = PROTO, sid: int = 7) -> ProtoSchema:
    schema = parse_writer_schema(sid, text)
    assert isinstance(schema, ProtoSchema), schema
    return schema


SCHEMA = parsed()
READING = SCHEMA.message_class((1,))


def decoded(values: list[bytes | None], schema: ProtoSchema = SCHEMA) -> list[Any]:
    return [
        v if isinstance(v, Undecoded) else orjson.loads(v) for v in to_json(values, {7: schema})
    ]


@pytest.mark.parametrize("indexes", [[0], [1], [1, 0], [2, 70], [0, 0, 300]])
def test_message_indexes_read_what_confluent_kafka_writes(indexes: list[int]) -> None:
    value = b"\x00\x00\x00\x00\x07" + zigzag_varints(indexes) + b"payload"
    found, start = message_indexes(value, 5)
    assert list(found) == indexes
    assert value[start:] == b"payload"


def test_a_reading_has_its_defaults_and_leaves_out_unset_fields_with_presence() -> None:
    message = READING(device_id="d1", seq=2**40, state=2, tags=["a", "b"], blob=b"\xff")
    message.counts["x"] = 3
    [record] = decoded([frame(7, [1], message.SerializeToString())])
    assert record == {
        "device_id": "d1",
        "seq": 2**40,  # an int64 stays a number (proto3's JSON mapping would quote it)
        "salary": 0.0,  # left out on the wire: its default, as every reader sees it
        "state": "CA",
        "tags": ["a", "b"],
        "counts": {"x": 3},
        "blob": base64.b64encode(b"\xff").decode(),
    }  # age (optional), inner and at (messages) are unset: absent, on_missing decides


def test_set_fields_with_presence_and_nested_messages_come_out() -> None:
    message = READING(age=0, state=9)
    message.inner.name = "n"
    message.at.seconds = 5
    [record] = decoded([frame(7, [1], message.SerializeToString())])
    assert (record["age"], record["inner"], record["at"]) == (
        0,
        {"name": "n"},
        {"seconds": 5, "nanos": 0},
    )
    assert record["state"] == 9  # a number the enum does not name stays a number


def test_an_infinite_double_is_the_json_number_beyond_the_double_range_nan_is_null() -> None:
    """As JSON input would carry it: the kinds clamp 1e999 to the bound of its sign, so a
    record is released at infinity as at 1e308 (docs/protection.md)."""
    salaries = [1e308, float("inf"), float("-inf"), float("nan")]
    values = [frame(7, [1], READING(salary=x).SerializeToString()) for x in salaries]
    texts = [t for t in to_json(values, {7: SCHEMA}) if isinstance(t, bytes)]
    assert [orjson.loads(t)["salary"] for t in (texts[0], texts[3])] == [1e308, None]
    assert b'"salary":1e999,' in texts[1] and b'"salary":-1e999,' in texts[2]


def test_a_nested_message_index_selects_the_nested_type() -> None:
    inner = SCHEMA.message_class((1, 0))
    other = SCHEMA.message_class((0,))
    values = [frame(7, [1, 0], inner(name="x").SerializeToString())]
    values.append(frame(7, [0], other(x=4).SerializeToString()))
    assert decoded(values) == [{"name": "x"}, {"x": 4}]


def test_proto_text_and_a_base64_descriptor_of_one_schema_read_alike() -> None:
    as_text = parsed(proto_text(V1_FIELDS))
    as_base64 = parsed(base64.b64encode(reading_file(V1_FIELDS).SerializeToString()).decode())
    cls = message_class(reading_file(V1_FIELDS))
    value = frame(7, [1], cls(device_id="d", seq=3, salary=1.5, opted_in=True).SerializeToString())
    expected = {"device_id": "d", "seq": 3, "salary": 1.5, "state": "", "opted_in": True}
    assert decoded([value], as_text) == decoded([value], as_base64) == [expected]


def test_a_base64_descriptor_importing_well_known_types_reads_them_from_the_package() -> None:
    """confluent-kafka registers no reference for google/protobuf/*.proto imports."""
    text = base64.b64encode(SCHEMA.file.serialized_pb).decode()  # imports timestamp.proto
    as_base64 = parsed(text)
    message = READING(device_id="d")
    message.at.seconds = 9
    value = frame(7, [1], message.SerializeToString())
    assert decoded([value], as_base64) == decoded([value]) != []
    assert decoded([value])[0]["at"] == {"seconds": 9, "nanos": 0}


def test_a_base64_descriptor_importing_another_subject_is_unsupported() -> None:
    proto = reading_file(V1_FIELDS)
    proto.dependency.append("other/reading.proto")
    found = parse_writer_schema(3, base64.b64encode(proto.SerializeToString()).decode())
    assert isinstance(found, Undecoded) and found.reason == UNSUPPORTED_SCHEMA
    assert "imports other/reading.proto" in found.detail


def test_values_that_do_not_decode_are_undecodable_or_without_the_magic_byte() -> None:
    good = READING(device_id="d").SerializeToString()
    values: list[bytes | None] = [
        frame(7, [1], b"\x0a\x05ab"),  # a string field cut short
        frame(7, [5], good),  # no message 5 in the file
        frame(7, [1, 3], good),  # Reading has one nested message
        b"\x00\x00\x00\x00\x07\x02\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff",  # runaway varint
        b"\x00\x00\x00\x00\x07\x7f" + good,  # a negative index count
        frame(7, [1], b"\x0a\x02\xc3\x28"),  # proto3 string that is not UTF-8
    ]
    reasons = [r.reason for r in decoded(values)]
    assert reasons == [UNDECODABLE] * 6
    rejected = decoded([b'{"seq": 1}', None, b"\x00\x00"])
    assert [r.reason for r in rejected] == [NO_MAGIC_BYTE] * 3


def test_an_unknown_id_is_passed_through_as_the_registry_answered() -> None:
    unknown = Undecoded("protobuf_unknown_schema_id", "schema id 9 is not in the registry")
    assert to_json([frame(9, [0], b"")], {9: unknown}) == [unknown]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('syntax = "proto3"; message A { int32 a = 1 }', 'Expected ";"'),
        ('syntax = "proto3"; import "other.proto"; message A {}', "other.proto"),
        ("bm90IGEgZGVzY3JpcHRvcg==", "not a FileDescriptorProto"),
    ],
)
def test_a_schema_that_does_not_compile_is_unsupported(text: str, expected: str) -> None:
    schema = parse_writer_schema(3, text)
    assert isinstance(schema, Undecoded)
    assert schema.reason == UNSUPPORTED_SCHEMA
    assert expected in schema.detail and "writer schema 3" in schema.detail


def test_without_protoc_the_worker_refuses_to_start_naming_the_package(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    monkeypatch.setattr(protobuf_schema.sysconfig, "get_path", lambda _: str(tmp_path))
    monkeypatch.setattr(protobuf_schema.shutil, "which", lambda _: None)
    with pytest.raises(ConfigError, match=r"pip install 'privstream\[protobuf\]'"):
        protoc_path()
