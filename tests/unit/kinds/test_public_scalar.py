"""Public means scalar (issue 13, item 3), the same on the fast path and the reference.

A ``public`` field copies a string, number, boolean or null; an object or
array needs ``allow_nested: true``, otherwise the record is dead-lettered
(``nested_public``). The allow-list names top-level fields only, so without
this an upstream schema change nesting personal data under a public field
would release it with no config change.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest
from privstream.config import parse_config
from privstream.kinds import build_plan
from privstream.mechanisms.rng import NoiseKeys
from privstream.pipeline import BatchResult, RecordPlan, process_batch
from privstream.pipeline.noise import Replayable
from privstream.pipeline.reference import process_batch_reference

from tests.support.configs import config_dict
from tests.support.fuzz_messages import PRIVACY, fuzz_cases

SECRET = bytes(range(50, 82))
LEAK = "alice@example.com"


def plan_of(allow_nested: bool | None) -> RecordPlan:
    ts: dict[str, Any] = {"name": "ts", "kind": "public"}
    if allow_nested is not None:
        ts["allow_nested"] = allow_nested
    fields = [ts, {"name": "x", "kind": "real", "bounds": [0, 1], "epsilon": 1.0}]
    return build_plan(parse_config(config_dict(fields, epsilon=1.0)))


def noise(messages: list[bytes]) -> Replayable:
    n = len(messages)
    zeros = np.zeros(n, dtype=np.int64)
    return Replayable(NoiseKeys(SECRET, "raw"), zeros, np.arange(n, dtype=np.int64), messages)


def both(plan: RecordPlan, messages: list[bytes]) -> BatchResult:
    """The fast path's result, after checking the reference gives the very same."""
    fast = process_batch(plan, messages, noise(messages))
    ref = process_batch_reference(plan, messages, noise(messages))
    assert fast.outputs == ref.outputs
    assert fast.output_index == ref.output_index
    assert fast.dead_letters == ref.dead_letters
    return fast


NESTED = [{"t": 1, "email": LEAK}, [LEAK], [], {}, [[1]], {"a": None}]
SCALARS = ["s", "", 0, -1.5, 1e300, True, False, None, 10**30]


def records(values: list[Any]) -> list[bytes]:
    return [json.dumps({"ts": v, "x": 0.5}).encode() for v in values]


@pytest.mark.parametrize("allow_nested", [None, False])
def test_objects_and_arrays_under_a_public_field_are_dead_lettered(
    allow_nested: bool | None,
) -> None:
    messages = records(SCALARS + NESTED)
    result = both(plan_of(allow_nested), messages)
    assert result.output_index == list(range(len(SCALARS)))
    assert [d.index for d in result.dead_letters] == list(range(len(SCALARS), len(messages)))
    for letter in result.dead_letters:
        assert letter.reason == "nested_public"
        assert "allow_nested: true" in letter.detail
        assert LEAK not in letter.detail and "email" not in letter.detail
    assert all(LEAK.encode() not in out for out in result.outputs)


def test_allow_nested_copies_objects_and_arrays_as_they_are() -> None:
    messages = records(SCALARS + NESTED)
    result = both(plan_of(True), messages)
    assert result.output_index == list(range(len(messages)))
    copied = [json.loads(out)["ts"] for out in result.outputs]
    assert copied == SCALARS + NESTED


def test_mixed_batches_agree_byte_for_byte() -> None:
    """Nested values scattered among good rows, missing fields and big floats."""
    values = [NESTED[i % 6] if i % 3 == 0 else SCALARS[i % 9] for i in range(300)]
    messages = [*records(values), b'{"x": 0.5}', b'{"ts": 1e400, "x": 0.5}', b'{"ts": [1e19]}']
    for allow in (False, True):
        both(plan_of(allow), messages)


def test_fuzz_corpus_reasons_and_equivalence() -> None:
    """The integration fuzz corpus (now with nested public values) through both paths.

    Each case's dead-letter reason must be one its table expects, and the two
    paths must agree byte for byte.
    """
    cases = [c for c in fuzz_cases(bad=3_000) if c.value is not None]
    plan = build_plan(parse_config({"kafka": config_dict([])["kafka"], **PRIVACY}))
    messages = [c.value for c in cases if c.value is not None]
    result = both(plan, messages)
    released = set(result.output_index)
    for index, case in enumerate(cases):
        if not case.reasons:
            assert index in released, case.kind
    for letter in result.dead_letters:
        case = cases[letter.index]
        assert letter.reason in case.reasons, (case.kind, letter.reason)
    assert any(cases[d.index].kind == "nested_public_object" for d in result.dead_letters)


def _nested(depth: int) -> object:
    value: object = "leaf"
    for level in range(depth):
        value = [value] if level % 2 else {"k": value}
    return value


def test_allowed_nesting_stops_at_the_depth_every_walk_follows() -> None:
    """A hostile record nested 600 deep once exhausted the stack of the not-finite check
    (``privstream sanitize`` crashed); past MAX_PUBLIC_DEPTH it is dead-lettered."""
    from privstream.pipeline.handlers import MAX_PUBLIC_DEPTH

    depths = [1, MAX_PUBLIC_DEPTH - 1, MAX_PUBLIC_DEPTH, MAX_PUBLIC_DEPTH + 1, 150, 600, 900]
    messages = [json.dumps({"ts": _nested(d), "x": 0.5}).encode() for d in depths]
    result = both(plan_of(True), messages)
    assert result.output_index == [0, 1, 2]
    assert [d.index for d in result.dead_letters] == [3, 4, 5, 6]
    for letter in result.dead_letters:
        assert letter.reason == "nested_public"
        assert f"more than {MAX_PUBLIC_DEPTH} levels" in letter.detail
    assert json.loads(result.outputs[2])["ts"] == _nested(MAX_PUBLIC_DEPTH)
