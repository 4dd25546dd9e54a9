"""Fields named by paths into nested objects (issue 32, items 1 and 4).

``name: device.os`` reads the key ``os`` of the object under ``device`` and
writes it back nested; ``public`` and ``drop`` take whole subtrees; a sibling
no field names never reaches the output. An absent key or a null object on
the way is a missing value (the field's ``on_missing``), any other value on
the way dead-letters the record with a reason naming the path. The fast path
gives the reference's very bytes, reasons and positions on every batch here.
"""

from __future__ import annotations

import json
import random
import re
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from privstream.config import parse_config
from privstream.config.paths import join_path, split_path
from privstream.errors import ConfigError
from privstream.kinds import build_plan
from privstream.pipeline import process_batch
from privstream.pipeline.nesting import key_texts, layout, nest

from tests.support.configs import config_dict
from tests.unit.pipeline.test_fast_path import assert_same, noise, plan_of
from tests.unit.pipeline.test_release_id_pinned import MEMO_DEFAULTS, documented_id

NESTED: list[dict[str, Any]] = [
    {"name": "user", "kind": "drop"},
    {"name": "device.os", "kind": "categorical", "domain": ["ios", "android"], "epsilon": 1.0},
    {"name": "seq", "kind": "public"},
    {"name": "device.app_version", "kind": "public"},
    {
        "name": "geo.city.code",
        "kind": "categorical",
        "domain": ["a", "b"],
        "epsilon": 1.0,
        "on_missing": "impute",
        "impute": "a",
    },
    {"name": "latency", "kind": "real", "bounds": [0, 10], "epsilon": 1.0, "on_missing": "null"},
    {
        "name": "geo.zip",
        "kind": "integer",
        "bounds": [0, 100],
        "epsilon": 1.0,
        "on_missing": "impute",
        "impute": 0,
        "presence_epsilon": 0.5,
    },
    {"path": ["a.b", "c"], "kind": "boolean", "epsilon": 1.0},
    {"name": "tags", "kind": "public", "allow_nested": True},
    {"name": "cart.items", "kind": "drop"},
]


def record(rng: random.Random, i: int) -> dict[str, Any]:
    """A nested event; about half of them broken or gapped in one way."""
    out: dict[str, Any] = {
        "user": f"u{i}",
        "seq": i,
        "device": {"os": rng.choice(["ios", "android"]), "app_version": "1.2", "imei": 35},
        "latency": rng.uniform(-2, 12),
        "geo": {"city": {"code": rng.choice("ab"), "name": "secret"}, "zip": rng.randint(0, 120)},
        "a.b": {"c": rng.random() < 0.5},
        "tags": [{"k": "x", "v": 1}, {"k": "y", "v": None}],
        "cart": {"items": [{"sku": "s1", "price": 9.5}]},
        "email": "someone@example.com",
    }
    gap = rng.randrange(16)
    changes = {
        0: lambda: out.pop("geo"),
        1: lambda: out.update(geo=None),
        2: lambda: out["geo"].update(city=None),
        3: lambda: out["geo"].pop("city"),
        4: lambda: out.update(geo=12),  # neither object nor null: dead-lettered
        5: lambda: out["device"].update(os=12),
        6: lambda: out.update(latency=None),
        7: lambda: out.update(device=[{"os": "ios"}]),  # an array on the way
        8: lambda: out["geo"]["city"].update(code=None),
        9: lambda: out.pop("latency"),
    }
    if gap in changes:
        changes[gap]()
    return out


def batch(seed: int, count: int) -> list[bytes]:
    rng = random.Random(seed)
    return [json.dumps(record(rng, i)).encode() for i in range(count)]


def test_nested_fields_give_identical_bytes_and_reasons() -> None:
    plan = plan_of(NESTED)
    result = assert_same(plan, batch(1, 800))
    assert len(result.outputs) > 500
    details = {(dead.reason, dead.detail) for dead in result.dead_letters}
    assert details == {
        ("wrong_type", "field 'device.os': expected an object at 'device', got array"),
        ("wrong_type", "field 'geo.city.code': expected an object at 'geo', got number"),
        ("unknown_category", next(d for r, d in details if r == "unknown_category")),
    }
    assert all(d.startswith("field 'device.os': ") for r, d in details if r == "unknown_category")


def test_the_output_keeps_the_nesting_and_only_the_named_keys() -> None:
    plan = plan_of(NESTED)
    messages = batch(2, 400)
    result = process_batch(plan, messages, noise(messages))
    for text in result.outputs:
        out = json.loads(text)
        # objects in the order of their first field; email, user, imei, city name: never
        assert list(out) == ["device", "seq", "geo", "latency", "a.b", "tags"]
        assert list(out["device"]) == ["os", "app_version"]
        assert list(out["geo"]) == ["city", "zip", "zip_present"]
        assert list(out["geo"]["city"]) == ["code"]
        assert out["tags"] == [{"k": "x", "v": 1}, {"k": "y", "v": None}]  # public subtree
        assert b"secret" not in text and b"imei" not in text and b"sku" not in text


def test_a_missing_or_null_object_on_the_way_is_a_missing_value() -> None:
    """Under impute and null, every gap in the path is released in the same shape (the
    release decision never depends on the value or on where the path broke)."""
    plan = plan_of(NESTED)
    present = {"geo": {"city": {"code": "b"}, "zip": 3}, "latency": 4.0}
    gaps: list[dict[str, Any]] = [
        present,
        {"geo": {"city": {"code": "a"}, "zip": 1000}, "latency": 1e6},  # out of bounds: clamped
        {"geo": {"city": {"code": None}, "zip": None}, "latency": None},
        {"geo": {"city": None}},
        {"geo": {}},
        {"geo": None},
        {},
    ]
    device = {"os": "ios", "app_version": "1"}
    base = {"user": "u", "seq": 1, "device": device, "a.b": {"c": True}, "tags": []}
    messages = [json.dumps({**base, **gap}).encode() for gap in gaps]
    result = assert_same(plan, messages)
    assert result.dead_letters == []
    shapes = {tuple(json.loads(t)["geo"]) for t in result.outputs}
    assert shapes == {("city", "zip", "zip_present")}
    latencies = [json.loads(t)["latency"] for t in result.outputs]
    assert [v is None for v in latencies] == [False, False, True, True, True, True, True]


def test_under_dead_letter_a_missing_object_names_the_path() -> None:
    plan = plan_of([{"name": "device.os", "kind": "boolean", "epsilon": 1.0}])
    messages = [b'{"device":{"os":true}}', b'{"device":null}', b"{}", b'{"device":"x"}']
    result = assert_same(plan, messages)
    assert [(d.index, d.reason, d.detail) for d in result.dead_letters] == [
        (1, "missing_field", "field 'device.os': missing"),
        (2, "missing_field", "field 'device.os': missing"),
        (3, "wrong_type", "field 'device.os': expected an object at 'device', got string"),
    ]
    assert result.outputs == [result.outputs[0]] and result.outputs[0].startswith(b'{"device":{')


def test_a_dot_inside_a_key_is_escaped() -> None:
    plan = plan_of(
        [
            {"name": "app\\.version", "kind": "public"},
            {"name": "app.version", "kind": "public"},
        ]
    )
    messages = [b'{"app.version":"flat","app":{"version":"nested"}}']
    result = assert_same(plan, messages)
    assert json.loads(result.outputs[0]) == {"app.version": "flat", "app": {"version": "nested"}}


def test_a_nested_memo_identity_and_presence_bit() -> None:
    fields = [
        {"name": "device.id", "kind": "drop"},
        {
            "name": "device.mode",
            "kind": "categorical",
            "domain": ["a", "b"],
            "epsilon": 1.0,
            "memoize_by": "device.id",
            "memo_identity_trusted": True,
        },
    ]
    plan = plan_of(fields)
    messages = [
        json.dumps({"device": {"id": f"d{i % 3}", "mode": "a"}}).encode() for i in range(30)
    ]
    messages += [b'{"device":{"mode":"a"}}', b'{"device":{"id":[1],"mode":"a"}}']
    result = assert_same(plan, messages)
    assert [d.reason for d in result.dead_letters] == ["missing_field", "wrong_type"]
    # memoized: one answer per device
    answers: dict[int, set[str]] = {}
    for index, text in zip(result.output_index, result.outputs, strict=True):
        answers.setdefault(index % 3, set()).add(json.loads(text)["device"]["mode"])
    assert all(len(seen) == 1 for seen in answers.values())


@pytest.mark.parametrize(
    ("fields", "words"),
    [
        (
            [{"name": "device", "kind": "public"}, {"name": "device.os", "kind": "drop"}],
            "lies under field 'device' (kind public)",
        ),
        (
            [
                {"name": "device.os", "kind": "boolean", "epsilon": 1.0},
                {"name": "device", "kind": "drop"},
            ],
            "lies under field 'device' (kind drop)",
        ),
        (
            [{"name": "device.os", "kind": "public"}, {"path": ["device", "os"], "kind": "drop"}],
            "field named 2 times",
        ),
        ([{"name": "a..b", "kind": "public"}], "a path has an empty key"),
        ([{"name": "a\\b", "kind": "public"}], "a backslash escapes"),
        (
            [{"name": "items[].price", "kind": "real", "bounds": [0, 1], "epsilon": 1.0}],
            "paths into arrays are not supported",
        ),
        ([{"name": "tags[]", "kind": "public"}], "name the array itself"),
        ([{"name": "x", "path": ["x"], "kind": "public"}], "give name or path, not both"),
        ([{"path": [], "kind": "public"}], "path must be a list of non-empty strings"),
    ],
)
def test_conflicting_and_unsupported_paths_are_config_errors(
    fields: list[dict[str, Any]], words: str
) -> None:
    with pytest.raises(ConfigError, match=re.escape(words)):
        parse_config(config_dict(fields))


def test_a_nested_subject_is_a_config_error() -> None:
    data = config_dict([{"name": "user.id", "kind": "drop"}])
    data["privacy"]["subject"] = "user.id"
    with pytest.raises(ConfigError, match="the subject must be a top-level key"):
        parse_config(data)


def test_name_and_path_spell_one_field_with_one_release_id() -> None:
    entry = {"kind": "categorical", "domain": ["x", "y"], "epsilon": 1.0}
    plans = [
        build_plan(parse_config(config_dict([{**spelling, **entry}])))
        for spelling in ({"name": "device.os"}, {"path": ["device", "os"]})
    ]
    assert plans[0].fields[0].release_id == plans[1].fields[0].release_id
    assert plans[0].release_sha256 == plans[1].release_sha256
    assert plans[0].config_sha256 == plans[1].config_sha256


keys = st.text(st.sampled_from("ab.\\[]x"), min_size=1, max_size=4)


@settings(max_examples=300, deadline=None, derandomize=True)
@given(st.lists(keys, min_size=1, max_size=4))
def test_join_and_split_are_inverse(path: list[str]) -> None:
    assert split_path(join_path(path)) == tuple(path)


#: a nested value: what a record may hold on the way to a field
shapes = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-3, 12), st.sampled_from(["ios", "x"])),
    lambda inner: st.one_of(
        st.lists(inner, max_size=2), st.dictionaries(st.sampled_from("dop"), inner, max_size=3)
    ),
    max_leaves=6,
)


@settings(max_examples=150, deadline=None, derandomize=True)
@given(st.lists(st.dictionaries(st.sampled_from(["d", "seq"]), shapes, max_size=2), max_size=12))
def test_any_record_shape_gives_the_references_bytes(records: list[dict[str, Any]]) -> None:
    fields = [
        {"name": "d.o", "kind": "categorical", "domain": ["ios", "x"], "epsilon": 1.0},
        {"name": "d.p.o", "kind": "integer", "bounds": [0, 10], "epsilon": 1.0},
        {"name": "d.d", "kind": "public", "allow_nested": True},
    ]
    for mode in ("dead_letter", "impute", "null"):
        entries = [dict(f) for f in fields]
        for entry in entries[:2]:
            entry["on_missing"] = mode
            if mode == "impute":
                entry["impute"] = "x" if entry["kind"] == "categorical" else 3
        assert_same(plan_of(entries), [json.dumps(r).encode() for r in records])


def test_layout_and_key_texts_write_what_nest_writes() -> None:
    paths = [("a",), ("b", "x", "1"), ("c",), ("b", "y"), ("b", "x", "2"), ("d", "e")]
    values = list(range(len(paths)))
    order = layout(paths)
    texts = key_texts(paths, order)
    joined = b"".join(texts[k] + str(values[p]).encode() for k, p in enumerate(order)) + texts[-1]
    assert joined == json.dumps(nest(paths, values), separators=(",", ":")).encode()


def test_a_field_under_a_presence_bit_is_a_config_error() -> None:
    fields = [
        {"name": "x", "kind": "boolean", "epsilon": 1.0, "on_missing": "impute"},
        {"name": "x_present.y", "kind": "public"},
    ]
    fields[0].update(impute=False, presence_epsilon=0.5)
    with pytest.raises(ConfigError, match=re.escape("under field 'x_present' (kind presence")):
        parse_config(config_dict(fields, epsilon=2.0))


def test_escaped_and_duplicate_keys_inside_an_object_read_as_the_stdlib_reads_them() -> None:
    plan = plan_of(
        [{"name": "device.os", "kind": "categorical", "domain": ["a", "b"], "epsilon": 1.0}]
    )
    messages = [
        b'{"device":{"o\\u0073":"a","x":{"os":"b"}}}',
        b'{"device":{"os":"a","os":"b"}}',  # the last one wins
        b'{"device":{"os":"b"},"device":null}',
        b'{"dev\\u0069ce":{"os":"b"}}',
        b'{"device":{"os":"\\u0061"}}',
    ]
    result = assert_same(plan, messages)
    assert result.output_index == [0, 1, 3, 4]
    assert [d.detail for d in result.dead_letters] == ["field 'device.os': missing"]


def test_a_nested_release_id_is_the_documented_digest_of_its_name() -> None:
    """The spec hashed holds ``name: device.os`` however the field is spelled: ``path`` is
    never part of it (a release id is the documented digest, test_release_id_pinned)."""
    full = {"name": "device.os", "kind": "boolean", "epsilon": 0.75, "delta": 0.0}
    full |= {"mechanism": "randomized_response", **MEMO_DEFAULTS}
    for spelling in ({"name": "device.os"}, {"path": ["device", "os"]}):
        written = {**spelling, "kind": "boolean", "epsilon": 0.75}
        config = parse_config(config_dict([written], epsilon=10.0))
        (planned,) = build_plan(config).fields
        assert planned.handler.mechanism is not None
        params = planned.handler.mechanism.params()
        assert planned.release_id == documented_id(full, (0.75, 0.0), params)
