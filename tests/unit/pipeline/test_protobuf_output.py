"""Protobuf output: the .proto derived from the config, the records written under it (read
back with the protobuf runtime and with the input's decoder), and the differences that
name a refused config (privstream.pipeline.protobuf_*, privstream.worker.protobuf_output)."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest
from privstream.errors import OutputSchemaError
from privstream.kinds import build_plan
from privstream.mechanisms.rng import NoiseKeys
from privstream.pipeline import process_batch
from privstream.pipeline import protobuf_output as derive
from privstream.pipeline.noise import Replayable
from privstream.pipeline.protobuf import to_json
from privstream.pipeline.protobuf_encode import UNENCODABLE, ProtobufEncoder
from privstream.pipeline.protobuf_output import ProtoOutput, field_number, output_proto
from privstream.pipeline.protobuf_schema import parse_writer_schema
from privstream.pipeline.results import BatchResult
from privstream.worker.protobuf_output import ProtobufDerived

from tests.unit.pipeline.test_avro_output import EVERY_KIND, SECRET, config_of, record

SCHEMA_ID = 2**31 + 9
HEADER = b"\x00" + SCHEMA_ID.to_bytes(4, "big") + b"\x00"  # magic, id, message index [0]
#: EVERY_KIND, plus fields at paths and a nullable set (a repeated field in a wrapper)
NESTED: list[dict[str, Any]] = [
    {"name": "device.os", "kind": "categorical", "domain": ["ios", "android"], "epsilon": 1},
    {"name": "device.model", "kind": "public"},
    {"name": "device.hw.ram", "kind": "integer", "bounds": [0, 64], "epsilon": 1},
    {
        "name": "tags",
        "kind": "set",
        "universe": ["a", "b"],
        "max_items": 2,
        "epsilon": 1,
        "on_missing": "null",
    },
]


def derived(fields: list[dict[str, Any]]) -> tuple[ProtoOutput, Any]:
    """The derived output of ``fields`` and the message class protoc makes of its text."""
    config = config_of(fields)
    out = output_proto(config.fields, build_plan(config))
    schema = parse_writer_schema(1, out.text)
    assert not hasattr(schema, "reason"), schema
    return out, schema.message_class((0,))


def nested_record(n: int) -> dict[str, Any]:
    body = json.loads(record(n))
    body["device"] = {"os": ["ios", "android"][n % 2], "model": [f"m{n}", n, None][n % 3]}
    body["device"]["hw"] = {"ram": n % 64}
    if n % 5:
        body["tags"] = ["a", "b"][: n % 3]
    return body


def sanitized(count: int) -> tuple[list[bytes], ProtoOutput, Any, BatchResult]:
    out, message = derived(EVERY_KIND + NESTED)
    plan = build_plan(config_of(EVERY_KIND + NESTED))
    messages = [json.dumps(nested_record(n)).encode() for n in range(count)]
    positions = np.arange(count, dtype=np.int64)
    noise = Replayable(NoiseKeys(SECRET, "raw"), np.zeros(count, np.int64), positions, messages)
    result = process_batch(plan, messages, noise)
    assert not result.dead_letters, result.dead_letters[:3]
    encoder = ProtobufEncoder(SCHEMA_ID, message, out.adapt)
    return list(result.outputs), out, message, encoder.encode(result)


def test_every_kind_round_trips_to_the_json_it_releases() -> None:
    """Each output is framed (magic, id, index 0), parses with the protobuf runtime's class of
    the registered text with nothing left over, and read as the estimate reads it (the
    input's decoder, then ``restore``) is the JSON output: local-hashing seeds at or above
    2**63 (uint64) and a null set included, or the test is void."""
    texts, out, message, result = sanitized(200)
    schema = parse_writer_schema(SCHEMA_ID, out.text)
    read = to_json(result.outputs, {SCHEMA_ID: schema})
    seeds = []
    for text, value, json_text in zip(texts, result.outputs, read, strict=True):
        assert value[:6] == HEADER
        parsed = message.FromString(value[6:])
        assert parsed.SerializeToString() == value[6:]
        seeds.append(parsed.ch.seed)
        assert out.restore(json.loads(json_text)) == json.loads(text)
    assert min(seeds) < 2**63 <= max(seeds), "no seed at or above 2**63 was written"
    assert any(json.loads(t)["tags"] is None for t in texts)


def test_an_object_read_back_unset_is_restored_with_its_nullable_fields_null() -> None:
    """A nested message the payload leaves out (its fields all unset) reads back as the JSON
    output's object of nulls, never as a missing object."""
    out, _ = derived(NESTED)
    restored = out.restore({"tags": {"values": ["a"]}})
    assert restored["device"] == {"model": None, "hw": {}}
    assert restored["tags"] == ["a"]


def test_the_message_follows_the_kinds_and_says_how_each_field_was_released() -> None:
    out, message = derived(EVERY_KIND + NESTED)
    fields = {f.name: f for f in message.DESCRIPTOR.fields}
    assert "id" not in fields  # dropped
    assert fields["r"].type == fields["r"].TYPE_DOUBLE
    assert fields["i"].type == fields["i"].TYPE_INT64 and fields["i"].has_presence  # nullable
    assert fields["c"].type == fields["c"].TYPE_STRING and not fields["c"].has_presence
    assert fields["ci"].type == fields["ci"].TYPE_INT64
    assert fields["cm"].message_type.name == "Scalar"  # a mixed domain
    assert fields["cu"].is_repeated and fields["s"].is_repeated and fields["v"].is_repeated
    report = fields["ch"].message_type
    assert [(f.name, f.type) for f in report.fields] == [
        ("seed", report.fields[0].TYPE_UINT64),
        ("bucket", report.fields[0].TYPE_INT64),
    ]
    assert fields["b_present"].type == fields["b_present"].TYPE_BOOL
    assert fields["ts"].message_type.name == "Scalar"
    device = fields["device"].message_type
    assert sorted(device.fields_by_name) == ["hw", "model", "os"]
    assert device.fields_by_name["hw"].message_type.fields_by_name["ram"].type == 3  # int64
    assert fields["tags"].message_type.name == "tags_List"  # a nullable repeated field
    assert '"kind":"categorical","mechanism":"randomized_response"' in out.text
    assert "// privstream sanitized record, config sha256 " in out.text


def test_numbers_come_from_names_so_other_fields_never_move_them() -> None:
    """Taking a field out, adding one or reordering keeps every other field's number (by
    position, removing ``r`` would give its number to the next field)."""
    _, every = derived(EVERY_KIND)
    numbers = {f.name: f.number for f in every.DESCRIPTOR.fields}
    fewer = [f for f in EVERY_KIND if f["name"] != "r"]
    _, changed = derived(list(reversed([*fewer, *NESTED])))
    for field in changed.DESCRIPTOR.fields:
        assert numbers.get(field.name, field.number) == field.number
        assert field.number == field_number(field.name)
        assert derive.FIRST_NUMBER <= field.number < 2**25  # a tag of at most 4 bytes


def test_colliding_names_are_refused_naming_both(monkeypatch: pytest.MonkeyPatch) -> None:
    """With numbers squeezed into 3 values, two of a, b, c collide: refused, whatever the
    config order (a number is a function of its own name only, never of the others)."""
    monkeypatch.setattr(derive, "NUMBERS", 3)
    assert len({field_number(n) for n in "abc"}) < 3
    fields = [{"name": n, "kind": "real", "bounds": [0, 1], "epsilon": 1} for n in "cab"]
    for order in (fields, list(reversed(fields))):
        with pytest.raises(OutputSchemaError, match="hash to one Protobuf field number"):
            derived(order)


def test_one_config_gives_one_text_and_an_epsilon_change_only_a_comment() -> None:
    one, _ = derived(EVERY_KIND)
    assert derived(EVERY_KIND)[0].text == one.text
    changed = [dict(f, epsilon=2) if f["name"] == "r" else f for f in EVERY_KIND]
    other, _ = derived(changed)
    strip = [line for line in one.text.splitlines() if "//" not in line]
    assert other.text != one.text
    assert [line for line in other.text.splitlines() if "//" not in line] == strip


@pytest.mark.parametrize(
    ("field", "words"),
    [
        ({"name": "heart-rate", "kind": "real", "bounds": [0, 1], "epsilon": 1}, "'heart-rate'"),
        ({"name": "blob", "kind": "public", "allow_nested": True}, "allow_nested"),
    ],
)
def test_a_field_protobuf_cannot_hold_is_refused_by_name(field: dict[str, Any], words: str) -> None:
    with pytest.raises(OutputSchemaError, match=words):
        derived([field])


def test_a_name_that_clashes_with_a_derived_message_is_refused_at_start_up() -> None:
    """``ch_Report`` is the message of a local-hashing ``ch``: protoc refuses the text, and
    the worker says so before it registers anything."""
    fields = [
        {"name": "ch", "kind": "categorical", "epsilon": 1},
        {"name": "ch_Report", "kind": "real", "bounds": [0, 1], "epsilon": 1},
    ]
    config = config_of(fields)
    with pytest.raises(OutputSchemaError, match=r"does not compile.*ch_Report"):
        ProtobufDerived.of(config, build_plan(config))


def test_a_record_the_message_cannot_hold_is_dead_lettered_without_its_value() -> None:
    """A public string with a lone surrogate (no UTF-8) is dead-lettered, its value never in
    the reason; an integer beyond 64 bits is written as a double, as in Avro output."""
    out, message = derived([{"name": "p", "kind": "public"}])
    encoder = ProtobufEncoder(SCHEMA_ID, message, out.adapt)
    outputs = [b'{"p":"ok"}', b'{"p":"\\udc80secret"}', b'{"p":123456789012345678901234567890}']
    result = BatchResult(outputs=outputs, output_index=[0, 1, 2], dead_letters=[])
    encoded = encoder.encode(result)
    assert encoded.output_index == [0, 2]
    [dead] = encoded.dead_letters
    assert (dead.index, dead.reason) == (1, UNENCODABLE) and "secret" not in dead.detail
    assert message.FromString(encoded.outputs[1][6:]).p.double_value == float(
        123456789012345678901234567890
    )


def test_differences_name_the_fields_that_break_old_records() -> None:
    """What the worker says when the registry refuses: a field whose type changed (integer
    made real: int64 read as double) and a field taken out of the config."""
    fields = [
        {"name": "n", "kind": "integer", "bounds": [0, 9], "epsilon": 1},
        {"name": "gone", "kind": "real", "bounds": [0, 1], "epsilon": 1},
    ]
    old, _ = derived(fields)
    config = config_of([{"name": "n", "kind": "real", "bounds": [0, 9], "epsilon": 1}])
    new = ProtobufDerived.of(config, build_plan(config))
    assert sorted(new.problems(old.text)) == [
        "field 'gone' is no longer in the config, and records already in the topic hold it",
        "field 'n' changes from int64 to double, which reads the records already in the "
        "topic as other values",
    ]
    same = ProtobufDerived.of(config, build_plan(config))
    assert same.problems(new.text) == []
    assert new.problems("not a proto") == []
