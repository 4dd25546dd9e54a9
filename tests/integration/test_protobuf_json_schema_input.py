"""Protobuf and JSON Schema input under a real schema registry, against a real worker and
broker (issue 33).

v1 of each subject is produced with confluent-kafka's ``ProtobufSerializer`` /
``JSONSerializer`` and the suite's registry (Apicurio keeps the Protobuf schema as the
base64 descriptor that serializer registers); v2 is registered over REST as a Java
client would (Protobuf as ``.proto`` text, compiled by the worker with protoc) and
framed by hand. Both sanitize under one config; the output is JSON (``output_format:
json``: Protobuf output is ``test_protobuf_output``'s).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.schema_registry.json_schema import JSONSerializer

from tests.support.avro import MessageField, SchemaRegistryClient, SerializationContext
from tests.support.broker import create_topics
from tests.support.faults import free_port
from tests.support.protobuf import (
    V1_FIELDS,
    V2_FIELDS,
    frame,
    message_class,
    proto_text,
    protobuf_writer,
    reading_file,
    register,
)
from tests.support.registry import Registry, released_through_an_outage
from tests.support.worker_proc import (
    PRIVACY,
    Collector,
    WorkerProcess,
    decode,
    produce,
    read_all,
    started,
    unique_topics,
    wait_while_alive,
    write_config,
)

OUTPUT_FIELDS = frozenset({"seq", "salary", "state", "opted_in"})
#: an id no test registers
UNKNOWN_ID = 2**31 - 7
JSON_V1: dict[str, Any] = {
    "type": "object",
    "properties": {
        "device_id": {"type": "string"},
        "seq": {"type": "integer"},
        # a value constraint: never checked, so it cannot decide a release
        "salary": {"type": "number", "maximum": 4500},
        "state": {"type": "string", "enum": ["TX", "CA", "NY"]},
        "opted_in": {"type": "boolean"},
    },
    "required": ["device_id", "seq", "salary", "state", "opted_in"],
}
JSON_V2: dict[str, Any] = {
    **JSON_V1,
    "properties": {**JSON_V1["properties"], "firmware": {"type": "string"}},
}
Record = dict[str, Any]


def reading(seq: int, **extra: Any) -> dict[str, Any]:
    return {
        "device_id": f"dev-{seq}",
        "seq": seq,
        "salary": 1504.0 + seq,
        "state": ["TX", "CA", "NY"][seq % 3],
        "opted_in": seq % 2 == 0,
        **extra,
    }


def framed_config(
    tmp_path: Path, bootstrap: str, kafka: dict[str, str], fmt: str, url: str, **body: Any
) -> Path:
    # JSON out: the output of Protobuf input is test_protobuf_output's
    settings = {**kafka, "format": fmt, "output_format": "json", "schema_registry": {"url": url}}
    return write_config(tmp_path / "config.yaml", bootstrap, settings, {**PRIVACY, **body})


def protobuf_values(
    url: str, topic: str, first: list[Record], second: list[Record]
) -> tuple[list[bytes], list[bytes]]:
    """``first`` with v1 through confluent-kafka's serializer, ``second`` with v2, registered
    as .proto text and framed by hand with the message index of ``Reading`` ([1])."""
    with SchemaRegistryClient({"url": url}) as client:
        v1 = protobuf_writer(client, topic, message_class(reading_file(V1_FIELDS)))
        v1_values = [v1(record) for record in first]
    v2_id = register(url, f"{topic}-value", "PROTOBUF", proto_text(V2_FIELDS))
    v2 = message_class(reading_file(V2_FIELDS))
    return v1_values, [frame(v2_id, [1], v2(**r).SerializeToString()) for r in second]


def json_schema_values(
    url: str, topic: str, first: list[Record], second: list[Record]
) -> tuple[list[bytes], list[bytes]]:
    """``first`` with v1, ``second`` with v2, both through confluent-kafka's serializer."""
    context = SerializationContext(topic, MessageField.VALUE)
    with SchemaRegistryClient({"url": url}) as client:
        v1, v2 = (JSONSerializer(json.dumps(s), client) for s in (JSON_V1, JSON_V2))
        return [v1(r, context) for r in first], [v2(r, context) for r in second]


def header(value: bytes) -> bytes:
    return value[:5]


def json_frame(sid: int, text: bytes) -> bytes:
    return b"\x00" + sid.to_bytes(4, "big") + text


async def run_until(
    tmp_path: Path, bootstrap: str, kafka: dict[str, str], config: Path, good: int, dead: int
) -> tuple[list[dict[str, Any]], list[tuple[bytes | None, bytes]]]:
    """Run a worker until ``good`` outputs and ``dead`` dead letters arrived; the outputs'
    bodies and the dead letters' (bytes, reason)."""
    worker = WorkerProcess(config, tmp_path / "worker.log")
    async with (
        Collector(bootstrap, kafka["output_topic"]) as out,
        Collector(bootstrap, kafka["dead_letter_topic"]) as dlq,
        started(worker),
    ):
        await wait_while_alive(out, good, worker, within_s=120)
        await wait_while_alive(dlq, dead, worker, within_s=60)
        assert await worker.terminate() == 0, worker.log_text()[-3000:]
    letters = [(r.value, dict(r.headers)["privstream-reason"]) for r in dlq.records]
    return decode(out.records), letters


async def topics(bootstrap: str, prefix: str) -> dict[str, str]:
    kafka = unique_topics(prefix)
    await create_topics(bootstrap, [kafka["input_topic"]], partitions=1)
    await create_topics(bootstrap, [kafka["output_topic"], kafka["dead_letter_topic"]], 1)
    return kafka


async def test_protobuf_v1_and_v2_sanitize_under_one_config_and_unreadable_ones_are_dead_letters(
    kafka_bootstrap: str, schema_registry: str, tmp_path: Path
) -> None:
    """v1 (a base64 descriptor) and v2 (.proto text) records all come out, each once, with
    the config's fields only. Dead letters, bytes as received: no magic byte, an unknown id,
    a payload that does not decode, an id that holds an Avro schema, and a schema lacking a
    configured field (its records lack it: ``missing_field``)."""
    kafka = await topics(kafka_bootstrap, "protobuf")
    raw = kafka["input_topic"]
    v1 = [reading(s) for s in range(40)]
    first, second = protobuf_values(
        schema_registry, raw, v1, [reading(s, firmware="9") for s in range(40, 80)]
    )
    good = first + second
    assert header(good[0]) != header(good[-1]), "v2 must have its own schema id"
    avro_id = register(schema_registry, f"{raw}-avro", "AVRO", '{"type": "string"}')
    no_salary = [f for f in V1_FIELDS if f[0] != "salary"]
    lacking_id = register(schema_registry, f"{raw}-lacking", "PROTOBUF", proto_text(no_salary))
    lacking = message_class(reading_file(no_salary, name="lacking.proto"))
    without_salary = {k: v for k, v in reading(1).items() if k != "salary"}
    poison = [
        b'{"seq": 1}',
        frame(UNKNOWN_ID, [1], b""),
        frame(int.from_bytes(good[0][1:5], "big"), [1], b"\x0a\x05ab"),  # a string cut short
        frame(avro_id, [0], b"\x02a"),
        frame(lacking_id, [1], lacking(**without_salary).SerializeToString()),
    ]
    await produce(kafka_bootstrap, raw, [(b"k", v, []) for v in [*good[:40], *poison, *good[40:]]])

    config = framed_config(tmp_path, kafka_bootstrap, kafka, "protobuf", schema_registry)
    bodies, letters = await run_until(tmp_path, kafka_bootstrap, kafka, config, 80, 5)

    assert sorted(b["seq"] for b in bodies) == list(range(80))  # each good record once
    assert {frozenset(b) for b in bodies} == {OUTPUT_FIELDS}
    assert [value for value, _ in letters] == poison
    assert [reason for _, reason in letters] == [
        b"protobuf_no_magic_byte",
        b"protobuf_unknown_schema_id",
        b"protobuf_undecodable",
        b"protobuf_unsupported_schema",
        b"missing_field",
    ]


async def test_json_schema_v1_and_v2_sanitize_under_one_config_and_unreadable_ones_are_dead_letters(
    kafka_bootstrap: str, schema_registry: str, tmp_path: Path
) -> None:
    """v1 and v2 records (JSONSerializer) all come out, each once; a salary above the
    schema's ``maximum`` comes out too (values never decide). Dead letters: no magic byte,
    an unknown id, text that is not JSON, a record of another shape, a record lacking a
    configured field its schema does not require."""
    kafka = await topics(kafka_bootstrap, "json-schema")
    raw = kafka["input_topic"]
    v1 = [reading(s) for s in range(40)]
    first, second = json_schema_values(
        schema_registry, raw, v1, [reading(s, firmware="9") for s in range(40, 79)]
    )
    good = first + second
    v1_header, v2_header = header(good[0]), header(good[-1])
    assert v1_header != v2_header, "v2 must have its own schema id"
    good.append(v2_header + json.dumps({**reading(79), "salary": 99_999.0}).encode())
    not_required = {**JSON_V1, "required": ["seq"]}
    lacking_id = register(schema_registry, f"{raw}-lacking", "JSON", json.dumps(not_required))
    poison = [
        b'{"seq": 1}',
        json_frame(UNKNOWN_ID, b"{}"),
        v1_header + b'{"seq": 1',
        v1_header + json.dumps({**reading(1), "seq": "one"}).encode(),
        json_frame(lacking_id, b'{"seq": 1, "state": "TX", "opted_in": true}'),
    ]
    await produce(kafka_bootstrap, raw, [(b"k", v, []) for v in [*good[:40], *poison, *good[40:]]])

    config = framed_config(tmp_path, kafka_bootstrap, kafka, "json_schema", schema_registry)
    bodies, letters = await run_until(tmp_path, kafka_bootstrap, kafka, config, 80, 5)

    assert sorted(b["seq"] for b in bodies) == list(range(80))
    assert {frozenset(b) for b in bodies} == {OUTPUT_FIELDS}
    assert [value for value, _ in letters] == poison
    assert [reason for _, reason in letters] == [
        b"json_schema_no_magic_byte",
        b"json_schema_unknown_schema_id",
        b"json_schema_undecodable",
        b"json_schema_invalid",
        b"missing_field",
    ]


@pytest.mark.parametrize("fmt", ["protobuf", "json_schema"])
async def test_a_registry_outage_mid_stream_loses_nothing_and_dead_letters_nothing(
    fmt: str, kafka_bootstrap: str, schema_registry_server: Registry, tmp_path: Path
) -> None:
    """v1 records go through; the registry stops; v2 records (an id the worker has not
    fetched) arrive. The worker stays up, answers /readyz 503 and releases none of them;
    once the registry is back it releases every one, once, and dead-letters none."""
    url = schema_registry_server.url
    kafka = await topics(kafka_bootstrap, f"{fmt.replace('_', '-')}-outage")
    raw = kafka["input_topic"]
    values = protobuf_values if fmt == "protobuf" else json_schema_values
    first, second = values(
        url, raw, [reading(s) for s in range(30)], [reading(s, firmware="2") for s in range(30, 60)]
    )
    port = free_port()
    http = {"host": "127.0.0.1", "port": port}
    config = framed_config(tmp_path, kafka_bootstrap, kafka, fmt, url, http=http)
    worker = WorkerProcess(config, tmp_path / "worker.log")
    released = await released_through_an_outage(
        kafka_bootstrap,
        schema_registry_server,
        (raw, kafka["output_topic"]),
        worker,
        port,
        (first, second),
    )

    assert sorted(b["seq"] for b in decode(released)) == list(range(60))
    assert await read_all(kafka_bootstrap, kafka["dead_letter_topic"], partitions=1) == []
    assert "schema registry request" in worker.log_text()
