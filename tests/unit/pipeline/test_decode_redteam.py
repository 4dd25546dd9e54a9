"""Red team of the msgspec batch decoder (``privstream.pipeline.decode``).

Each test is a defect found by probing or differential fuzzing against the
stdlib reference, kept as a regression: the fast path may only accept what
``decode_record`` accepts, with the same values, for every field it reads
(handler, memo and subject fields), and must never crash.
"""

from __future__ import annotations

import json
import random
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from privstream.pipeline.batch import process_batch
from privstream.pipeline.decode import _field_decoder, decode_batch

from tests.unit.pipeline.test_decode import _alone, _released, fields_of
from tests.unit.pipeline.test_fast_path import MIXED, assert_same, noise, plan_of


def _uncached(text: str) -> str:
    """A new str without a cached UTF-8 form, as a config loader hands a name over."""
    fresh: str = json.loads(json.dumps(text))
    assert fresh is not text
    return fresh


@pytest.fixture(autouse=True)
def _fresh_decoders() -> Iterator[None]:
    """No decoder built by another test (from other name objects) is reused here."""
    _field_decoder.cache_clear()
    yield
    _field_decoder.cache_clear()


def _stdlib(raw: bytes, names: list[str]) -> dict[str, object]:
    record = json.loads(raw.decode("utf-8"))
    return {name: record[name] for name in names if name in record}


def test_non_ascii_names_match_their_own_keys_not_the_empty_key() -> None:
    """msgspec 0.22 compares a TypedDict's keys with each name's *cached* UTF-8 form and
    never computes it: a non-ASCII name without one matched nothing but the empty key
    (such names are now read by orjson)."""
    names = [_uncached("température-rt"), _uncached("🙂-rt"), "x"]
    messages = [
        '{"température-rt": 1.5, "🙂-rt": true, "x": 3}'.encode(),
        b'{"": 4.5, "x": 3}',  # no such field: the reference says missing, not 4.5
        '{"température-rt": -2.5, "": 9.5, "x": 3}'.encode(),
        b'{"temp\\u00e9rature-rt": 0.5, "\\ud83d\\ude42-rt": 1, "x": 4}',
    ]
    records, where, slow = decode_batch(messages, None, names)
    assert where == [0, 1, 2, 3] and slow == []
    read = [{n: v for n, v in fields_of(record).items() if n in names} for record in records]
    assert read == [_stdlib(raw, names) for raw in messages]


def test_a_non_ascii_subject_is_read_from_its_own_field() -> None:
    """The worker's path: the ledger's subject (``privacy.subject``, as loaded) must be the
    record's own field, never the value of a key ``""`` a writer adds."""
    plan = plan_of([{"name": "x", "kind": "real", "bounds": [-5, 5], "epsilon": 1.0}])
    subject = _uncached("sübject")
    messages = [
        '{"x": 1.0, "sübject": "alice", "": "mallory"}'.encode(),
        b'{"x": 2.0, "": "mallory"}',
        b'{"x": 3.0, "s\\u00fcbject": 7}',
    ]
    result = process_batch(plan, messages, noise(messages), subject=subject)
    assert result.output_index == [0, 1, 2]
    assert result.subjects == [b"alice", None, b"7"]


def _subject(raw: bytes, field: str) -> bytes | None:
    """The subject as the stdlib reads it (the oracle of ``test_subject_alignment``)."""
    try:
        record = json.loads(raw.decode("utf-8"))
    except (ValueError, RecursionError):
        return None
    value = record.get(field) if isinstance(record, dict) else None
    if isinstance(value, str) and value:
        return value.encode("utf-8", "surrogatepass")
    if type(value) is int:
        return str(value).encode()
    return None


def test_more_name_sets_than_the_decoder_cache_holds() -> None:
    """70 subjects (the cache keeps 64 decoders), each a new non-ASCII str: evicted and
    rebuilt decoders read every subject from its own field."""
    plan = plan_of([{"name": "x", "kind": "real", "bounds": [-5, 5], "epsilon": 1.0}])
    for round_ in range(2):
        for i in range(70):
            subject = _uncached(f"sübject-{i}")
            other = json.dumps(f"sübject-{(i + 1) % 70}")
            messages = [
                f'{{"x": 1, {json.dumps(subject)}: "s{i}", "": "evil", {other}: "o"}}'.encode(),
                f'{{"x": 2, "": "evil", {other}: "o"}}'.encode(),
                f'{{"x": 3, {json.dumps(subject, ensure_ascii=False)}: {i}}}'.encode(),
            ]
            result = process_batch(plan, messages, noise(messages), subject=subject)
            assert result.subjects == [f"s{i}".encode(), None, str(i).encode()], (round_, i)


@pytest.fixture
def unlimited_digits() -> Iterator[None]:
    """No limit on integer digits (``sys.set_int_max_str_digits(0)``), as a program may set."""
    before = sys.get_int_max_str_digits()
    sys.set_int_max_str_digits(0)
    yield
    sys.set_int_max_str_digits(before)


def test_integers_of_any_length_without_a_digit_limit(unlimited_digits: None) -> None:
    """With no limit, integers of 5000 digits, skipped or kept in every scalar kind, and the
    subject, read as the stdlib reads them. msgspec never takes such a batch: the reference
    decides an integer beyond 4,300 digits by its sign whatever the limit (``long_integers``),
    and orjson refuses it."""
    rng = random.Random(31)
    plan = plan_of(MIXED)
    long = "9" * 5000
    for name in ("zz", "pub", "x", "n", "lvl", "id", "m", "s", "b"):
        for digits in (long, "-" + long):
            record = json.dumps(_released(rng, 0))
            message = record.replace(f'"{name}": ', f'"{name}": {digits}, "_": ', 1)
            if name == "zz":
                message = message[:-1] + f', "zz": {digits}}}'
            batch = _alone(rng, message.encode())
            slow = decode_batch(batch, None, ["id"])[2]  # the reference decides the long one
            assert slow == [batch.index(message.encode())]
            result = assert_same(plan, batch)
            subjects = process_batch(plan, batch, noise(batch), subject="id").subjects
            assert subjects == [_subject(batch[i], "id") for i in result.output_index]


#: names msgspec or TypedDict could treat specially, and names with JSON escapes
ODD: list[dict[str, Any]] = [
    {"name": "__class__", "kind": "drop"},
    {"name": "__annotations__", "kind": "real", "bounds": [-5, 5], "epsilon": 1.0},
    {"name": "__total__", "kind": "boolean", "epsilon": 1.0},
    # a backslash in a key, spelled as a one-key path (as a name it is escaped: a"b\\c)
    {"path": ['a"b\\c'], "kind": "integer", "bounds": [0, 10], "epsilon": 1.0},
    {"name": "\x00x", "kind": "public"},
    {
        "name": "m",
        "kind": "categorical",
        "domain": [1, 2],
        "epsilon": 1.0,
        "memoize_by": "__class__",
        "memo_identity_trusted": True,
    },
]


def _odd_record(rng: random.Random) -> dict[str, Any]:
    return {
        "__class__": rng.choice(["d1", 7, "é"]),
        "__annotations__": rng.uniform(-8, 8),
        "__total__": rng.random() < 0.5,
        'a"b\\c': rng.randint(-3, 14),
        "\x00x": rng.choice([1, "é", None]),
        "m": rng.choice([1, 2, 3]),
    }


def test_odd_names_escaped_duplicated_and_shared_with_memo_and_subject() -> None:
    """Each odd name spelled with an escape, given twice (the last one wins), or missing,
    alone among good records; the memo field and the subject are handler fields too."""
    rng = random.Random(32)
    plan = plan_of(ODD)
    spellings = {
        "__class__": '"\\u005f_class__"',
        "__annotations__": '"__annotations\\u005f_"',
        'a"b\\c': '"a\\u0022b\\u005cc"',
        "\x00x": '"\\u0000\\u0078"',
    }
    for name, spelled in spellings.items():
        for form in ("escaped", "duplicate", "missing"):
            record = _odd_record(rng)
            text = json.dumps({k: v for k, v in record.items() if k != name})
            if form == "escaped":
                text = text[:-1] + f", {spelled}: {json.dumps(record[name])}}}"
            elif form == "duplicate":
                text = (
                    f"{{{spelled}: [1], "
                    + text[1:-1]
                    + f", {spelled}: {json.dumps(record[name])}}}"
                )
            good = [json.dumps(_odd_record(rng)).encode() for _ in range(8)]
            batch = [*good[:3], text.encode(), *good[3:]]
            result = assert_same(plan, batch)
            for subject in ("__class__", 'a"b\\c'):
                subjects = process_batch(plan, batch, noise(batch), subject=subject).subjects
                assert subjects == [_subject(batch[i], subject) for i in result.output_index]


UTF8_SAMPLES = [
    b"",
    b"a" * 7,
    b"a" * 8 + b"\xc3\xa9",  # past the first 8-byte word
    b"\xc3\xa9" * 9,
    b"\xff",
    b"\xed\xa0\x80",  # a surrogate, UTF-8 encoded
    b"\xc0\xaf",  # overlong
    b"\xf4\x90\x80\x80",  # beyond U+10FFFF
    b"a" * 15 + b"\xe2\x82",  # truncated at the end
    b"\xf0\x9f\x99\x82",
]


def test_utf8_gives_bytes_decode_verdict_and_keeps_references() -> None:
    """``_columns.utf8``: bytes.decode's verdict on edge and random bytes (fixed seed), False
    for anything not exactly bytes, and no reference gained or lost."""
    from privstream.pipeline import _columns

    rng = random.Random(33)
    alphabet = [0x41, 0x7F, 0x80, 0xBF, 0xC3, 0xA9, 0xE2, 0xED, 0xF0, 0xF4, 0x9F]
    randoms = [bytes(rng.choice(alphabet) for _ in range(rng.randrange(24))) for _ in range(3000)]
    for raw in UTF8_SAMPLES + randoms:
        try:
            raw.decode("utf-8")
        except UnicodeDecodeError:
            valid = False
        else:
            valid = True
        before = sys.getrefcount(raw)
        assert _columns.utf8([b"ok", raw]) is valid, raw
        assert _columns.utf8((raw,)) is valid
        assert sys.getrefcount(raw) == before

    class Bytes(bytes):
        pass

    for odd in (Bytes(b"a"), bytearray(b"a"), memoryview(b"a"), "a", None, 1):
        assert _columns.utf8([b"a", odd]) is False
        assert _columns.longest([b"a", odd]) == -1
    with pytest.raises(TypeError, match="utf8: messages must be a sequence"):
        _columns.utf8(None)  # type: ignore[arg-type]
