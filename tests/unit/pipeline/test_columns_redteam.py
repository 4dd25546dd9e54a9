"""Red team of the C fast path (``_columns.c``): hostile batches against the reference.

Hostile writers control the raw records. Whatever they send, ``process_batch`` and
``process_block`` (file mode) must give the very bytes, positions and dead-letter
reasons of ``process_batch_reference`` (stdlib JSON, one record at a time) for the
same noise. The existing comparisons (``test_fast_path``) mostly put one odd value in
a batch of good records, where the C reader steps aside for the whole column; here
whole batches share the odd value (the C reader then answers for the column), keys are
spelled with escapes or repeated, and records are not objects.
"""

from __future__ import annotations

import json
import random
import sys
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from privstream.pipeline import _columns
from privstream.pipeline.batch import process_batch, process_block
from privstream.pipeline.columns import (
    boolean_column,
    categorical_column,
    direct_column,
    integer_column,
    public_column,
    real_column,
)
from privstream.pipeline.reference import process_batch_reference

from tests.unit.pipeline.test_fast_path import (
    MIXED,
    STRUCTURED,
    STRUCTURED_EDGES,
    assert_same,
    good_structured,
    noise,
    plan_of,
)

#: raw JSON texts of values a hostile writer may send for any field
HOSTILE = [
    "0", "-0", "-0.0", "0.0", "1", "1.0", "3.0", "2.5", "-7", "1E2", "1e+2", "-1e-7",
    "1e308", "-1e308", "1.7976931348623157e308", "5e-324", "1e-400", "-1e-400",
    "9007199254740993", "9007199254740993.0", "9223372036854775807", "9223372036854775808",
    "-9223372036854775808", "-9223372036854775809", "18446744073709551615",
    "18446744073709551616", "1" + "0" * 30, "-1" + "0" * 30, "1e19",
    "true", "false", "null", '"a"', '"b"', '"u"', '"\\u0061"', '"a\\u0000"', '"\\u00e9"',
    '"' + "a" * 5000 + '"', "[]", "{}", '{"a":1}', "[1.0]", '["a"]', "[true]",
]  # fmt: skip
#: the fields of ``MIXED`` the C reader can answer for, each with values it releases
GOOD = {
    "pub": ["1", '"p"', "null"],
    "x": ["0.5", "-8", "3"],
    "n": ["0", "5", "-3", "14"],
    "lvl": ["1", "2", "3", "9"],
    "s": ['"a"', '"b"', '"\\u0062"'],
    "m": ['"u"', '"v"', '"w"'],
    "b": ["true", "false"],
}
NAMES = list(GOOD)
FAST = settings(max_examples=200, deadline=None, derandomize=True)


def _key(name: str, escaped: bool) -> str:
    """The key's JSON text, each character as a ``\\u`` escape where ``escaped``."""
    return '"' + "".join(f"\\u{ord(c):04x}" for c in name) + '"' if escaped else json.dumps(name)


#: how a record's field is written: hypothesis favours a list's first items, so the
#: common case comes first (``sampled_from`` picks each with its share otherwise)
WRITES = ["common"] * 12 + ["missing", "escaped key", "repeated", "other hostile"]


@st.composite
def hostile_batches(draw: st.DrawFn) -> list[bytes]:
    """Batches in which each field is mostly one value for every record: a hostile one
    for about a quarter of the fields, one the field releases for the others (so records
    with hostile values the C reader takes are released, not only dead-lettered)."""
    count = draw(st.integers(1, 12))
    common = {
        name: draw(st.sampled_from(GOOD[name] if draw(st.sampled_from([1, 1, 1, 0])) else HOSTILE))
        for name in NAMES
    }
    messages: list[bytes] = []
    for i in range(count):
        if draw(st.sampled_from([False] * 19 + [True])):  # not an object
            messages.append(draw(st.sampled_from([b"[]", b"1", b"null", b'"x"', b"[{}]"])))
            continue
        pairs = [('"id"', str(i))]
        for name in NAMES:
            write = draw(st.sampled_from(WRITES))
            if write == "missing":
                continue
            text = common[name] if write != "other hostile" else draw(st.sampled_from(HOSTILE))
            key = _key(name, write == "escaped key")
            if write == "repeated":  # the last one counts, for both decoders
                pairs.append((key, draw(st.sampled_from(HOSTILE))))
            pairs.append((key, text))
        messages.append(("{" + ",".join(f"{k}:{v}" for k, v in pairs) + "}").encode())
    return messages


def _same_block(messages: list[bytes], fields: list[dict[str, Any]]) -> int:
    """The fast path's and file mode's results are the reference's; the outputs' count."""
    plan = plan_of(fields)
    apart = assert_same(plan, messages)
    joined = process_block(plan, messages, noise(messages))
    assert joined.joined == b"".join(out + b"\n" for out in apart.outputs)
    assert joined.output_index == apart.output_index
    assert joined.dead_letters == apart.dead_letters
    return len(apart.outputs)


@FAST
@given(hostile_batches())
def test_hostile_batches_give_the_reference_bytes(messages: list[bytes]) -> None:
    _same_block(messages, MIXED)


@pytest.mark.parametrize("text", HOSTILE)
def test_a_field_all_of_one_hostile_value_gives_the_reference_bytes(text: str) -> None:
    """One field the same hostile value in every record, the others values they release:
    the C reader answers for that column wherever it takes the value, and the records
    are released when the reference releases them (46 values x 7 fields x 2 plans)."""
    released = 0
    for name in NAMES:
        values = {other: GOOD[other][0] for other in NAMES} | {name: text}
        body = ",".join(f"{json.dumps(k)}:{v}" for k, v in values.items())
        messages = [f'{{"id":{i},{body}}}'.encode() for i in range(5)]
        released += _same_block(messages, MIXED)
        released += _same_block(messages, MIXED[:-1])
    # not only dead letters: the plan without b releases the records whose b is hostile
    assert released >= 5


def test_structured_kinds_in_file_mode_give_the_reference_bytes() -> None:
    """Vectors, functions, sets, local hashing (pieces of every form ``assemble`` takes)
    with their edge values, in one block and one record a block."""
    rng = random.Random(31)
    messages = [json.dumps(good_structured(rng, i)).encode() for i in range(100)]
    for i, (name, text) in enumerate(STRUCTURED_EDGES):
        record = good_structured(rng, i)
        pairs = [(k, text if k == name else json.dumps(v)) for k, v in record.items()]
        messages.insert(
            3 * i, ("{" + ",".join(f"{json.dumps(k)}:{v}" for k, v in pairs) + "}").encode()
        )
    plan = plan_of(STRUCTURED)
    released = 0
    for batch in [messages, *([m] for m in messages[: 3 * len(STRUCTURED_EDGES)])]:
        reference = process_batch_reference(plan, batch, noise(batch))
        block = process_block(plan, batch, noise(batch))
        assert block.joined == b"".join(out + b"\n" for out in reference.outputs)
        assert block.output_index == reference.output_index
        assert block.dead_letters == reference.dead_letters
        released += len(reference.outputs)
    assert released > 100


#: (parser, what the field needs) for ``direct_column``
PARSERS = [
    (real_column, "x"),
    (integer_column, "n"),
    (public_column, "pub"),
    (boolean_column, "b"),
    (categorical_column, "s"),
]


@pytest.mark.parametrize(("parser", "name"), PARSERS, ids=[n for _, n in PARSERS])
@pytest.mark.parametrize("text", HOSTILE)
def test_direct_column_on_a_uniform_hostile_column_is_the_parser(
    parser: Any, name: str, text: str
) -> None:
    """A column all of one orjson-decoded hostile value: the C reader's array is the
    parser's own, or it steps aside; never a value the parser would reject."""
    import orjson

    handler = next(f.handler for f in plan_of(MIXED).fields if f.name == name)
    records = [{name: orjson.loads(text)} for _ in range(3)]
    direct = direct_column(parser, handler, records, name)
    if direct is None:
        return
    expected, rejected = parser(handler, [r[name] for r in records])
    assert rejected == []
    assert direct.tobytes() == np.asarray(expected).tobytes()


def test_fill_float_from_int_is_correctly_rounded() -> None:
    """``float(int)`` rounds half to even; the C reader must too (PyLong_AsDouble), at the
    ties just above 2**53 and at the top of the double range."""
    ints = [2**53 + 1, 2**53 + 3, 2**54 + 2, 2**64 - 1, -(2**63) - 1, 2**63 + 2**10,
            2**63 + 2**10 + 1, 10**30, -(10**30), (2**53 - 1) * 2**971]  # fmt: skip
    out = np.empty(len(ints), dtype=np.float64)
    assert _columns.fill([{"v": v} for v in ints], "v", _columns.FLOAT, out, None)
    assert out.tolist() == [float(v) for v in ints]
    # beyond a double: the reader steps aside (no exception, no garbage taken)
    assert not _columns.fill([{"v": 2**1024}], "v", _columns.FLOAT, out[:1], None)


class Str(str):
    """A str subclass whose hash runs Python code (never from orjson)."""

    def __hash__(self) -> int:
        return hash(str(self))


def test_fill_does_not_take_subclasses_or_odd_table_values() -> None:
    out = np.empty(1, dtype=np.int64)
    assert not _columns.fill([{"v": Str("a")}], "v", _columns.INT64, out, None)
    # a table whose value is not an exact int (bool, float): the parser decides
    for odd in (True, 1.0, None, "0"):
        assert not _columns.fill([{"v": "a"}], "v", _columns.POSITION, out, {"a": odd})
    # the lookup is table.get's: 1 finds the position of True's equal, as the parser would
    assert _columns.fill([{"v": True}], "v", _columns.POSITION, out, {1: 4})
    assert out.tolist() == [{1: 4}.get(True)]


def test_fill_does_not_leak_or_drop_references() -> None:
    """Borrowed references stay borrowed: each value's count is the same after."""
    values = [10**30, 2**63 + 5, 1.5e300, "zz" * 50, True]
    table = {"zz" * 50: 1}
    records = [{"v": v} for v in values]
    before = [sys.getrefcount(v) for v in values]
    out = np.empty(len(values), dtype=np.int64)
    floats = np.empty(len(values), dtype=np.float64)
    for _ in range(100):
        for kind in (_columns.INT64, _columns.BOOL, _columns.POSITION):
            _columns.fill(records, "v", kind, out, table)
        _columns.fill(records, "v", _columns.FLOAT, floats, None)
        for one in range(len(values)):
            _columns.fill(records[one : one + 1], "v", _columns.POSITION, out[:1], table)
            _columns.fill(records[one : one + 1], "v", _columns.FLOAT, floats[:1], None)
    assert [sys.getrefcount(v) for v in values] == before


def test_a_failed_fill_releases_its_buffer() -> None:
    """An error inside the loop (a record not a dict) releases the output's buffer: the
    array can be resized after, which numpy refuses while a buffer export is alive."""
    out = np.empty(2, dtype=np.int64)
    with pytest.raises(TypeError, match="not a dict"):
        _columns.fill([{"v": 1}, 2], "v", _columns.INT64, out, None)
    out.resize(3, refcheck=False)  # BufferError if the export leaked
    assert out.shape == (3,)


@pytest.mark.parametrize(
    ("parts", "count"),
    [
        ([b"x"], 2**61),  # 8 * (count + 1) wraps to 8 bytes
        ([(b"1",)] * 4, 2**61),  # splits * (count + 1) wraps
        ([b"x", [b"a"] * 3], 2**61),  # a list of another length: refused first or not
    ],
)
def test_assemble_refuses_counts_whose_sizes_overflow(parts: list[Any], count: int) -> None:
    """Sizes computed from ``count`` must not wrap into a small allocation and a heap write
    past it; a MemoryError or ValueError and nothing returned instead."""
    with pytest.raises((MemoryError, ValueError)):
        _columns.assemble(parts, count, True)
    with pytest.raises((MemoryError, ValueError)):
        _columns.assemble(parts, count)


def test_reference_and_fast_agree_on_an_empty_block() -> None:
    plan = plan_of(MIXED)
    assert process_block(plan, [], noise([])).joined == b""
    assert process_batch(plan, [], noise([])).outputs == []
    assert process_batch_reference(plan, [], noise([])).outputs == []


def assemble_model(parts: list[Any], count: int) -> list[bytes] | None:
    """What ``assemble`` must give, in Python; None where it must refuse (ValueError)."""
    rows: list[list[bytes]] = []
    for part in parts:
        if type(part) is bytes:
            rows.append([part] * count)
        elif type(part) is list and len(part) == count and all(type(t) is bytes for t in part):
            rows.append(part)
        elif type(part) is tuple and len(part) == 1 and type(part[0]) is bytes:
            texts = part[0].split(b",") if count else ([] if part[0] == b"" else [b""])
            if len(texts) != count:
                return None
            rows.append(texts)
        else:
            return None
    return [b"".join(row) for row in zip(*rows, strict=True)] if rows else [b""] * count


TEXT = st.binary(max_size=6) | st.sampled_from([b",", b",,", b"1,2", b"\n", b"\x00", b"-0.0"])


@st.composite
def assemble_parts(draw: st.DrawFn) -> tuple[list[Any], int]:
    count = draw(st.integers(0, 5))
    parts: list[Any] = []
    for _ in range(draw(st.integers(0, 5))):
        form = draw(st.integers(0, 5))
        if form == 0:
            parts.append(draw(TEXT))
        elif form == 1:  # mostly the right length, sometimes not
            size = count if draw(st.booleans()) else draw(st.integers(0, 6))
            parts.append([draw(TEXT) for _ in range(size)])
        elif form == 2:  # numbers joined by commas, sometimes one too many or too few
            size = max(0, count + draw(st.sampled_from([0, 0, 0, -1, 1])))
            parts.append((b",".join(str(draw(st.integers())).encode() for _ in range(size)),))
        elif form == 3:
            parts.append((draw(TEXT),))
        elif form == 4:  # not a piece at all
            parts.append(draw(st.sampled_from([bytearray(b"a"), "a", (b"a", b"b"), (), None])))
        else:
            parts.append([draw(TEXT) for _ in range(count - 1)] + ["s"] if count else [1])
    return parts, count


@FAST
@given(assemble_parts())
def test_assemble_is_its_python_model_or_refuses(case: tuple[list[Any], int]) -> None:
    """Each record's text (and the joined text) as the Python model gives it, or a
    ValueError where the model refuses; never a text from pieces that do not fit."""
    parts, count = case
    expected = assemble_model(parts, count)
    if expected is None:
        with pytest.raises(ValueError, match="assemble"):
            _columns.assemble(parts, count)
        with pytest.raises(ValueError, match="assemble"):
            _columns.assemble(parts, count, True)
        return
    assert _columns.assemble(parts, count) == expected
    assert _columns.assemble(parts, count, True) == b"".join(t + b"\n" for t in expected)


def test_assemble_only_and_longest_keep_reference_counts() -> None:
    shared = b"shared-constant-piece"
    texts = [b"t%d" % i for i in range(4)]
    body = b"1,2,3,4"
    parts: list[Any] = [shared, texts, (body,)]
    watched = [shared, body, parts[2], *texts]
    before = [sys.getrefcount(v) for v in watched]
    for _ in range(200):
        _columns.assemble(parts, 4)
        _columns.assemble(parts, 4, True)
        with pytest.raises(ValueError):
            _columns.assemble([*parts, [b"x"]], 4)
        _columns.only(texts, (bytes,))
        _columns.longest(texts)
    assert [sys.getrefcount(v) for v in watched] == before
    records = _columns.assemble(parts, 4)
    fresh = [bytes(bytearray(b"fresh"))]  # a new bytes held by its list alone
    assert [sys.getrefcount(r) for r in records] == [sys.getrefcount(r) for r in fresh] * 4


def test_error_paths_free_what_they_allocated() -> None:
    """Every refusal of ``assemble`` and ``fill`` frees its buffers (PyMem, which
    tracemalloc sees): 2,000 rounds of every error path grow the heap by less than one
    leaked 16-byte block a round would (32 kB)."""
    import tracemalloc

    refused: list[tuple[list[Any], int]] = [
        ([b"a", [b"x"]], 2),  # a list of another length
        ([b"a", (b"1,2,3",)], 2),  # a split part of three texts
        ([(b"1,2",), None], 2),  # not a piece, after a split part
        ([b"x"], 2**61),  # a count too large for its arrays
    ]
    out = np.empty(2, dtype=np.int64)

    def rounds(count: int) -> int:
        """The refusals seen (pytest.raises keeps memory of its own: plain except)."""
        seen = 0
        for _ in range(count):
            for parts, size in refused:
                for joined in (False, True):
                    try:
                        _columns.assemble(parts, size, joined)
                    except (ValueError, MemoryError):
                        seen += 1
            try:
                _columns.fill([{"v": 1}, 3], "v", _columns.INT64, out, None)
            except TypeError:
                seen += 1
        return seen

    rounds(10)  # caches warmed
    tracemalloc.start()
    try:
        before = tracemalloc.take_snapshot()
        seen = rounds(2_000)
        grown = sum(s.size_diff for s in tracemalloc.take_snapshot().compare_to(before, "lineno"))
    finally:
        tracemalloc.stop()
    assert seen == 2_000 * 9
    assert grown < 32_000
