"""``kafka.output_format``: the output follows the input's format (Avro, Protobuf, JSON
Schema) unless the config says otherwise (docs/avro.md, Avro output, Protobuf output,
JSON Schema output)."""

from __future__ import annotations

from typing import Any

import pytest
from privstream.config import parse_config
from privstream.errors import ConfigError

from tests.support.configs import config_dict

REGISTRY = {"url": "http://registry:8081"}


def with_kafka(**kafka: Any) -> dict[str, Any]:
    data = config_dict([{"name": "seq", "kind": "public"}])
    data["kafka"].update(kafka)
    return data


@pytest.mark.parametrize(
    ("kafka", "avro_output"),
    [
        ({}, False),
        ({"format": "avro", "schema_registry": REGISTRY}, True),
        ({"format": "avro", "output_format": "json", "schema_registry": REGISTRY}, False),
        ({"output_format": "avro", "schema_registry": REGISTRY}, True),
        ({"output_format": "json"}, False),
    ],
)
def test_the_output_follows_the_input_unless_output_format_is_set(
    kafka: dict[str, Any], avro_output: bool
) -> None:
    assert parse_config(with_kafka(**kafka)).kafka.avro_output is avro_output


@pytest.mark.parametrize(
    ("kafka", "encoding"),
    [
        ({"format": "protobuf", "schema_registry": REGISTRY}, "protobuf"),
        ({"format": "protobuf", "output_format": "json", "schema_registry": REGISTRY}, "json"),
        ({"format": "json_schema", "schema_registry": REGISTRY}, "json_schema"),
        ({"format": "json_schema", "output_format": "json", "schema_registry": REGISTRY}, "json"),
        ({"output_format": "json_schema", "schema_registry": REGISTRY}, "json_schema"),
        ({"output_format": "protobuf", "schema_registry": REGISTRY}, "protobuf"),
        ({"format": "avro", "output_format": "protobuf", "schema_registry": REGISTRY}, "protobuf"),
    ],
)
def test_protobuf_and_json_schema_output_follow_their_input_unless_output_format_is_set(
    kafka: dict[str, Any], encoding: str
) -> None:
    assert parse_config(with_kafka(**kafka)).kafka.output_encoding == encoding


def test_protobuf_output_without_a_registry_says_what_is_missing() -> None:
    with pytest.raises(
        ConfigError, match=r"kafka\.output_format protobuf needs kafka\.schema_registry"
    ):
        parse_config(with_kafka(output_format="protobuf"))


def test_avro_output_without_a_registry_says_what_is_missing() -> None:
    with pytest.raises(
        ConfigError, match=r"kafka\.output_format avro needs kafka\.schema_registry"
    ):
        parse_config(with_kafka(output_format="avro"))


def test_an_unknown_output_format_is_refused() -> None:
    with pytest.raises(ConfigError, match="output_format"):
        parse_config(with_kafka(output_format="xml"))
