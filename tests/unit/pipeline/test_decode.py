"""The batch decoder (``privstream.pipeline.decode``) against the reference, claim by claim.

msgspec decodes a whole batch only when every message passes; a batch with one
message it refuses goes to orjson message by message. So each edge case here
is tested *alone among good records*, where msgspec is the decoder that sees
it: whatever it accepts must give the reference's bytes, positions, reasons
and observations (``assert_same``).
"""

from __future__ import annotations

import json
import random
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from privstream.pipeline.columns import MISSING
from privstream.pipeline.decode import decode_batch

from tests.unit.pipeline.test_fast_path import (
    MIXED,
    STRUCTURED,
    STRUCTURED_EDGES,
    assert_same,
    edge_messages,
    good_mixed,
    good_structured,
    plan_of,
)

NAMES = [str(field["name"]) for field in MIXED]


def fields_of(record: Any) -> dict[str, Any]:
    """A decoded record's fields as a dict by JSON key: a dict as it is, a struct of the
    field decoder without its absent (``MISSING``) fields."""
    if type(record) is dict:
        return record
    kind = type(record)
    pairs = zip(kind.__struct_fields__, kind.__struct_encode_fields__, strict=True)
    values = {key: getattr(record, attribute) for attribute, key in pairs}
    return {key: value for key, value in values.items() if value is not MISSING}


#: members msgspec skips without building them: each must still be refused where the
#: stdlib refuses it (invalid UTF-8 anywhere, bad escapes and numbers, deep nesting)
SKIPPED = [
    b'"zz":"\xff"',
    b'"\xff":1',
    b'"zz":"\xed\xa0\x80"',  # a surrogate, UTF-8 encoded
    b'"zz":"\xc0\xaf"',  # overlong
    b'"zz":"\xf4\x90\x80\x80"',  # beyond U+10FFFF
    b'"zz":"\xe2\x82"',  # truncated
    b'"zz":"\\ud800"',
    b'"\\udc00":1',
    b'"zz":"\\x41"',
    b'"zz":"\\u12G4"',
    b'"zz":"a\tb"',
    b'"zz":NaN',
    b'"zz":-Infinity',
    b'"zz":1e999',
    b'"zz":01',
    b'"zz":1.',
    b'"zz":+1',
    b'"zz":tru',
    b'"zz":[1,]',
    b'"zz":{"a":1,}',
    b'"zz":' + b"[" * 900 + b"]" * 900,
    b'"zz":' + b"[" * 5000 + b"]" * 5000,
    b'"zz":' + b"1" * 5000,
    b'"zz":"\xc3\xa9\\u00e9\\ud83d\\ude00"',  # valid: taken
    b'"zz":' + b"1" * 400,  # valid: taken
    b'"zz":{"x":[1,{"y":null}],"x":2}',  # valid: taken
]


def _with(record: dict[str, object], member: bytes) -> bytes:
    return json.dumps(record).encode()[:-1] + b"," + member + b"}"


def _released(rng: random.Random, i: int) -> dict[str, object]:
    """A record the reference releases (``good_mixed`` may hold an array in "pub")."""
    record = good_mixed(rng, i)
    return {**record, "pub": i} if isinstance(record["pub"], list) else record


def _good(rng: random.Random, count: int) -> list[bytes]:
    return [json.dumps(_released(rng, i)).encode() for i in range(count)]


def _alone(rng: random.Random, message: bytes) -> list[bytes]:
    batch = _good(rng, 12)
    batch.insert(rng.randrange(13), message)
    return batch


def test_every_edge_case_alone_among_good_records() -> None:
    rng = random.Random(21)
    plan = plan_of(MIXED)
    for message in edge_messages():
        assert_same(plan, _alone(rng, message))


def test_skipped_members_are_refused_where_the_stdlib_refuses_them() -> None:
    rng = random.Random(22)
    plan = plan_of(MIXED)
    for index, member in enumerate(SKIPPED):
        result = assert_same(plan, _alone(rng, _with(_released(rng, 0), member)))
        if index < 6:  # not UTF-8, which msgspec checks only in the strings it builds
            assert [dead.reason for dead in result.dead_letters] == ["invalid_utf8"]


def test_structured_edges_alone_among_good_records() -> None:
    rng = random.Random(23)
    plan = plan_of(STRUCTURED)
    for i, (name, text) in enumerate(STRUCTURED_EDGES):
        record = good_structured(rng, i)
        pairs = [(k, text if k == name else json.dumps(v)) for k, v in record.items()]
        edge = ("{" + ",".join(f"{json.dumps(k)}:{v}" for k, v in pairs) + "}").encode()
        batch = [json.dumps(good_structured(rng, j)).encode() for j in range(12)]
        batch.insert(i % 13, edge)
        assert_same(plan, batch)


def test_integers_beyond_the_double_range_in_every_kind() -> None:
    """msgspec keeps integers exact, of any length: the parsers must clamp or refuse them
    as the reference does (orjson refused these, so only this decoder brings them)."""
    rng = random.Random(24)
    plan = plan_of(MIXED)
    for name in ("pub", "x", "n", "lvl", "id", "m", "s", "b"):
        for digits in ("9" * 309, "-" + "9" * 309, "1" + "0" * 400):
            record = good_mixed(rng, 1)
            text = json.dumps(record).replace(f'"{name}": ', f'"{name}": {digits}, "_": ', 1)
            assert_same(plan, _alone(rng, text.encode()))
    vectors = plan_of(STRUCTURED)
    record = good_structured(rng, 0)
    record["v"] = [1.0, 2.0, 3.0, 10**400]
    for text in (json.dumps(record), json.dumps(record).replace("1" + "0" * 400, "-" + "9" * 309)):
        batch = [json.dumps(good_structured(rng, j)).encode() for j in range(12)]
        assert_same(vectors, [*batch, text.encode()])


@pytest.fixture
def low_digit_limit() -> Iterator[int]:
    """The stdlib's limit on integer digits, lowered as an embedding program may."""
    before = sys.get_int_max_str_digits()
    sys.set_int_max_str_digits(640)
    yield 640
    sys.set_int_max_str_digits(before)


def test_an_integer_longer_than_the_stdlib_reads_is_skipped(low_digit_limit: int) -> None:
    """A skipped member msgspec would read exactly, the reference by its digit count
    (``long_integers``): under the limit in force both release the record, at any length."""
    rng = random.Random(25)
    plan = plan_of(MIXED)
    for digits in (low_digit_limit - 1, low_digit_limit, low_digit_limit + 1, 3000, 10_000):
        message = _with(_released(rng, 0), b'"zz":' + b"7" * digits)
        result = assert_same(plan, _alone(rng, message))
        assert not result.dead_letters


def test_duplicate_and_escaped_keys_read_as_the_stdlib_reads_them() -> None:
    rng = random.Random(26)
    plan = plan_of(MIXED)
    record = json.dumps(good_mixed(rng, 0)).encode()
    for member in (b'"x":"a"', b'"x":1e999', b'"\\u0078":3.5', b'"x":2,"\\u0078":"b"', b'"x ":1'):
        assert_same(plan, _alone(rng, record[:-1] + b"," + member + b"}"))
        assert_same(plan, _alone(rng, b"{" + member + b"," + record[1:]))


def test_whole_messages_msgspec_refuses_or_takes() -> None:
    rng = random.Random(27)
    plan = plan_of(MIXED)
    record = json.dumps(good_mixed(rng, 0)).encode()
    for message in (
        b"\xef\xbb\xbf" + record,
        b" \t\r\n" + record + b" \r\n",
        record + b"x",
        record + record,
        b"[" + record + b"]",
        b"null",
        b"",
        record.replace(b" ", b"\x0c"),
        record.decode().replace('"s"', '"\\u0073"').encode(),
    ):
        assert_same(plan, _alone(rng, message))


def test_good_batches_are_decoded_to_the_fields_read_only() -> None:
    """The claims above test msgspec only if it decodes good batches: it does, and keeps
    no other member (orjson would have kept them all)."""
    rng = random.Random(28)
    messages = [_with(good_mixed(rng, i), b'"extra":[1,2]') for i in range(50)]
    records, where, slow = decode_batch(messages, None, NAMES[1:])
    assert where == list(range(50)) and slow == []
    assert all(set(fields_of(record)) == set(NAMES[1:]) for record in records)
    assert type(records[0]) is not dict  # the field decoder's structs


def test_numbers_read_as_float_reads_their_text() -> None:
    """Random decimal texts, round and hard to round (halfway cases included):
    deterministic, so no false failures."""
    rng = random.Random(29)
    texts = []
    for _ in range(20_000):
        mantissa = f"{rng.randrange(10 ** rng.randrange(1, 18))}.{rng.randrange(10**17):017d}"
        texts.append(f"{rng.choice(['', '-'])}{mantissa}e{rng.randrange(-330, 290)}")
        texts.append(repr(rng.uniform(-1e6, 1e6)))
        texts.append(f"{rng.randrange(1, 10)}{'0' * rng.randrange(25)}5e{rng.randrange(-320, 280)}")
    messages = [f'{{"x":{text}}}'.encode() for text in texts]
    records, _, slow = decode_batch(messages, None, ["x"])
    assert slow == [] and len(records) == len(texts)
    assert [fields_of(record)["x"] for record in records] == [float(text) for text in texts]
