"""How the worker resolves a writer schema's references (privstream.worker.schemas): the
registry's answers come from a table here; tests/integration/test_schema_references.py
runs the same against a real registry."""

from __future__ import annotations

import json
from typing import Any

import pytest
from privstream.config.registry import SchemaRegistryConfig
from privstream.errors import SchemaRegistryUnavailableError
from privstream.pipeline.avro import Undecoded
from privstream.pipeline.formats import codec
from privstream.worker import schemas as module
from privstream.worker.schemas import WriterSchemas


def _record(name: str, fields: list[tuple[str, str]]) -> str:
    entries = [{"name": f, "type": t} for f, t in fields]
    return json.dumps({"type": "record", "name": name, "namespace": "acme", "fields": entries})


def _ref(subject: str, version: int = 1) -> dict[str, Any]:
    return {"name": f"acme.{subject}", "subject": subject, "version": version}


class Table(WriterSchemas):
    """A registry answering from ``answers`` (path -> body; absent: 404), counting requests."""

    def __init__(self, answers: dict[str, dict[str, Any]], cache_size: int = 100) -> None:
        config = SchemaRegistryConfig(url="http://127.0.0.1:1", cache_size=cache_size)
        super().__init__(config, codec("avro", ()))
        self.answers = answers
        self.asked: list[str] = []

    def _get(self, path: str) -> dict[str, object] | None:
        self.asked.append(path)
        return self.answers.get(path)


def _diamond() -> dict[str, dict[str, Any]]:
    """Order -> (Address, Billing), both -> Geo: Geo must come first, and once."""
    geo = {"schema": _record("Geo", [("lat", "double")])}
    address = {"schema": _record("Address", [("geo", "acme.Geo")]), "references": [_ref("Geo")]}
    billing = {"schema": _record("Billing", [("geo", "acme.Geo")]), "references": [_ref("Geo")]}
    order = _record("Order", [("ship", "acme.Address"), ("bill", "acme.Billing")])
    return {
        "/subjects/Geo/versions/1": geo,
        "/subjects/Address/versions/1": address,
        "/subjects/Billing/versions/1": billing,
        "/schemas/ids/1": {"schema": order, "references": [_ref("Address"), _ref("Billing")]},
        "/schemas/ids/2": {"schema": order, "references": [_ref("Address"), _ref("Billing")]},
    }


def test_references_resolve_dependencies_first_each_subject_version_asked_once() -> None:
    registry = Table(_diamond())
    first, second = registry.get(1), registry.get(2)
    assert not isinstance(first, Undecoded) and not isinstance(second, Undecoded)
    versions = [p for p in registry.asked if p.startswith("/subjects/")]
    assert versions == [
        "/subjects/Address/versions/1",
        "/subjects/Geo/versions/1",
        "/subjects/Billing/versions/1",
    ]  # schema 2 shares them: no second request


def test_a_missing_reference_dead_letters_and_is_asked_again() -> None:
    answers = _diamond()
    geo = answers.pop("/subjects/Geo/versions/1")
    registry = Table(answers)
    found = registry.get(1)
    assert isinstance(found, Undecoded) and found.reason == "avro_unknown_reference"
    assert "version 1 of subject 'Geo'" in found.detail
    answers["/subjects/Geo/versions/1"] = geo  # registered again
    assert not isinstance(registry.get(1), Undecoded)
    assert registry.asked.count("/schemas/ids/1") == 2


def test_a_subject_name_is_quoted_into_the_path() -> None:
    order = {"schema": _record("Order", [("ship", "acme.Address")])}
    order["references"] = [{"name": "acme.Address", "subject": "acme/address v1", "version": 3}]
    address = {"schema": _record("Address", [("city", "string")])}
    registry = Table({"/schemas/ids/4": order, "/subjects/acme%2Faddress%20v1/versions/3": address})
    assert not isinstance(registry.get(4), Undecoded)


def test_a_reference_of_another_format_is_unsupported() -> None:
    answers = _diamond()
    answers["/subjects/Geo/versions/1"] = {"schema": "{}", "schemaType": "JSON"}
    found = Table(answers).get(1)
    assert isinstance(found, Undecoded) and found.reason == "avro_unsupported_schema"
    assert "the reference 'Geo' of schema 1 is JSON" in found.detail


def test_references_too_deep_are_refused_after_a_bounded_number_of_requests() -> None:
    depth = module.MAX_REFERENCE_DEPTH + 3
    answers: dict[str, dict[str, Any]] = {
        f"/subjects/T{i}/versions/1": {
            "schema": _record(f"T{i}", []),
            "references": [_ref(f"T{i + 1}")],
        }
        for i in range(depth)
    }
    answers["/schemas/ids/1"] = {"schema": _record("Top", []), "references": [_ref("T0")]}
    registry = Table(answers)
    found = registry.get(1)
    assert isinstance(found, Undecoded) and found.reason == "avro_unsupported_schema"
    assert len(registry.asked) == 1 + module.MAX_REFERENCE_DEPTH


def test_a_reference_cycle_ends() -> None:
    answers = {
        "/subjects/A/versions/1": {"schema": _record("A", []), "references": [_ref("B")]},
        "/subjects/B/versions/1": {"schema": _record("B", []), "references": [_ref("A")]},
        "/schemas/ids/1": {"schema": _record("Top", [("a", "acme.A")]), "references": [_ref("A")]},
    }
    registry = Table(answers)
    assert not isinstance(registry.get(1), Undecoded)  # each type parsed once, in order
    assert len(registry.asked) == 3


class Down(Table):
    """Answers the schema by id; its references only once ``down`` is False."""

    down = True

    def _get(self, path: str) -> dict[str, object] | None:
        if self.down and path.startswith("/subjects/"):
            raise module.unavailable(f"http://127.0.0.1:1{path}", "ConnectionRefusedError")
        return super()._get(path)


def test_a_registry_down_while_references_are_fetched_is_an_outage_not_a_dead_letter() -> None:
    registry = Down(_diamond())
    with pytest.raises(SchemaRegistryUnavailableError):
        registry.get(1)
    registry.down = False  # back: the id was not cached as anything
    assert not isinstance(registry.get(1), Undecoded)
