"""`privstream schema`: the JSON Schema editors validate configs with, generated, never stale."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from privstream.cli.main import main
from privstream.config.schema import config_schema

ROOT = Path(__file__).resolve().parents[3]
EXAMPLES = ROOT / "examples"


def validator() -> jsonschema.Draft202012Validator:
    schema = config_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def test_the_committed_schema_is_the_generated_one(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["schema"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed == json.loads((EXAMPLES / "privstream.schema.json").read_text())


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("*.yaml")), ids=lambda p: p.name)
def test_example_configs_validate_and_point_at_the_schema(path: Path) -> None:
    text = path.read_text()
    assert text.startswith("# yaml-language-server: $schema=privstream.schema.json\n")
    validator().validate(yaml.safe_load(text))


@pytest.mark.parametrize(
    ("change", "where"),
    [
        ({"kind": "reals"}, "kind"),
        ({"bounds": "0..1"}, "bounds"),
        ({"typo_field": 1}, "typo_field"),
    ],
)
def test_the_schema_refuses_what_the_loader_refuses(change: dict[str, Any], where: str) -> None:
    config = {
        "kafka": {"input_topic": "a", "output_topic": "b", "dead_letter_topic": "c"},
        "privacy": {"epsilon": 1.0},
        "fields": [{"name": "x", "kind": "real", "bounds": [0, 1], "epsilon": 1.0, **change}],
    }
    errors = list(validator().iter_errors(config))
    assert errors, f"schema accepted {change}"
    assert any(where in json.dumps(list(e.path)) + e.message for e in errors)


def test_the_schema_takes_a_name_or_a_path_and_not_both() -> None:
    """``path: [device, os]`` in place of ``name: device.os`` (docs/configuration.md)."""
    entry = {"kind": "real", "bounds": [0, 1], "epsilon": 1.0}
    base = {
        "kafka": {"input_topic": "a", "output_topic": "b", "dead_letter_topic": "c"},
        "privacy": {"epsilon": 1.0},
    }
    for spelling, valid in (
        ({"name": "device.os"}, True),
        ({"path": ["device", "os"]}, True),
        ({"name": "device.os", "path": ["device", "os"]}, False),
        ({}, False),
        ({"path": []}, False),
    ):
        config = {**base, "fields": [{**spelling, **entry}]}
        assert validator().is_valid(config) is valid, spelling
