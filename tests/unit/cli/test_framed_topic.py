"""estimate --topic on Protobuf and JSON Schema outputs: each value read with its writer
schema, back to the JSON released, and what is not of the format under a known schema
skipped with its reason (privstream.cli.framed_topic)."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import orjson
from privstream.cli.framed_topic import FramedValues
from privstream.config import parse_config
from privstream.config.registry import SchemaRegistryConfig
from privstream.kinds import build_plan
from privstream.pipeline import json_schema
from privstream.pipeline.avro import Undecoded
from privstream.pipeline.batch import read_names
from privstream.pipeline.json_schema_output import JsonSchemaEncoder, output_json_schema
from privstream.pipeline.protobuf_encode import ProtobufEncoder
from privstream.pipeline.protobuf_output import output_proto
from privstream.pipeline.protobuf_schema import parse_writer_schema
from privstream.pipeline.results import BatchResult

from tests.support.configs import config_dict

FIELDS = [
    {"name": "n", "kind": "integer", "bounds": [0, 9], "epsilon": 1, "on_missing": "null"},
    {"name": "p", "kind": "public"},
    {"name": "h", "kind": "categorical", "epsilon": 1},
]
RELEASED = [
    {"n": 3, "p": "x", "h": {"seed": 2**64 - 1, "bucket": 1}},
    {"n": None, "p": None, "h": {"seed": 0, "bucket": 0}},
]
REGISTRY = SchemaRegistryConfig(url="http://registry")


class Schemas:
    """The registry's answers by id, as ``WriterSchemas.get`` gives them (no HTTP here: the
    integration tests read a real registry)."""

    def __init__(self, fmt: str, known: dict[int, Any]) -> None:
        self.fmt = fmt
        self.known = known

    def get(self, sid: int) -> Any:
        unknown = Undecoded(f"{self.fmt}_unknown_schema_id", f"schema id {sid} is unknown")
        return self.known.get(sid, unknown)


def read(fmt: str, values: list[bytes], schema: Any) -> tuple[list[Any], Counter[str]]:
    kafka = {**config_dict(FIELDS)["kafka"], "format": fmt, "schema_registry": {"url": "http://r"}}
    config = parse_config({**config_dict(FIELDS), "kafka": kafka})
    added: list[bytes] = []
    skipped: list[str] = []
    reader = FramedValues(REGISTRY, config, build_plan(config), added.append, skipped.append)
    reader._schemas = Schemas(fmt, {5: schema})  # type: ignore[assignment]
    for value in values:
        reader.add(value)
    return [orjson.loads(a) for a in added], Counter(skipped)


def batch() -> BatchResult:
    outputs = [orjson.dumps(r) for r in RELEASED]
    return BatchResult(outputs=outputs, output_index=[0, 1], dead_letters=[])


def test_protobuf_values_are_read_back_as_the_json_released_and_the_rest_is_skipped() -> None:
    config = parse_config(config_dict(FIELDS))
    derived = output_proto(config.fields, build_plan(config))
    schema = parse_writer_schema(5, derived.text)
    encoder = ProtobufEncoder(5, schema.message_class((0,)), derived.adapt)  # type: ignore[union-attr]
    good = encoder.encode(batch()).outputs
    unknown = b"\x00\x00\x00\x00\x09" + good[0][5:]
    values = [*good, b'{"n": 3}', unknown, good[0][:-1]]
    added, skipped = read("protobuf", values, schema)
    assert added == RELEASED
    assert skipped == Counter(
        {
            "protobuf_no_magic_byte": 1,
            "protobuf_unknown_schema_id": 1,
            "protobuf_undecodable": 1,
        }
    )


def test_json_schema_values_are_read_back_as_the_json_released_and_the_rest_is_skipped() -> None:
    config = parse_config(config_dict(FIELDS))
    plan = build_plan(config)
    text = json.dumps(output_json_schema(config.fields, plan))
    schema = json_schema.parse_writer_schema(5, text, reads=tuple(read_names(plan, None)))
    good = JsonSchemaEncoder(5).encode(batch()).outputs
    values = [*good, b'{"n": 3}', b"\x00\x00\x00\x00\x09{}", good[0][:-1]]
    added, skipped = read("json_schema", values, schema)
    assert added == RELEASED
    assert skipped == Counter(
        {
            "json_schema_no_magic_byte": 1,
            "json_schema_unknown_schema_id": 1,
            "json_schema_undecodable": 1,
        }
    )


def test_the_fields_refused_for_a_record_go_on_with_it() -> None:
    """The topic reader names the fields released otherwise than --config says; the framed
    reader hands them on with the record's JSON."""
    kafka = {**config_dict(FIELDS)["kafka"], "format": "json_schema"}
    config = parse_config(
        {**config_dict(FIELDS), "kafka": {**kafka, "schema_registry": {"url": "http://r"}}}
    )
    plan = build_plan(config)
    text = json.dumps(output_json_schema(config.fields, plan))
    schema = json_schema.parse_writer_schema(5, text, reads=tuple(read_names(plan, None)))
    got: list[tuple[Any, ...]] = []
    reader = FramedValues(REGISTRY, config, plan, lambda *a: got.append(a), lambda _: None)
    reader._schemas = Schemas("json_schema", {5: schema})  # type: ignore[assignment]
    [value] = JsonSchemaEncoder(5).encode(batch()).outputs[:1]
    reader.add(value, frozenset({"n"}))
    assert [(orjson.loads(a[0]), a[1]) for a in got] == [(RELEASED[0], frozenset({"n"}))]
