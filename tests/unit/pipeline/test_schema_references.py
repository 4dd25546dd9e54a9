"""Writer schemas with references, parsed by each format with the referenced texts given
(dependencies first, as ``privstream.worker.schemas`` fetches them); the registry side
runs against a real registry in tests/integration/test_schema_references.py."""

from __future__ import annotations

import base64
import io
import json
from typing import Any

import orjson
from fastavro import parse_schema, schemaless_writer
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from privstream.pipeline import avro, json_schema, protobuf
from privstream.pipeline.avro import Undecoded
from privstream.pipeline.json_schema import ShapeValidator
from privstream.pipeline.protobuf_schema import ProtoSchema

GEO = {
    "type": "record",
    "name": "Geo",
    "namespace": "acme",
    "fields": [{"name": "lat", "type": "double"}],
}
ADDRESS = {
    "type": "record",
    "name": "Address",
    "namespace": "acme",
    "fields": [{"name": "city", "type": "string"}, {"name": "geo", "type": "acme.Geo"}],
}
ORDER = {
    "type": "record",
    "name": "Order",
    "namespace": "acme",
    "fields": [{"name": "id", "type": "long"}, {"name": "ship_to", "type": "acme.Address"}],
}
AVRO_REFERENCES = [("acme.Geo", json.dumps(GEO)), ("acme.Address", json.dumps(ADDRESS))]


def test_avro_named_types_from_references_decode_nested_two_deep() -> None:
    schema = avro.parse_writer_schema(3, json.dumps(ORDER), AVRO_REFERENCES)
    assert not isinstance(schema, Undecoded), schema
    named: dict[str, Any] = {}
    for _, text in AVRO_REFERENCES:
        parse_schema(json.loads(text), named_schemas=named)
    body = io.BytesIO()
    record = {"id": 7, "ship_to": {"city": "Oslo", "geo": {"lat": 59.9}}}
    schemaless_writer(body, parse_schema(ORDER, named_schemas=named), record)
    [text] = avro.to_json([b"\x00\x00\x00\x00\x03" + body.getvalue()], {3: schema})
    assert text == orjson.dumps(record)


def test_avro_without_a_needed_reference_is_unsupported() -> None:
    found = avro.parse_writer_schema(3, json.dumps(ORDER), AVRO_REFERENCES[1:])  # no Geo
    assert isinstance(found, Undecoded) and found.reason == avro.UNSUPPORTED_SCHEMA
    assert "nor in its references" in found.detail


DRAFT_7 = "http://json-schema.org/draft-07/schema#"
JSON_ADDRESS = {
    "$schema": DRAFT_7,
    "type": "object",
    "properties": {"city": {"type": "string", "maxLength": 2}, "zip": {"$ref": "zip.json"}},
    "required": ["city"],
}
JSON_ORDER = {
    "$schema": DRAFT_7,
    "type": "object",
    "properties": {"id": {"type": "integer"}, "ship_to": {"$ref": "address.json"}},
}
JSON_REFERENCES = [
    ("zip.json", json.dumps({"type": "string"})),  # no $schema: the writer's dialect
    ("address.json", json.dumps(JSON_ADDRESS)),
]


def _framed(text: str) -> bytes:
    return b"\x00\x00\x00\x00\x05" + text.encode()


def test_json_schema_refs_to_other_subjects_validate_the_shape_there() -> None:
    reads = ("id", ("ship_to", "city"), ("ship_to", "zip"))
    validator = json_schema.parse_writer_schema(
        5, json.dumps(JSON_ORDER), JSON_REFERENCES, reads=reads
    )
    assert isinstance(validator, ShapeValidator), validator
    good = '{"id": 1, "ship_to": {"city": "Bergen", "zip": "5003"}}'  # maxLength is a value rule
    no_city = '{"id": 1, "ship_to": {"zip": "5003"}}'
    numeric_zip = '{"id": 1, "ship_to": {"city": "Bergen", "zip": 5003}}'
    found = json_schema.to_json([_framed(t) for t in (good, no_city, numeric_zip)], {5: validator})
    assert found[0] == good.encode()
    assert [getattr(f, "reason", None) for f in found[1:]] == [json_schema.INVALID] * 2


def test_json_schema_ref_to_a_subject_not_among_the_references_is_unsupported() -> None:
    validator = json_schema.parse_writer_schema(
        5, json.dumps(JSON_ORDER), JSON_REFERENCES[:1], reads=(("ship_to", "city"),)
    )
    [found] = json_schema.to_json([_framed('{"ship_to": {"city": "x"}}')], {5: validator})
    assert isinstance(found, Undecoded) and found.reason == json_schema.UNSUPPORTED_SCHEMA
    assert "nor in the references" in found.detail


ADDRESS_PROTO = 'syntax = "proto3";\npackage acme;\nmessage Address { string city = 1; }\n'
ORDER_PROTO = (
    'syntax = "proto3";\npackage acme;\nimport "acme/address.proto";\n'
    "message Order { int64 id = 1; acme.Address ship_to = 2; }\n"
)


def _order_bytes() -> bytes:
    """An Order as generated code would write it (classes from protoc's descriptors)."""
    found = protobuf.parse_writer_schema(8, ORDER_PROTO, [("acme/address.proto", ADDRESS_PROTO)])
    assert isinstance(found, ProtoSchema), found
    cls = found.message_class((0,))
    message = cls(id=4)
    message.ship_to.city = "Tromsø"
    return bytes(message.SerializeToString())


def test_protobuf_source_importing_a_reference_compiles_and_decodes() -> None:
    schema = protobuf.parse_writer_schema(8, ORDER_PROTO, [("acme/address.proto", ADDRESS_PROTO)])
    [text] = protobuf.to_json([b"\x00\x00\x00\x00\x08\x00" + _order_bytes()], {8: schema})
    assert orjson.loads(text) == {"id": 4, "ship_to": {"city": "Tromsø"}}  # type: ignore[arg-type]


def test_protobuf_descriptors_importing_a_reference_decode_alike() -> None:
    pool = descriptor_pool.DescriptorPool()
    address = descriptor_pb2.FileDescriptorProto(
        name="acme/address.proto", package="acme", syntax="proto3"
    )
    address.message_type.add(name="Address").field.add(name="city", number=1, type=9, label=1)
    order = descriptor_pb2.FileDescriptorProto(
        name="order.proto", package="acme", syntax="proto3", dependency=["acme/address.proto"]
    )
    message = order.message_type.add(name="Order")
    message.field.add(name="id", number=1, type=3, label=1)
    message.field.add(name="ship_to", number=2, type=11, type_name=".acme.Address", label=1)
    pool.Add(address)
    message_factory.GetMessageClass(pool.Add(order).message_types_by_name["Order"])
    as_text = [(f.name, base64.b64encode(f.SerializeToString()).decode()) for f in (address, order)]
    schema = protobuf.parse_writer_schema(9, as_text[1][1], as_text[:1])
    [text] = protobuf.to_json([b"\x00\x00\x00\x00\x09\x00" + _order_bytes()], {9: schema})
    assert orjson.loads(text) == {"id": 4, "ship_to": {"city": "Tromsø"}}  # type: ignore[arg-type]


def test_protobuf_reference_names_never_leave_the_work_directory() -> None:
    for name in ("../acme/address.proto", "/etc/address.proto", ""):
        found = protobuf.parse_writer_schema(8, ORDER_PROTO, [(name, ADDRESS_PROTO)])
        assert isinstance(found, Undecoded) and found.reason == protobuf.UNSUPPORTED_SCHEMA
        assert "not a relative path" in found.detail


def test_protobuf_without_the_imported_reference_is_unsupported() -> None:
    found = protobuf.parse_writer_schema(8, ORDER_PROTO, [])
    assert isinstance(found, Undecoded) and found.reason == protobuf.UNSUPPORTED_SCHEMA
    assert "with its references" in found.detail
