"""``direct_column`` (the C column reader, ``_columns.c``) gives the parsers' own arrays.

Where it answers, it must give exactly what the field's column parser gives for the
raw column, with no row left to the reference; where any record is not of the common
kind (a missing field, another type, bool for a number, a category outside the domain,
an integer beyond int64) it must step aside (None) for the parser to decide.
"""

from __future__ import annotations

import json
import random
from typing import Any

import numpy as np
import pytest
from privstream.pipeline import _columns
from privstream.pipeline.batch import _column, process_batch, process_block
from privstream.pipeline.columns import direct_column
from privstream.testing import SeededSource

from tests.unit.pipeline.test_fast_path import MIXED, edge_messages, good_mixed, plan_of

#: values of every JSON type orjson gives, and the edges of each kind
POOL: list[Any] = [
    0, 1, -1, 7, 2**53 + 1, 2**63 - 1, -(2**63), 2**63, 2**64 - 1, -(2**63) - 1,
    0.0, -0.0, 1.5, -2.25, 1e300, 5e-324, 2.0**63,
    True, False, None, "a", "b", "u", "zz", "", [], [1], {}, {"a": 1},
]  # fmt: skip


class Flt(float):
    """A float subclass: never a JSON value, never taken by the C reader."""


def _records(values: list[Any], name: str, drop: set[int] = frozenset()) -> list[dict[str, Any]]:
    return [{"id": i} if i in drop else {"id": i, name: v} for i, v in enumerate(values)]


@pytest.mark.parametrize("field", [f["name"] for f in MIXED if f["kind"] != "drop"])
def test_direct_columns_are_the_parsers_columns(field: str) -> None:
    """Random columns from the pool, and columns of one common value kind: 6,000 cases."""
    plan = plan_of(MIXED)
    planned = next(f for f in plan.fields if f.name == field)
    parser, handler = planned.codec.column, planned.handler
    rng = random.Random(field)
    answered = 0
    for case in range(3_000):
        size = rng.randint(1, 6)
        if case % 2:  # one kind of value, as most batches are
            kind = rng.choice([int, float, bool, str])
            pick = [v for v in POOL if type(v) is kind]
            values = [rng.choice(pick) for _ in range(size)]
        else:
            values = [rng.choice(POOL) for _ in range(size)]
        drop = {p for p in range(size) if rng.random() < 0.05}
        records = _records(values, field, drop)
        direct = direct_column(parser, handler, records, field)
        expected, rejected = parser(handler, _column(records, field))
        if direct is None:
            continue
        answered += 1
        assert rejected == [], (values, drop)
        assert isinstance(expected, np.ndarray), values
        assert direct.dtype == expected.dtype
        assert direct.tobytes() == expected.tobytes(), values  # -0.0 and 0.0 differ
    if field not in ("m", "lvl"):  # memoized and unknown_as: always the parser
        assert answered > 50  # the comparison is not vacuous


def test_fill_takes_exact_types_only() -> None:
    floats = np.empty(3, dtype=np.float64)
    assert _columns.fill([{"x": 1.5}, {"x": 2}, {"x": 2**63}], "x", _columns.FLOAT, floats, None)
    assert floats.tolist() == [1.5, 2.0, float(2**63)]
    for bad in (True, "1.5", None, Flt(1.5), [1.0]):
        assert not _columns.fill([{"x": 1.0}, {"x": bad}], "x", _columns.FLOAT, floats[:2], None)
    ints = np.empty(2, dtype=np.int64)
    assert _columns.fill([{"x": -(2**63)}, {"x": 2**63 - 1}], "x", _columns.INT64, ints, None)
    assert ints.tolist() == [-(2**63), 2**63 - 1]
    for bad in (2**63, -(2**63) - 1, 1.0, False):
        assert not _columns.fill([{"x": 1}, {"x": bad}], "x", _columns.INT64, ints, None)
    assert _columns.fill([{"x": True}, {"x": False}], "x", _columns.BOOL, ints, None)
    assert ints.tolist() == [1, 0]
    assert not _columns.fill([{"x": True}, {"x": 1}], "x", _columns.BOOL, ints, None)
    table = {"a": 0, "b": 1}
    assert _columns.fill([{"x": "b"}, {"x": "a"}], "x", _columns.POSITION, ints, table)
    assert ints.tolist() == [1, 0]
    for bad in ("c", 0, True, [], {}):  # absent or unhashable: no exception, the parser decides
        assert not _columns.fill([{"x": "a"}, {"x": bad}], "x", _columns.POSITION, ints, table)
    assert not _columns.fill([{"x": 1.0}, {"y": 2.0}], "x", _columns.FLOAT, floats[:2], None)
    assert _columns.fill([], "x", _columns.FLOAT, floats[:0], None)


def test_fill_refuses_a_wrong_output_or_record() -> None:
    records = [{"x": 1}, {"x": 2}]
    with pytest.raises(ValueError, match="int64s"):
        _columns.fill(records, "x", _columns.INT64, np.empty(2, dtype=np.float64), None)
    with pytest.raises(ValueError, match="float64s"):
        _columns.fill(records, "x", _columns.FLOAT, np.empty(2, dtype=np.int64), None)
    with pytest.raises(ValueError, match="one per record"):
        _columns.fill(records, "x", _columns.INT64, np.empty(3, dtype=np.int64), None)
    with pytest.raises(ValueError, match="int64s"):
        _columns.fill(records, "x", _columns.INT64, np.empty(4, dtype=np.int32), None)
    with pytest.raises(TypeError, match="not a dict"):
        _columns.fill([{"x": 1}, [1]], "x", _columns.INT64, np.empty(2, dtype=np.int64), None)
    with pytest.raises(TypeError, match="dict table"):
        _columns.fill(records, "x", _columns.POSITION, np.empty(2, dtype=np.int64), None)
    with pytest.raises(ValueError, match="unknown kind"):
        _columns.fill(records, "x", 9, np.empty(2, dtype=np.int64), None)
    with pytest.raises(ValueError, match="one per record"):  # a strided view is not C-contiguous
        _columns.fill(records, "x", _columns.INT64, np.empty(4, dtype=np.int64)[::2][:1], None)


def test_assemble_joins_each_records_pieces() -> None:
    rng = random.Random(17)
    for _ in range(300):
        count = rng.randint(1, 5)
        parts: list[Any] = []
        pieces: list[list[bytes]] = []
        for _ in range(rng.randint(1, 6)):
            form = rng.randrange(3)
            texts = [
                rng.choice([b"", b"1", b"-2.5", b'"a\\u00e9"', b"x" * 40]) for _ in range(count)
            ]
            if form == 0:
                parts.append(texts[0])
                pieces.append([texts[0]] * count)
            elif form == 1:
                parts.append(texts)
                pieces.append(texts)
            else:  # numbers hold no comma
                numbers = [str(rng.randint(-999, 999)).encode() for _ in range(count)]
                parts.append((b",".join(numbers),))
                pieces.append(numbers)
        assert _columns.assemble(parts, count) == [
            b"".join(row) for row in zip(*pieces, strict=True)
        ]
    assert _columns.assemble([b"{}"], 0) == []
    assert _columns.assemble([(b"",)], 0) == []
    assert _columns.assemble([(b"",)], 0, True) == b""


@pytest.mark.parametrize(
    "parts",
    [
        [[b"a"]],  # one text for two records
        [[b"a", "b"]],  # not bytes
        [(b"1,2,3",)],  # three numbers for two records
        [(b"1",)],  # one number for two records
        [(b"1,2", b"3")],  # not a 1-tuple
        [bytearray(b"a")],  # not bytes
        [(b"1,2,",)],  # a trailing comma: three texts
    ],
)
def test_assemble_refuses_pieces_that_do_not_fit(parts: list[Any]) -> None:
    with pytest.raises(ValueError, match="assemble"):
        _columns.assemble(parts, 2)


def test_longest_is_the_longest_bytes_message_or_minus_one() -> None:
    assert _columns.longest([]) == 0
    assert _columns.longest([b"", b"abc", b"ab"]) == 3
    assert _columns.longest((b"x" * 500, b"")) == 500
    for odd in (bytearray(b"abcd"), "abcd", None, memoryview(b"abcd")):
        assert _columns.longest([b"a", odd]) == -1
    with pytest.raises(TypeError, match="sequence"):
        _columns.longest(3)


@pytest.mark.parametrize("fields", [MIXED, MIXED[:2], MIXED[:3]], ids=["mixed", "public", "real"])
def test_a_joined_batch_is_its_outputs_each_with_a_newline(fields: list[dict[str, Any]]) -> None:
    """``process_block`` (file mode): ``process_batch``'s records, indices, dead letters and
    observations, the outputs as one text."""
    plan = plan_of(fields)
    rng = random.Random(23)
    messages = [json.dumps(good_mixed(rng, i)).encode() for i in range(300)]
    messages += edge_messages()
    rng.shuffle(messages)
    for batch in (messages, messages[:1], [], [b"{"]):
        apart = process_batch(plan, batch, SeededSource(4))
        joined = process_block(plan, batch, SeededSource(4))
        assert joined.outputs == []
        assert joined.joined == b"".join(out + b"\n" for out in apart.outputs)
        assert joined.output_index == apart.output_index
        assert joined.dead_letters == apart.dead_letters
        assert joined.observations == apart.observations
