"""Differential fuzzing of the batch decoder: ``process_batch`` against the reference.

Random batches of good records with one to three edge records among them (the
msgspec path decodes a batch only when every message passes, so most edges
must be ones it accepts): odd numbers, strings, escaped and duplicate keys,
skipped members, nesting, whitespace and a few byte mutations. Three plans:
scalar kinds with a field-memoized categorical, the structured kinds, and a
plan of odd names (a non-ASCII public field with ``allow_nested``, an
integer-domain categorical without ``unknown_as``, a key-memoized field, a
non-ASCII subject loaded as a config loader loads it). Every batch must give the
reference's positions, dead letters, bytes and observations, in worker mode
(keys, ``subject=``: the stdlib's subject per output) and in file mode
(``process_block``). Fixed seed: deterministic, no false failures.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from typing import Any

import numpy as np
from privstream.pipeline.batch import process_batch, process_block
from privstream.pipeline.decode import _field_decoder
from privstream.pipeline.plan import RecordPlan
from privstream.pipeline.reference import process_batch_reference

from tests.unit.pipeline.test_decode_redteam import _subject, _uncached
from tests.unit.pipeline.test_fast_path import (
    MIXED,
    STRUCTURED,
    good_mixed,
    good_structured,
    noise,
    plan_of,
)

#: the odd plan's names: built once, never given a cached UTF-8 form here
NAME, SUBJECT = _uncached("ñame"), _uncached("sübject")
ODD_PLAN: list[dict[str, Any]] = [
    {"name": NAME, "kind": "public", "allow_nested": True},
    {"name": "ci", "kind": "categorical", "domain": [1, 2, 30, -4], "epsilon": 1.0},
    {
        "name": "mk",
        "kind": "categorical",
        "domain": ["p", "q"],
        "epsilon": 1.0,
        "memo_identity": "message_key",
    },
    {"name": "k2", "kind": "drop"},
    {"name": "r", "kind": "real", "bounds": [0, 1], "epsilon": 1.0},
]


def _good_odd(rng: random.Random, i: int) -> dict[str, Any]:
    return {
        NAME: rng.choice([i, "é", None, [1, {"a": 2.5}], {"b": [True]}]),
        "ci": rng.choice([1, 2, 30, -4]),
        "mk": rng.choice(["p", "q"]),
        "k2": rng.choice(["d1", 7]),
        "r": rng.random(),
        SUBJECT: rng.choice(["alice", 7, "", None]),
    }


#: raw JSON texts msgspec accepts (most) or refuses, for a field or a skipped member
EDGE_VALUES = [
    *["-0", "-0.0", "0e0", "1E2", "1e+2", "1.5e-400", "2.4703282292062328e-324", "1e-320"],
    *["1.7976931348623157e308", "9007199254740993", "9007199254740993.0", "1e19"],
    *["9223372036854775808", "-9223372036854775809", "18446744073709551616"],
    *[str(10**30), "-" + "9" * 309, "1" + "0" * 400, "9" * 1000],
    *["1e999", "NaN", "-Infinity", "01", "1.", "+1", "tru", "[1,]"],
    *['"\\u00e9\\n\\"\\/\\b\\f\\r\\t"', '"\\u0000"', '"\\ud83d\\ude42"', '"\x7f"'],
    *['"\\ud800"', '"\\udc00x"', '"\\x"', '"a\tb"', '"\xff"', '"\xed\xa0\x80"'],
    *["true", "false", "null", "[]", "{}", '{"a":1,"a":[2]}', "[1,[2,[3,{}]]]"],
    *["[" * 150 + "]" * 150, "[" * 199 + "]" * 199, "[" * 201 + "]" * 201],
    *["[" * 5000 + "]" * 5000],
]
SKIPPED_KEYS = ['"zz"', '""', '"x "', '"\\u0000"', '"é"', '"__class__"', '"\\u00f1ame"']
SPACE = ["", "", "", " ", "\n", "\t", "\r\n "]


def _key(rng: random.Random, name: str) -> str:
    """The name as a JSON key, one character spelled as an escape at random."""
    if not rng.random() < 0.3:
        return json.dumps(name, ensure_ascii=rng.random() < 0.5)
    i = rng.randrange(len(name))
    point = ord(name[i])
    if point >= 0x10000:
        high, low = divmod(point - 0x10000, 0x400)
        escape = f"\\u{0xD800 + high:04x}\\u{0xDC00 + low:04x}"
    else:
        escape = f"\\u{point:04x}"
    return json.dumps(name[:i])[:-1] + escape + json.dumps(name[i + 1 :])[1:]


def _edge(rng: random.Random, record: dict[str, Any]) -> bytes:
    members = [(_key(rng, k), json.dumps(v)) for k, v in record.items()]
    if rng.random() < 0.5:  # a field's value replaced by an edge text
        p = rng.randrange(len(members))
        members[p] = (members[p][0], rng.choice(EDGE_VALUES))
    if rng.random() < 0.2 and members:  # a field missing
        del members[rng.randrange(len(members))]
    for _ in range(rng.randrange(3)):  # skipped members, or a field given twice
        key = rng.choice(SKIPPED_KEYS + [m[0] for m in members])
        members.insert(rng.randrange(len(members) + 1), (key, rng.choice(EDGE_VALUES)))
    body = ",".join(
        f"{rng.choice(SPACE)}{k}{rng.choice(SPACE)}:{rng.choice(SPACE)}{v}" for k, v in members
    )
    raw = ("{" + body + rng.choice(SPACE) + "}").encode()
    if rng.random() < 0.05:  # a byte mutation
        at = rng.randrange(len(raw))
        raw = raw[:at] + bytes([rng.choice(b'{}[]",:\\0.eE-\x00\x80\xc3\xff')]) + raw[at + 1 :]
    return raw


def _check(plan: RecordPlan, messages: list[bytes], keys: list[bytes | None], subject: str) -> None:
    fast = process_batch(plan, messages, noise(messages), keys, subject=subject)
    reference = process_batch_reference(plan, messages, noise(messages), keys)
    assert fast.output_index == reference.output_index
    assert fast.dead_letters == reference.dead_letters
    assert fast.outputs == reference.outputs
    assert fast.observations.keys() == reference.observations.keys()
    for name, seen in reference.observations.items():
        assert np.array_equal(fast.observations[name].clamped, seen.clamped)
    assert fast.subjects == [_subject(messages[i], subject) for i in reference.output_index]
    block = process_block(plan, messages, noise(messages))
    unkeyed = process_batch_reference(plan, messages, noise(messages))
    assert block.joined == b"".join(out + b"\n" for out in unkeyed.outputs)
    assert (block.output_index, block.dead_letters) == (unkeyed.output_index, unkeyed.dead_letters)


Good = Callable[[random.Random, int], dict[str, Any]]


def test_random_batches_give_the_reference_results() -> None:
    _field_decoder.cache_clear()  # the odd names' decoder is built from their own str
    rng = random.Random(41)
    plans: list[tuple[RecordPlan, Good, str]] = [
        (plan_of(MIXED), good_mixed, "id"),
        (plan_of(STRUCTURED), good_structured, "id"),
        (plan_of(ODD_PLAN), _good_odd, SUBJECT),
    ]
    whole = 0
    for _ in range(600):
        plan, good, subject = rng.choice(plans)
        messages = [json.dumps(good(rng, i)).encode() for i in range(rng.randint(1, 10))]
        for _ in range(rng.choice([1, 1, 2, 3])):
            edge = _edge(rng, good(rng, 0))
            messages.insert(rng.randrange(len(messages) + 1), edge)
        keys = [rng.choice([None, b"", b"k1", "é".encode()]) for _ in messages]
        _check(plan, messages, keys, subject)
        names = tuple(dict.fromkeys([h.name for h in plan.handlers] + [subject]))
        decode = _field_decoder(names).decode
        try:
            [decode(m) for m in messages]
        except (ValueError, RecursionError):  # msgspec's DecodeError is a ValueError
            continue
        whole += 1
    assert whole > 200  # the msgspec path saw most batches, edges included
