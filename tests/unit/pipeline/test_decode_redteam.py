"""Red team of the msgspec batch decoder (``privstream.pipeline.decode``).

Each test is a defect found by probing or differential fuzzing against the
stdlib reference, kept as a regression: the fast path may only accept what
``decode_record`` accepts, with the same values, for every field it reads
(handler, memo and subject fields), and must never crash.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from privstream.pipeline.batch import process_batch
from privstream.pipeline.decode import _field_decoder, decode_batch

from tests.unit.pipeline.test_fast_path import noise, plan_of


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
    never computes it: a non-ASCII name without one matched nothing but the empty key."""
    names = [_uncached("température-rt"), _uncached("🙂-rt"), "x"]
    messages = [
        '{"température-rt": 1.5, "🙂-rt": true, "x": 3}'.encode(),
        b'{"": 4.5, "x": 3}',  # no such field: the reference says missing, not 4.5
        '{"température-rt": -2.5, "": 9.5, "x": 3}'.encode(),
        b'{"temp\\u00e9rature-rt": 0.5, "\\ud83d\\ude42-rt": 1, "x": 4}',
    ]
    records, where, slow = decode_batch(messages, None, names)
    assert where == [0, 1, 2, 3] and slow == []
    assert records == [_stdlib(raw, names) for raw in messages]


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
