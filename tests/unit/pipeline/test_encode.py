"""The encoder's forms (``Numbers``, ``Choices``) against ``json.dumps`` and the reference.

``number_pieces`` must give ``prefix + json.dumps(v) + suffix`` for every number it
accepts (put together by ``_columns.assemble``) and refuse (None) what orjson writes
differently; ``encode_records`` must give
the reference's bytes whatever the order of the fields, however finite columns group
and wherever a column falls back to its kind's ``texts``.
"""

from __future__ import annotations

import json
import random
from typing import Any

import numpy as np
import pytest
from privstream.pipeline import _columns
from privstream.pipeline.assemble import (
    COMBINED_TEXTS_MAX,
    _Group,
    _segments,
    number_pieces,
)
from privstream.pipeline.encode import Choices
from privstream.pipeline.handlers import Column
from privstream.pipeline.nesting import key_texts
from privstream.testing import SeededSource

from tests.unit.pipeline.test_fast_path import assert_same, plan_of


def expected(values: list[Any], prefix: bytes, suffix: bytes) -> list[bytes]:
    return [prefix + json.dumps(v).encode() + suffix for v in values]


def number_texts(values: Any, prefix: bytes, suffix: bytes) -> list[bytes] | None:
    """Each number's record text, as ``encode_records`` puts it together."""
    pieces = number_pieces(values, prefix, suffix)
    return None if pieces is None else _columns.assemble(pieces, len(values))


@pytest.mark.parametrize(("prefix", "suffix"), [(b'{"a":', b""), (b',"b":', b"}"), (b"", b"")])
def test_number_texts_match_json_dumps(prefix: bytes, suffix: bytes) -> None:
    rng = np.random.default_rng(12)
    bits = rng.integers(0, 2**64, 50_000, dtype=np.uint64).view(np.float64)
    large = bits[np.isfinite(bits) & ((np.abs(bits) >= 1e-4) | (bits == 0))]
    normals = rng.standard_normal(20_000) * 10.0 ** rng.integers(-3, 20, 20_000)
    normals = normals[np.abs(normals) >= 1e-4]
    edges = np.array([0.0, -0.0, 1e-4, -1e-4, 1e16, 1e15, 1e22, 1.7976931348623157e308, 3.0])
    for floats in (large, normals, edges):
        assert number_texts(floats, prefix, suffix) == expected(floats.tolist(), prefix, suffix)
    ints = np.append(rng.integers(-(2**63), 2**63 - 1, 20_000), [0, -1, 2**63 - 1, -(2**63)])
    assert number_texts(ints, prefix, suffix) == expected(ints.tolist(), prefix, suffix)


def test_number_texts_refuse_what_orjson_writes_differently() -> None:
    """Below 1e-4 orjson writes 0.0000999 (json: 9.99e-05); inf and nan it writes null."""
    for value in (9.99e-5, -1.5e-7, 5e-324, float("inf"), float("nan")):
        assert number_texts(np.array([1.0, value]), b"", b"") is None


def test_a_column_computes_its_values_and_error_once_and_only_when_read() -> None:
    calls: list[str] = []

    def values() -> list[Any]:
        calls.append("values")
        return [1, 2]

    def error() -> Any:
        calls.append("error")
        return np.zeros(2)

    column = Column(values, error)
    assert calls == []
    assert column.values == [1, 2] and column.values == [1, 2]
    assert column.error is not None and column.error.tolist() == [0.0, 0.0]
    assert column.error is column.error
    assert calls == ["values", "error"]
    assert Column([3]).values == [3] and Column([3]).error is None


def categorical(name: str, size: int) -> dict[str, Any]:
    domain = [f"{name}{i}" for i in range(size)]
    # pinned: auto would pick local hashing or unary encoding for the larger domains
    return {
        "name": name,
        "kind": "categorical",
        "domain": domain,
        "epsilon": 1.0,
        "mechanism": "randomized_response",
    }


#: finite columns first, between numbers and last; a real whose releases fall below 1e-4
#: (its kind's texts write it); public integers first and mixed publics last
ORDERS: dict[str, list[dict[str, Any]]] = {
    "finite_first_numbers_last": [
        {"name": "flag", "kind": "boolean", "epsilon": 1.0},
        categorical("a", 48),
        categorical("b", 48),
        categorical("c", 3),
        {"name": "n", "kind": "integer", "bounds": [0, 10], "epsilon": 1.0},
        {"name": "x", "kind": "real", "bounds": [-5, 5], "epsilon": 1.0},
    ],
    "public_ends_finite_between": [
        {"name": "ts", "kind": "public"},
        {"name": "x", "kind": "real", "bounds": [-5, 5], "epsilon": 1.0},
        categorical("a", 2),
        {"name": "flag", "kind": "boolean", "epsilon": 1.0},
        {"name": "tiny", "kind": "real", "bounds": [0, 1e-6], "epsilon": 1.0},
        categorical("c", 5),
        {"name": "pub", "kind": "public"},
    ],
    "hashed_between_finite": [
        categorical("a", 3),
        {"name": "h", "kind": "categorical", "mechanism": "local_hashing", "epsilon": 1.0},
        {"name": "flag", "kind": "boolean", "epsilon": 1.0},
    ],
    "finite_last": [
        {"name": "n", "kind": "integer", "bounds": [-100, 100], "epsilon": 0.5},
        categorical("a", 3),
        {"name": "flag", "kind": "boolean", "epsilon": 1.0},
    ],
}


def record(rng: random.Random, i: int, fields: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for spec in fields:
        name, kind = spec["name"], spec["kind"]
        if kind == "categorical":
            out[name] = rng.choice(spec.get("domain", ["x", "y", "é"]))
        elif kind == "boolean":
            out[name] = rng.random() < 0.5
        elif kind == "integer":
            out[name] = rng.randint(-200, 200)
        elif kind == "real":
            out[name] = rng.uniform(-8, 8)
        elif name == "ts":  # integers, one beyond 64 bits now and then (texts write them)
            out[name] = 2**70 + i if i % 97 == 0 else 1_718_000_000_000 + i
        else:
            out[name] = rng.choice([i, "é", None, True, 1.5, [1, {"a": 2}]])
    return out


@pytest.mark.parametrize("order", list(ORDERS))
def test_every_field_order_gives_the_reference_bytes(order: str) -> None:
    fields = ORDERS[order]
    rng = random.Random(len(order))
    messages = [json.dumps(record(rng, i, fields)).encode() for i in range(1_500)]
    result = assert_same(plan_of(fields), messages)
    # the only records refused: a public array or object (nested_public)
    assert {dead.reason for dead in result.dead_letters} <= {"nested_public"}
    assert len(result.outputs) > len(messages) // 2
    if order == "public_ends_finite_between":  # the tiny real went through its kind's texts
        assert any(b"e-0" in out.split(b'"tiny":')[1] for out in result.outputs)


def test_consecutive_finite_columns_share_a_table_up_to_its_bound() -> None:
    """boolean (2) x 48 = 96 entries, x 48 = 4,608 > the bound: a new table; x 3 joins it."""
    plan = plan_of(ORDERS["finite_first_numbers_last"])
    rng = random.Random(4)
    raw = [record(rng, i, ORDERS["finite_first_numbers_last"]) for i in range(50)]
    columns = [
        planned.handler.release(
            [planned.handler.parse(row[planned.name]) for row in raw], SeededSource(1)
        )
        for planned in plan.fields
    ]
    paths = [(planned.name,) for planned in plan.fields]
    groups = [
        [type(c).__name__ for _, c in part.columns]
        for _, part in _segments(plan.fields, columns, key_texts(paths, range(len(paths))))
        if isinstance(part, _Group)
    ]
    assert groups == [["Choices", "Choices"], ["Choices", "Choices"]]
    assert 2 * 48 <= COMBINED_TEXTS_MAX < 2 * 48 * 48
    assert all(isinstance(c.encoded, Choices) for c in columns[:4])


def test_number_texts_leave_other_dtypes_to_the_kinds_texts() -> None:
    """float32 0.1 is written 0.1 by orjson, 0.10000000149011612 by json.dumps of its value."""
    assert number_texts(np.array([0.1, 2.0], dtype=np.float32), b"", b"") is None
    assert number_texts(np.array([1, 2], dtype=np.int32), b"", b"") is None
