"""Red team 15f of i34-speedfix (092f816): is ``_bounds.may_disagree`` complete? Probes
past red team 15c's and the fix's own tests, all expected to hold (no finding here):

* skipped members' syntax: escapes (``\\q``, ``\\u12zz``, ``\\U0041``), controls, DEL,
  malformed numbers (``01``, ``-``, ``.5``, ``1e+``, ``2.``), escaped duplicate keys,
  lone surrogates nested in skipped arrays and objects, U+2028 and NBSP around the object;
* seeded byte mutations of plausible lines (both decoders on every line the guard, the
  UTF-8 check and the nesting check let through to msgspec);
* doubles' exact halfway points written with at most 18 digits and a 2-digit exponent
  (ties to even in both);
* a chunk fed to ``FileAggregates`` at once against ``run``'s record-at-a-time
  ``Accumulator`` (orjson), with group_by, select_groups, a sum and a correlated count.

Deterministic: fixed seeds, nothing statistical (false-failure probability 0).
"""

from __future__ import annotations

import math
import random
from decimal import Decimal
from typing import Any

import msgspec
import orjson
import pytest
from privstream.aggregates import _bounds, build_aggregates
from privstream.cli.aggregates_file import _checked, _parse
from privstream.pipeline.decode import as_structs, field_structs

from tests.support.aggregates import aggregates_config
from tests.unit.aggregates.test_batch_decode_disagreements import _file_mode, _record_path

KEYS = ("a", "p")  # "o" is skipped (BASE), "p" read


def _fields(struct: Any) -> list[tuple[str, str]]:
    values = [getattr(struct, f"f{position}") for position in range(len(KEYS))]
    return [(type(value).__name__, repr(value)) for value in values]


def _check_line(line: bytes) -> bool:
    """Unless the guard names the line: msgspec's struct of ``KEYS`` (None: refused) is
    the one file mode makes of orjson's object (None: refused, or no object)."""
    if _bounds.may_disagree([line]):
        return False
    fast = field_structs([line], KEYS)
    parsed = _parse(line)
    read = as_structs([parsed], KEYS) if isinstance(parsed, dict) else None
    assert (fast and _fields(fast[0])) == (read and _fields(read[0])), line
    return True


BASE = b'{"a": 1, "o": %s}'
#: skipped members msgspec must check as orjson does (each accepted or refused by both)
SKIPPED = [
    b'"\\q"',
    b'"\\u12zz"',
    b'"\\U0041"',
    b'"\\0"',
    b'"\\a"',
    b'"\\\'"',
    b'"\\\n"',
    b'"\x1f"',
    b'"a\x7fb"',
    b"01",
    b"-",
    b".5",
    b"1e",
    b"1e+",
    b"1ee1",
    b"-00",
    b"2.",
    b"-0.",
    b"[01]",
    b'{"a": 01}',
    b"[1.]",
    b"[-]",
    b'{"a": 1e}',
    b"[1,,2]",
    b"[,1]",
    b"True",
    b"NULL",
    b"-Infinity",
    b'["\\ud800"]',
    b'{"a": "\\ud800"}',
    b'{"\\ud800": 1}',
    b'"\\ud83d\\n"',
    b'"\\ud83dx"',
    b'"\\ud83d\\ud83d\\ude00"',
    b'{"\\u0061": 1, "a": 2}',
    b'"\xe2\x80\xa8"',
]
#: whole lines: keys, duplicates in both spellings, trailing bytes
LINES = [
    b'{"a": 1, "\\u0061": 2}',
    b'{"\\u0061": 2, "a": 1}',
    b'{"a": 1}\xc2\xa0',
    b'{"a": 1}\xe2\x80\xa8',
    b'{"a": 1}\r\n',
    b'{"a": 1}{}',
    b'{"a": 1}]',
    b'{,"a": 1}',
    b'{"a": "\\uD83D\\uDE00"}',
    b'{"a": "\\ude00\\ud83d"}',
]


@pytest.mark.parametrize("line", [BASE % member for member in SKIPPED] + LINES)
def test_the_guard_lets_through_only_lines_both_read_alike(line: bytes) -> None:
    _check_line(line)


ALPHABET = list(b'0123456789eE+-.,:{}[]"\\ utnrfalsebx\t\r\n\x00\x01\x7f')
TOKENS = [
    b"0",
    b"-0",
    b"1.5",
    b"1E-5",
    b'"\\u0041"',
    b"true",
    b"null",
    b'[1,"a"]',
    b'{"a":1}',
    b"123456789012345678",
    b"-9.99e99",
    b"1e-99",
    b'"\\n"',
    b'""',
]


def _mutated(rng: random.Random) -> bytes:
    """A line of the aggregate key ``a`` and others, with up to 3 bytes changed."""
    keys = rng.sample([b"a", b"o", b"p"], rng.randint(0, 3))
    line = bytearray(b"{%s}" % b",".join(b'"%s":%s' % (k, rng.choice(TOKENS)) for k in keys))
    for _ in range(rng.randint(0, 3)):
        at = rng.randint(0, len(line))
        line[at : at + rng.randrange(2)] = bytes([rng.choice(ALPHABET)])
    return bytes(line)


def test_seeded_mutations() -> None:
    """20,000 lines; a fair share reaches msgspec (else the test would test nothing)."""
    rng = random.Random(15)
    lines = [_mutated(rng) for _ in range(20_000)]
    reached = [line for line in lines if _checked(line) and _check_line(line)]
    assert len(reached) > 5_000


def _halfway(rng: random.Random) -> str:
    """The decimal exactly halfway between a double and the next, to 18 digits."""
    value = 10 ** rng.uniform(-100.0, 100.0)
    middle = (Decimal(value) + Decimal(math.nextafter(value, math.inf))) / 2
    return format(middle, ".17e")


def test_halfway_points_round_alike() -> None:
    rng = random.Random(34)
    drawn = (_halfway(rng) for _ in range(20_000))
    tokens = [token for token in drawn if abs(int(token.partition("e")[2])) < 100]
    line = ("[" + ",".join(tokens) + "]").encode()
    assert not _bounds.may_disagree([b"[%s]" % token.encode() for token in tokens])
    fast: list[float] = msgspec.json.decode(line)
    assert [*map(repr, fast)] == [*map(repr, orjson.loads(line))]


BOUND = {"records_per_group": 2, "groups_per_subject": 2}
CONFIGS: list[tuple[dict[str, Any], str | None]] = [
    (
        {
            "name": "h",
            "epsilon": 1.0,
            "query": "histogram",
            "field": "os",
            "contribution": BOUND,
            "group_by": [{"field": "version", "keys": ["7.0", "7.1", 3, -1]}],
        },
        "user",
    ),
    (
        {
            "name": "s",
            "epsilon": 1.0,
            "query": "sum",
            "field": "latency",
            "bounds": [0, 100],
            "contribution": BOUND,
        },
        "user",
    ),
    (
        {
            "name": "m",
            "epsilon": 1.0,
            "delta": 1e-5,
            "query": "mean",
            "field": "latency",
            "bounds": [-5, 100],
            "contribution": BOUND,
            "group_by": [{"field": "version"}],
            "select_groups": True,
        },
        "user",
    ),
    (
        {
            "name": "k",
            "epsilon": 1.0,
            "query": "count",
            "correlation": {"by": "home", "degree": 0.5, "max_group": 2},
        },
        None,
    ),
]
VALUES = [
    b'"u1"',
    b'"\\u0075\\u0031"',
    b"1",
    b"-0",
    b"1.0",
    b"true",
    b"null",
    b'"ios"',
    b'"\\u0069os"',
    b'"7.0"',
    b"3",
    b"3.0",
    b"-1",
    b"999999999999999999",
    b"1E+02",
    b"5.5",
    b"150",
    b"[1]",
    b'{"a":1}',
    b'""',
    b"-0.0",
    b"9007199254740993",
    b'"3"',
]
EXTRA = [
    b"1e999",
    b"12345678901234567890",
    b"NaN",
    b"-9223372036854775809",
    b"1e-400",
    b'"\\ud800"',
    b"0.1",
]
FIELDS = [b"user", b"home", b"os", b"version", b"latency", b"x"]


def _line(rng: random.Random) -> bytes:
    keys = rng.sample(FIELDS, rng.randint(2, len(FIELDS)))
    parts = [b'"%s":%s' % (k, rng.choice(EXTRA if k == b"x" else VALUES)) for k in keys]
    return b"{%s}" % b",".join(parts + parts[:1] * (rng.random() < 0.1))


@pytest.mark.parametrize(("spec", "subject"), CONFIGS)
def test_a_chunk_counts_what_run_counts(spec: dict[str, Any], subject: str | None) -> None:
    """100 seeded chunks of 1 to 12 lines: file mode's partials equal ``run``'s."""
    config = aggregates_config(spec, **({} if subject is None else {"subject": subject}))
    rng = random.Random(6)
    for _ in range(100):
        lines = [_line(rng) for _ in range(rng.randint(1, 12))]
        expected = _record_path(build_aggregates(config), lines, subject)
        assert _file_mode(config, lines, handed=False) == expected, lines
