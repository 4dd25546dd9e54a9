"""The framed formats' codecs (privstream.pipeline.formats): each format's registry type
and reasons, and a missing optional package refused at start-up, naming the extra."""

from __future__ import annotations

import sys

import pytest
from privstream.errors import ConfigError
from privstream.pipeline.formats import codec


@pytest.mark.parametrize(
    ("name", "schema_type", "prefix"),
    [
        ("avro", "AVRO", "avro"),
        ("protobuf", "PROTOBUF", "protobuf"),
        ("json_schema", "JSON", "json_schema"),
    ],
)
def test_each_format_names_its_registry_type_and_its_own_reasons(
    name: str, schema_type: str, prefix: str
) -> None:
    found = codec(name, ())
    assert (found.name, found.schema_type) == (name, schema_type)
    assert found.unknown_schema_id == f"{prefix}_unknown_schema_id"
    assert found.unsupported_schema == f"{prefix}_unsupported_schema"


@pytest.mark.parametrize(
    ("name", "package", "module"),
    [
        ("json_schema", "jsonschema", "privstream.pipeline.json_schema"),
        ("protobuf", "google.protobuf", "privstream.pipeline.protobuf"),
    ],
)
def test_a_missing_package_is_a_config_error_naming_the_extra(
    monkeypatch: pytest.MonkeyPatch, name: str, package: str, module: str
) -> None:
    for loaded in [m for m in sys.modules if m.startswith((package, module))]:
        monkeypatch.delitem(sys.modules, loaded)
    monkeypatch.setitem(sys.modules, package, None)  # import fails as if not installed
    with pytest.raises(ConfigError, match=rf"pip install 'privstream\[{name}\]'"):
        codec(name, ())
