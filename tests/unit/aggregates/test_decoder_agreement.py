"""File mode's two decoders on hostile number tokens: wherever ``_bounds.may_disagree``
lets a line through to msgspec (``field_structs``), msgspec accepts it exactly when orjson
does and reads the same value (type, sign of zero and all), in a field the aggregates
read, in one they skip, and inside an array (docs/proofs/aggregates.md step 1).

Tokens: signs, leading zeros, integer and fraction parts of 0 to 25 digits, exponents of
1 to 5 digits with and without signs, the edges of int64, uint64 and the doubles, and
the reprs of random doubles (subnormals and the largest included). Deterministic:
hypothesis derandomized, the loop's seed fixed; nothing here is statistical.
"""

from __future__ import annotations

import random

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st
from privstream.aggregates import _bounds, build_aggregates
from privstream.aggregates.windows import encode_partial
from privstream.cli.aggregates_file import FileAggregates
from privstream.pipeline import _columns
from privstream.pipeline.decode import field_structs, reader

from tests.support.aggregates import aggregates_config

#: the edges where a reading may change: int64, uint64, the largest and smallest doubles
EDGES = [
    b"9223372036854775807",
    b"-9223372036854775808",
    b"-9223372036854775809",
    b"18446744073709551615",
    b"18446744073709551616",
    b"1.7976931348623157e308",
    b"1.7976931348623159e308",
    b"4.9e-324",
    b"2.4e-324",
    b"2.2250738585072014e-308",
    b"-0",
    b"-0.0",
    b"0e0",
    b"999999999999999999",
    b"-999999999999999999e99",
    b"0.000000000000000001e-99",
    b"1e99",
    b"1E+99",
    b"1e-99",
]


def _digits(rng: random.Random, most: int) -> bytes:
    return bytes(rng.choice(b"0123456789") for _ in range(rng.randrange(1, most + 1)))


def _token(rng: random.Random) -> bytes:
    """A JSON number (or near one: ``1.``, ``01`` are refused by both)."""
    size = rng.choice([3, 8, 18, 19, 25])
    token = rng.choice([b"", b"-"]) + rng.choice([b"0", _digits(rng, size)])
    if rng.random() < 0.5:
        token += b"." + _digits(rng, rng.choice([3, 8, 18, 25]))
    if rng.random() < 0.6:
        token += rng.choice(b"eE").to_bytes(1, "big") + rng.choice([b"", b"+", b"-"])
        token += _digits(rng, rng.choice([2, 3, 5]))
    return token


def _read(line: bytes) -> tuple[str, str] | None:
    """orjson's reading of field ``a`` (its type and repr), None where it refuses."""
    try:
        value = orjson.loads(line)["a"]
    except orjson.JSONDecodeError:
        return None
    return type(value).__name__, repr(value)


def _fast(line: bytes) -> tuple[str, str] | None:
    """msgspec's reading of field ``a`` (``field_structs``), None where it refuses."""
    structs = field_structs([line], ("a",))
    if structs is None:
        return None
    value = _columns.column(structs, reader(structs, "a"), None)[0]
    return type(value).__name__, repr(value)


def _check(token: bytes) -> bool:
    """Both decoders agree on every line of the token msgspec would decode; whether the
    token was let through to msgspec at all."""
    lines = [b'{"a": %s}' % token, b'{"a": 1, "o": %s}' % token, b'{"a": [%s]}' % token]
    unsure = _bounds.may_disagree(lines)
    for index, line in enumerate(lines):
        if index not in unsure:
            assert _fast(line) == _read(line), line
    return not unsure


def _check_line(line: bytes) -> bool:
    """Both decoders agree on the line, unless the guard names it."""
    if _bounds.may_disagree([line]):
        return False
    assert _fast(line) == _read(line), line
    return True


def test_the_edges() -> None:
    let_through = [token for token in EDGES if _check(token)]
    assert b"-9223372036854775808" not in let_through  # 19 digits: orjson alone
    assert b"-999999999999999999e99" in let_through  # 18 and 2: both, and they agree


#: the proof's premise past numbers: the same syntax checked, skipped members included,
#: strings and keys read alike (duplicates, escapes, surrogates)
SYNTAX = [
    b'{"a": 1, "a": 2}',
    b'{"\\u0061": 3}',
    b'{"a": 1} x',
    b'\xef\xbb\xbf{"a": 1}',
    b'{"a": 1,}',
    b'{"a": 1, "o": [1,]}',
    b'{"a": 1, "o": {"x": 1,}}',
    b'{"a":\x0c1}',
    b'{"a": 1}\x00',
    b'{"a": 1, "o": "\\u00"}',
    b'{"a": 1, "o": tru}',
    b'{"a": 1, "o": 1.e5}',
    b'{"a": 1, "o": 0x10}',
    b'{"a": 1, "o": NaN}',
    b'{"a": 1, "o": "\\ud800"}',
    b'{"a": 1, "o": "\\ud800\\udc00"}',
    b'{"a": 1, "o": "\\udc00\\ud800"}',
    b'{"a": 1, "\\ud800": 1}',
    b'{"a": 1, "o": "a\x01b"}',
    b'{"a": 1 "o": 1}',
]


def test_the_syntax_both_check() -> None:
    assert all(_check_line(line) for line in SYNTAX)


def test_random_tokens_with_a_fixed_seed() -> None:
    """20,000 tokens; a fair share reaches msgspec (else the test would test nothing)."""
    rng = random.Random(15)
    passed = sum(_check(_token(rng)) for _ in range(20_000))
    assert passed > 5_000


@settings(max_examples=400, deadline=None, derandomize=True)
@given(st.floats(allow_nan=False, allow_infinity=False), st.sampled_from(["", "e0", "0e-2"]))
def test_the_reprs_of_doubles(value: float, tail: str) -> None:
    """A double's shortest repr (``1e-05``, ``5e-324``) and forms of it with more digits."""
    text = repr(value)
    _check((text + tail if "e" not in text else text).encode())


#: a histogram bounded to one record a subject, and a bounded mean: a record's fate and
#: its value both show in the partials
LINE_AGGREGATES = [
    {
        "name": "h",
        "epsilon": 1.0,
        "query": "histogram",
        "field": "os",
        "contribution": {"records_per_group": 1, "groups_per_subject": 1},
    },
    {
        "name": "m",
        "epsilon": 1.0,
        "query": "mean",
        "field": "latency",
        "bounds": [0, 100],
        "contribution": {"records_per_group": 2, "groups_per_subject": 1},
    },
]
#: lines each decoder may treat otherwise, or refuse: long numbers read or skipped, a
#: number past the doubles, invalid UTF-8, deep nesting, NaN, a non-object, plain lines
HOSTILE = [
    b'{"user": "a", "os": "ios", "latency": 5}',
    b'{"user": "b", "os": "web", "latency": 7.5, "o": 1e999}',
    b'{"user": "c", "os": "ios", "latency": -9223372036854775809}',
    b'{"user": -9223372036854775809, "os": "web", "latency": 1}',
    b'{"user": 18446744073709551616, "os": "android", "latency": 2}',
    b'{"user": "d", "os": "ios", "latency": 1e-400}',
    b'{"user": "e", "os": "ios", "latency": 12345678901.23456789}',
    b'{"user": "f", "os": "web", "phone": "00441234567890123456"}',
    b'{"user": "g", "os": "web", "o": "\xff"}',
    b'{"user": "h", "os": "ios", "o": %s}' % (b"[" * 600 + b"]" * 600),
    b'{"user": "i", "os": "ios", "latency": NaN}',
    b"[1, 2]",
    b'{"user": "a", "os": "web", "latency": 99}',
]


def _partials(chunks: list[list[bytes]]) -> list[bytes]:
    batched = FileAggregates(build_aggregates(aggregates_config(*LINE_AGGREGATES, subject="user")))
    for chunk in chunks:
        batched.feed(chunk, range(len(chunk)))
    return [encode_partial(accumulator.partial()) for accumulator in batched._accumulators]


@settings(max_examples=100, deadline=None, derandomize=True)
@given(st.lists(st.sampled_from(HOSTILE), min_size=1, max_size=30))
def test_a_chunk_reads_each_line_as_that_line_alone(lines: list[bytes]) -> None:
    """No line decides how another is read: the chunk fed at once gives the partials of
    its lines fed one chunk each (admission is in input order in both)."""
    assert _partials([lines]) == _partials([[line] for line in lines])
