"""Avro output: the schema derived from the config, the records written under it, and
what makes a new schema unreadable for the old records (privstream.pipeline.avro_*)."""

from __future__ import annotations

import io
import json
import random
from typing import Any

import numpy as np
import pytest
from fastavro import parse_schema, schemaless_reader
from privstream.config import AppConfig, parse_config
from privstream.errors import OutputSchemaError
from privstream.kinds import build_plan
from privstream.mechanisms.rng import NoiseKeys
from privstream.pipeline import process_batch
from privstream.pipeline.avro_compat import backward_problems
from privstream.pipeline.avro_encode import UNENCODABLE, AvroEncoder, plain
from privstream.pipeline.avro_schema import hash_report_fields, output_schema, schema_text
from privstream.pipeline.avro_write import batch_writer, record_writer
from privstream.pipeline.noise import Replayable
from privstream.pipeline.results import BatchResult

from tests.support.configs import config_dict

SECRET = bytes(range(40, 72))
TIME_BOUNDS = ["2026-01-01T00:00:00Z", "2027-01-01T00:00:00Z"]
#: one field of every kind and output shape the schema has a rule for
EVERY_KIND: list[dict[str, Any]] = [
    {"name": "id", "kind": "drop"},
    {"name": "ts", "kind": "public"},
    {"name": "r", "kind": "real", "bounds": [0, 10], "epsilon": 1},
    {"name": "i", "kind": "integer", "bounds": [0, 10], "epsilon": 1, "on_missing": "null"},
    {"name": "c", "kind": "categorical", "domain": ["a", "b", "c"], "epsilon": 1},
    {"name": "ci", "kind": "categorical", "domain": [1, 2, 3], "epsilon": 1},
    {"name": "cs", "kind": "categorical", "domain": ["x-1", "y 2"], "epsilon": 1},
    {"name": "cm", "kind": "categorical", "domain": [1, "b"], "epsilon": 1, "on_missing": "null"},
    {
        "name": "cu",
        "kind": "categorical",
        "domain": ["a", "b", "c"],
        "epsilon": 1,
        "mechanism": "unary_encoding",
    },
    {"name": "ch", "kind": "categorical", "epsilon": 1},
    {
        "name": "b",
        "kind": "boolean",
        "epsilon": 1,
        "on_missing": "impute",
        "impute": False,
        "presence_epsilon": 1,
    },
    {"name": "s", "kind": "set", "universe": ["x", "y", "z"], "max_items": 2, "epsilon": 1},
    {"name": "v", "kind": "vector", "dimension": 3, "l2_bound": 1, "epsilon": 1, "delta": 1e-7},
    {
        "name": "f",
        "kind": "functional",
        "grid": [0, 0.5, 1],
        "bandwidth": 0.5,
        "rkhs_radius": 1,
        "epsilon": 1,
        "delta": 1e-7,
    },
    {"name": "t", "kind": "timestamp", "granularity": "1h"},
    {
        "name": "tn",
        "kind": "timestamp",
        "granularity": "1h",
        "epsilon": 1,
        "bounds": TIME_BOUNDS,
        "output": "epoch_s",
    },
]


def config_of(fields: list[dict[str, Any]]) -> AppConfig:
    return parse_config(config_dict(fields, epsilon=30.0, delta=1e-6))


def schema_of(fields: list[dict[str, Any]]) -> dict[str, Any]:
    config = config_of(fields)
    return output_schema(config.fields, build_plan(config))


def types(schema: dict[str, Any]) -> dict[str, Any]:
    return {f["name"]: f["type"] for f in schema["fields"]}


def record(n: int) -> bytes:
    """A raw record of EVERY_KIND; every fourth lacks the nullable and imputed fields."""
    body: dict[str, Any] = {
        "id": n,
        "ts": [n, f"t{n}", n / 3, n % 2 == 0, None][n % 5],
        "r": n % 11,
        "c": "abc"[n % 3],
        "ci": 1 + n % 3,
        "cs": ["x-1", "y 2"][n % 2],
        "cu": "abc"[n % 3],
        "ch": f"user-{n}",
        "s": ["x", "z"][: n % 3],
        "v": [0.1, 0.2, n / 100],
        "f": [0.1, 0.2, 0.3],
        "t": "2026-05-01T10:11:00Z",
        "tn": "2026-05-01T10:11:00Z",
    }
    if n % 4:
        body.update(i=n % 10, cm=[1, "b"][n % 2], b=n % 3 == 0)
    return json.dumps(body).encode()


def sanitized(count: int) -> tuple[list[bytes], AvroEncoder, BatchResult]:
    config = config_of(EVERY_KIND)
    plan = build_plan(config)
    messages = [record(n) for n in range(count)]
    positions = np.arange(count, dtype=np.int64)
    noise = Replayable(NoiseKeys(SECRET, "raw"), np.zeros(count, np.int64), positions, messages)
    result = process_batch(plan, messages, noise)
    assert not result.dead_letters, result.dead_letters[:3]
    encoder = AvroEncoder(2**31 + 9, output_schema(config.fields, plan), hash_report_fields(plan))
    return list(result.outputs), encoder, encoder.encode(result)


def test_every_kind_round_trips_through_its_schema_to_the_json_it_releases() -> None:
    """Each Avro output, read with a reader given the registered text, is the JSON output
    (local-hashing seeds at or above 2**63 included: some must occur, or the test is void)."""
    texts, encoder, result = sanitized(200)
    reader = parse_schema(json.loads(schema_text(encoder.schema)))
    header = b"\x00" + (2**31 + 9).to_bytes(4, "big")
    seeds = []
    for text, value in zip(texts, result.outputs, strict=True):
        assert value[:5] == header
        buffer = io.BytesIO(value[5:])
        read = schemaless_reader(buffer, reader, None)
        assert buffer.read() == b""
        seeds.append(read["ch"]["seed"])
        assert plain(read, ["ch"]) == json.loads(text)
    assert min(seeds) < 0 < max(seeds), "no seed at or above 2**63 was written"


def test_the_schema_follows_the_kinds_and_says_how_each_field_was_released() -> None:
    schema = schema_of(EVERY_KIND)
    by_name = types(schema)
    enum = {"type": "enum", "name": "c_domain", "symbols": ["a", "b", "c"]}
    assert list(by_name) == [f["name"] for f in EVERY_KIND[1:11]] + ["b_present", "s", "v"] + [
        "f",
        "t",
        "tn",
    ]
    assert by_name["ts"] == ["null", "boolean", "long", "double", "string"]
    assert (by_name["r"], by_name["i"], by_name["c"]) == ("double", ["null", "long"], enum)
    assert (by_name["ci"], by_name["cs"], by_name["cm"]) == (
        "long",
        "string",
        ["null", "long", "string"],
    )
    assert by_name["cu"] == {"type": "array", "items": {**enum, "name": "cu_domain"}}
    assert by_name["ch"]["fields"] == [
        {"name": "seed", "type": "long"},
        {"name": "bucket", "type": "long"},
    ]
    assert (by_name["b"], by_name["b_present"]) == ("boolean", "boolean")
    assert by_name["s"]["items"]["symbols"] == ["x", "y", "z"]
    assert by_name["v"] == by_name["f"] == {"type": "array", "items": "double"}
    assert (by_name["t"], by_name["tn"]) == ("string", "long")
    nullable = {f["name"] for f in schema["fields"] if "default" in f}
    assert nullable == {"ts", "i", "cm"}
    doc = json.loads(next(f["doc"] for f in schema["fields"] if f["name"] == "r"))
    assert doc["kind"] == "real" and doc["epsilon"] == 1.0 and len(doc["release_id"]) == 64
    parse_schema(json.loads(schema_text(schema)))  # a schema fastavro (and the registry) takes


def test_one_config_gives_one_byte_string_and_a_release_change_another() -> None:
    assert schema_text(schema_of(EVERY_KIND)) == schema_text(schema_of(EVERY_KIND))
    changed = [dict(f) for f in EVERY_KIND]
    changed[2]["epsilon"] = 2  # ``r``: the same type, another release (its doc says so)
    assert types(schema_of(changed)) == types(schema_of(EVERY_KIND))
    assert schema_text(schema_of(changed)) != schema_text(schema_of(EVERY_KIND))


@pytest.mark.parametrize(
    ("field", "words"),
    [
        ({"name": "heart-rate", "kind": "real", "bounds": [0, 1], "epsilon": 1}, "'heart-rate'"),
        ({"name": "meta", "kind": "public", "allow_nested": True}, "allow_nested"),
    ],
)
def test_a_field_avro_cannot_hold_is_refused_by_name(field: dict[str, Any], words: str) -> None:
    with pytest.raises(OutputSchemaError, match=words) as raised:
        schema_of([field])
    assert "output_format: json" in str(raised.value)


def test_a_record_the_schema_cannot_hold_is_dead_lettered_without_its_value() -> None:
    schema = schema_of([{"name": "n", "kind": "integer", "bounds": [0, 9], "epsilon": 1}])
    encoder = AvroEncoder(1, schema)
    batch = BatchResult(
        outputs=[b'{"n":1}', b'{"n":"secret-text"}', b'{"n":3}'], output_index=[4, 7, 9]
    )
    result = encoder.encode(batch)
    assert result.output_index == [4, 9] and len(result.outputs) == 2
    [dead] = result.dead_letters
    assert (dead.index, dead.reason) == (7, UNENCODABLE)
    assert "secret-text" not in dead.detail


def test_a_public_string_with_a_lone_surrogate_is_dead_lettered_and_a_huge_integer_kept() -> None:
    """JSON output escapes a lone surrogate, Avro's UTF-8 cannot hold one; an integer beyond
    64 bits goes into the union's double (docs/avro.md says it loses digits)."""
    encoder = AvroEncoder(1, schema_of([{"name": "p", "kind": "public"}]))
    batch = BatchResult(
        outputs=[b'{"p":"\\udc80x"}', b'{"p":' + b"9" * 30 + b"}"], output_index=[0, 1]
    )
    result = encoder.encode(batch)
    assert [(d.index, d.reason) for d in result.dead_letters] == [(0, UNENCODABLE)]
    assert result.output_index == [1]
    parsed = parse_schema(encoder.schema)
    assert schemaless_reader(io.BytesIO(result.outputs[0][5:]), parsed, None) == {"p": 1e30}


def test_backward_problems_name_the_fields_that_break_old_records() -> None:
    old = schema_of(EVERY_KIND)
    assert backward_problems(old, old) == []
    widened = [dict(f) for f in EVERY_KIND] + [
        {"name": "extra", "kind": "real", "bounds": [0, 1], "epsilon": 1, "on_missing": "null"}
    ]
    widened[4]["domain"] = ["a", "b", "c", "d"]  # a domain value more reads every old one
    assert backward_problems(old, schema_of(widened)) == []
    broken = [dict(f) for f in EVERY_KIND] + [
        {"name": "extra", "kind": "real", "bounds": [0, 1], "epsilon": 1}
    ]
    broken[4]["domain"] = ["a", "b"]
    broken[2] = {"name": "r", "kind": "categorical", "domain": ["lo", "hi"], "epsilon": 1}
    problems = backward_problems(old, schema_of(broken))
    assert len(problems) == 3, problems
    assert problems[0].startswith("field 'r' was double and is now an enum of ['lo', 'hi']")
    assert problems[1].startswith("field 'c' no longer has the domain values ['c']")
    assert problems[2].startswith("field 'extra' is new and has no default")


def test_a_long_read_as_double_is_no_problem_but_a_double_read_as_long_is() -> None:
    def one(avro: Any) -> dict[str, Any]:
        return {"type": "record", "name": "R", "fields": [{"name": "x", "type": avro}]}

    assert backward_problems(one("long"), one(["null", "double"])) == []
    assert backward_problems(one("double"), one("long")) == ["field 'x' was double and is now long"]
    assert backward_problems(one(["null", "long"]), one("long")) == [
        "field 'x' was null and is now long"
    ]


MIXED: dict[str, Any] = {
    "type": "record",
    "name": "R",
    "fields": [
        {"name": "p", "type": ["null", "boolean", "long", "double", "string"], "default": None},
        {"name": "n", "type": ["null", "long"], "default": None},
        {"name": "l", "type": "long"},
        {"name": "e", "type": {"type": "enum", "name": "E", "symbols": ["a", "b"]}},
        {"name": "a", "type": {"type": "array", "items": "double"}},
    ],
}


def mixed_batch(rng: random.Random, trial: int) -> list[dict[str, Any]]:
    """Columns of one type (the bulk paths) in even trials, of mixed types in odd ones."""
    records = []
    for i in range(rng.randint(1, 30)):
        kind = rng.randrange(6) if trial % 2 else trial % 6
        public = [None, True, rng.randint(-(2**63), 2**63 - 1), rng.random() * 1e6, f"ü{i}"]
        records.append(
            {
                "p": (*public, 2**64 + i)[kind],
                "n": rng.choice([None, rng.randint(-5, 5)]) if trial % 3 else 7,
                "l": rng.randint(-(2**63), 2**63 - 1),
                "e": rng.choice("ab"),
                "a": [rng.random() for _ in range(rng.randrange(3))],
            }
        )
    return records


def test_the_column_writer_writes_what_the_record_writer_does_and_fastavro_reads_it() -> None:
    """200 seeded batches over every branch, long extremes included: the bulk column paths
    agree with the value-by-value writer, and fastavro's reader gets the records back (an
    integer beyond 64 bits as the union's double)."""
    rng, reader = random.Random(3), parse_schema(MIXED)
    write_batch, write_one = batch_writer(MIXED), record_writer(MIXED)
    for trial in range(200):
        records = mixed_batch(rng, trial)
        written = write_batch(records)
        assert written == [write_one(r) for r in records]
        for record, value in zip(records, written, strict=True):
            huge = type(record["p"]) is int and record["p"] >= 2**63
            expected = {**record, "p": float(record["p"]) if huge else record["p"]}
            assert schemaless_reader(io.BytesIO(value), reader, None) == expected
