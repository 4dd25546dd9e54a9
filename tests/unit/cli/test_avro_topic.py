"""estimate --topic on Avro: each value read with its writer schema, seeds unsigned again,
and what is no Avro of a known schema skipped with its reason (privstream.cli.avro_topic)."""

from __future__ import annotations

from collections import Counter
from typing import Any

import orjson
from fastavro import parse_schema
from privstream.cli.avro_topic import AvroValues
from privstream.config import parse_config
from privstream.config.registry import SchemaRegistryConfig
from privstream.kinds import build_plan
from privstream.pipeline.avro import UNKNOWN_SCHEMA_ID, Undecoded
from privstream.pipeline.avro_encode import AvroEncoder
from privstream.pipeline.avro_schema import hash_report_fields, output_schema

from tests.support.configs import config_dict

FIELDS = [
    {"name": "n", "kind": "integer", "bounds": [0, 9], "epsilon": 1},
    {"name": "h", "kind": "categorical", "epsilon": 1},
]


class Schemas:
    """The registry's answers by id, as ``WriterSchemas.get`` gives them (no HTTP here: the
    integration test reads a real registry)."""

    def __init__(self, known: dict[int, Any]) -> None:
        self.known = known

    def get(self, sid: int) -> Any:
        return self.known.get(sid, Undecoded(UNKNOWN_SCHEMA_ID, f"schema id {sid} is unknown"))


def test_values_are_read_back_as_the_json_released_and_the_rest_is_skipped() -> None:
    config = parse_config(config_dict(FIELDS))
    plan = build_plan(config)
    schema = output_schema(config.fields, plan)
    encoder = AvroEncoder(5, schema, hash_report_fields(plan))
    released = {"n": 3, "h": {"seed": 2**64 - 1, "bucket": 1}}
    value = encoder.value(orjson.loads(orjson.dumps(released)))
    added: list[bytes] = []
    skipped: list[str] = []
    registry = SchemaRegistryConfig(url="http://registry")
    reader = AvroValues(registry, plan, added.append, skipped.append)
    reader._schemas = Schemas({5: parse_schema(schema)})  # type: ignore[assignment]
    unknown = b"\x00\x00\x00\x00\x09" + value[5:]
    for one in (value, b'{"n": 3}', unknown, value[:-1], value + b"\x00"):
        reader.add(one)
    assert [orjson.loads(a) for a in added] == [released]
    assert Counter(skipped) == Counter(
        {"avro_no_magic_byte": 1, "avro_unknown_schema_id": 1, "avro_undecodable": 2}
    )
