"""Writer schemas registered with references, under the real registry, through a real worker
and broker (issue 33): each format's ``Reading`` takes its ``Device`` from another subject.

* Avro: ``Device`` registered as a subject of its own, ``Reading`` written by
  confluent-kafka's ``AvroSerializer`` with a ``SchemaReference`` to it (the serializer
  registers ``Reading`` with the reference, as a user's producer would);
* Protobuf: a ``reading.proto`` that imports ``device.proto``, written by confluent-kafka's
  ``ProtobufSerializer``, which registers the imported file under a subject of its own and
  ``Reading`` with a reference to it (base64 descriptors, as Apicurio keeps them);
* JSON Schema: ``device.json`` and a ``Reading`` whose ``device`` is a ``$ref`` to it,
  registered over REST with the reference (Apicurio 3.3.3 holds references for all three
  formats), framed by hand.

The config reads ``device.os``, a field only the referenced schema describes. A missing
reference cannot be made here: the registry refuses a schema whose reference it lacks and
a referenced version's deletion (tests/unit/worker/test_schema_references.py has it).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.schema_registry import Schema, SchemaReference
from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

from tests.support.avro import (
    AvroSerializer,
    MessageField,
    SchemaRegistryClient,
    SerializationContext,
)
from tests.support.broker import create_topics
from tests.support.protobuf import register
from tests.support.worker_proc import (
    PRIVACY,
    Collector,
    WorkerProcess,
    decode,
    produce,
    started,
    unique_topics,
    wait_while_alive,
    write_config,
)

COUNT = 30
FIELDS = [
    {"name": "seq", "kind": "public"},
    {"name": "device.os", "kind": "categorical", "domain": ["ios", "android"], "epsilon": 0.5},
    {"name": "salary", "kind": "real", "bounds": [1000, 5000], "epsilon": 0.5},
]
Record = dict[str, Any]


def reading(seq: int) -> Record:
    return {"seq": seq, "device": {"os": ["ios", "android"][seq % 2]}, "salary": 1500.0 + seq}


def avro_values(url: str, topic: str, records: list[Record]) -> list[bytes]:
    device = {"type": "record", "name": "Device", "namespace": "ref.test", "fields": [
        {"name": "os", "type": "string"}
    ]}  # fmt: skip
    subject = f"{topic}.Device"
    fields = [
        {"name": "seq", "type": "long"},
        {"name": "device", "type": "ref.test.Device"},
        {"name": "salary", "type": "double"},
    ]
    main = {"type": "record", "name": "Reading", "namespace": "ref.test", "fields": fields}
    with SchemaRegistryClient({"url": url}) as client:
        client.register_schema(subject, Schema(json.dumps(device), "AVRO"))
        version = client.get_latest_version(subject).version
        reference = SchemaReference("ref.test.Device", subject, version)
        serializer = AvroSerializer(client, Schema(json.dumps(main), "AVRO", [reference]))
        context = SerializationContext(topic, MessageField.VALUE)
        return [serializer(r, context) for r in records]


def protobuf_values(url: str, topic: str, records: list[Record]) -> list[bytes]:
    kinds = descriptor_pb2.FieldDescriptorProto
    package = topic.replace("-", "_").replace(".", "_")
    device = descriptor_pb2.FileDescriptorProto(
        name=f"{package}/device.proto", package=package, syntax="proto3"
    )
    os_field = device.message_type.add(name="Device").field.add(name="os", number=1)
    os_field.type, os_field.label = kinds.TYPE_STRING, kinds.LABEL_OPTIONAL
    main = descriptor_pb2.FileDescriptorProto(
        name=f"{package}/reading.proto", package=package, syntax="proto3"
    )
    main.dependency.append(device.name)
    message = main.message_type.add(name="Reading")
    for number, (name, kind, type_name) in enumerate(
        [
            ("seq", kinds.TYPE_INT64, ""),
            ("device", kinds.TYPE_MESSAGE, f".{package}.Device"),
            ("salary", kinds.TYPE_DOUBLE, ""),
        ],
        1,
    ):
        entry = message.field.add(name=name, number=number, type=kind)
        entry.label = kinds.LABEL_OPTIONAL
        if type_name:  # set even empty, it would make a scalar a message reference
            entry.type_name = type_name
    pool = descriptor_pool.DescriptorPool()
    pool.Add(device)
    pool.Add(main)
    cls = message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{package}.Reading"))
    context = SerializationContext(topic, MessageField.VALUE)
    with SchemaRegistryClient({"url": url}) as client:
        serializer = ProtobufSerializer(cls, client, {"use.deprecated.format": False})
        return [serializer(cls(**r), context) for r in records]


def json_schema_values(url: str, topic: str, records: list[Record]) -> list[bytes]:
    device = {"type": "object", "properties": {"os": {"type": "string"}}, "required": ["os"]}
    subject = f"{topic}.device.json"
    register(url, subject, "JSON", json.dumps(device))
    main = {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "type": "object",
        "properties": {
            "seq": {"type": "integer"},
            "device": {"$ref": "device.json"},
            "salary": {"type": "number"},
        },
        "required": ["seq", "device", "salary"],
    }
    reference = {"name": "device.json", "subject": subject, "version": 1}
    sid = register(url, f"{topic}-value", "JSON", json.dumps(main), [reference])
    header = b"\x00" + sid.to_bytes(4, "big")
    return [header + json.dumps(r).encode() for r in records]


VALUES = {"avro": avro_values, "protobuf": protobuf_values, "json_schema": json_schema_values}


@pytest.mark.parametrize("fmt", ["avro", "protobuf", "json_schema"])
async def test_a_field_of_a_referenced_schema_is_read_and_released(
    fmt: str, kafka_bootstrap: str, schema_registry: str, tmp_path: Path
) -> None:
    """Every record comes out once with ``device.os`` read through the reference; for JSON
    Schema, a record whose ``device.os`` is a number fails the referenced schema
    (``json_schema_invalid``): the reference is validated, not skipped."""
    kafka = unique_topics(f"refs-{fmt.replace('_', '-')}")
    raw = kafka["input_topic"]
    await create_topics(kafka_bootstrap, [raw], partitions=1)
    await create_topics(kafka_bootstrap, [kafka["output_topic"], kafka["dead_letter_topic"]], 1)
    values = VALUES[fmt](schema_registry, raw, [reading(s) for s in range(COUNT)])
    poison = []
    if fmt == "json_schema":
        poison = [values[0][:5] + json.dumps({**reading(0), "device": {"os": 7}}).encode()]
    await produce(kafka_bootstrap, raw, [(b"k", v, []) for v in [*values, *poison]])

    settings = {**kafka, "format": fmt, "schema_registry": {"url": schema_registry}}
    config = write_config(
        tmp_path / "config.yaml",
        kafka_bootstrap,
        {**settings, "output_format": "json"},
        {**PRIVACY, "fields": FIELDS},
    )
    worker = WorkerProcess(config, tmp_path / "worker.log")
    async with (
        Collector(kafka_bootstrap, kafka["output_topic"]) as out,
        Collector(kafka_bootstrap, kafka["dead_letter_topic"]) as dead,
        started(worker),
    ):
        await wait_while_alive(out, COUNT, worker, within_s=120)
        await wait_while_alive(dead, len(poison), worker, within_s=60)
        assert await worker.terminate() == 0, worker.log_text()[-3000:]

    bodies = decode(out.records)
    assert sorted(b["seq"] for b in bodies) == list(range(COUNT))
    assert {b["device"]["os"] for b in bodies} == {"ios", "android"}
    assert {frozenset(b) for b in bodies} == {frozenset({"seq", "device", "salary"})}
    reasons = [dict(r.headers)["privstream-reason"] for r in dead.records]
    assert reasons == [b"json_schema_invalid"] * len(poison)
