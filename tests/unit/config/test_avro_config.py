"""``kafka.format`` and ``kafka.schema_registry`` (docs/avro.md)."""

from __future__ import annotations

from typing import Any

import pytest
from privstream.config import parse_config
from privstream.errors import ConfigError

from tests.support.configs import config_dict

FIELDS = [{"name": "seq", "kind": "public"}]


def with_kafka(**kafka: Any) -> dict[str, Any]:
    data = config_dict(FIELDS)
    data["kafka"].update(kafka)
    return data


def problems(data: dict[str, Any]) -> str:
    with pytest.raises(ConfigError) as info:
        parse_config(data)
    return "\n".join(info.value.problems)


def test_json_is_the_default_and_needs_no_registry() -> None:
    kafka = parse_config(with_kafka()).kafka
    assert (kafka.format, kafka.schema_registry) == ("json", None)


def test_avro_takes_a_registry_url_and_its_defaults() -> None:
    kafka = parse_config(
        with_kafka(format="avro", schema_registry={"url": "https://registry:8081/"})
    ).kafka
    assert kafka.format == "avro"
    assert kafka.schema_registry is not None
    assert kafka.schema_registry.url == "https://registry:8081"  # no trailing slash
    assert (kafka.schema_registry.cache_size, kafka.schema_registry.timeout_ms) == (1000, 5000)


@pytest.mark.parametrize("framed", ["avro", "protobuf", "json_schema"])
def test_a_framed_format_without_a_registry_says_what_is_missing(framed: str) -> None:
    expected = f"kafka.format {framed} needs kafka.schema_registry"
    assert expected in problems(with_kafka(format=framed))


@pytest.mark.parametrize("framed", ["protobuf", "json_schema"])
def test_protobuf_and_json_schema_take_a_registry(framed: str) -> None:
    kafka = parse_config(with_kafka(format=framed, schema_registry={"url": "http://r"})).kafka
    assert kafka.format == framed


@pytest.mark.parametrize(
    ("registry", "expected"),
    [
        ({"url": "registry:8081"}, "must start with http:// or https://"),
        ({"url": "http://r", "auth": {"username": "u", "password": "p"}}, "password"),
        ({"url": "http://r", "cache_size": 0}, "cache_size"),
    ],
)
def test_a_wrong_registry_section_is_refused(registry: dict[str, Any], expected: str) -> None:
    assert expected in problems(with_kafka(format="avro", schema_registry=registry))


def test_an_unknown_format_is_refused() -> None:
    assert "format" in problems(with_kafka(format="thrift"))
