"""Absent and null values of noised fields: ``on_missing`` (issue 32, item 2).

For every noised kind and every ``on_missing`` mode, a record's release
decision and its output shape must not depend on the field's value:
present in range, out of range, null or absent. ``dead_letter`` (the
default) dead-letters the last two whatever the kind; ``impute`` releases
all four with the same shape; ``null`` releases all four, null exactly
where the value was absent or null (presence is public). The fast path
must give the reference's very bytes.
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from privstream.config import parse_config
from privstream.errors import ConfigError
from privstream.kinds import build_plan
from privstream.mechanisms.rng import NoiseKeys
from privstream.pipeline import RecordPlan, process_batch
from privstream.pipeline.noise import Replayable
from privstream.pipeline.reference import process_batch_reference
from privstream.testing import SeededSource

from tests.support.configs import config_dict

SECRET = bytes(range(100, 132))

#: (field entry without name and on_missing, in-domain impute, in range, out of range)
KINDS: dict[str, tuple[dict[str, Any], Any, Any, Any]] = {
    "real": ({"kind": "real", "bounds": [0, 10], "epsilon": 1.0}, 5.0, 2.5, 1e999),
    "real_piecewise": (
        {"kind": "real", "bounds": [0, 10], "epsilon": 1.0, "mechanism": "piecewise"},
        0,
        7,
        -40,
    ),
    "integer": ({"kind": "integer", "bounds": [0, 10], "epsilon": 1.0}, 3, 4, 10**30),
    "categorical": (
        {"kind": "categorical", "domain": [1, 2, 3], "epsilon": 1.0, "unknown_as": 2},
        3,
        1,
        77,
    ),
    "categorical_unary": (
        {
            "kind": "categorical",
            "domain": ["a", "b", "c"],
            "epsilon": 1.0,
            "mechanism": "unary_encoding",
            "unknown_as": "c",
        },
        "a",
        "b",
        "q",
    ),
    "categorical_hashed": (
        {"kind": "categorical", "epsilon": 1.0, "mechanism": "local_hashing"},
        "none",
        "x",
        "an unseen string",
    ),
    "boolean": ({"kind": "boolean", "epsilon": 1.0}, False, True, True),
    "set": (
        {
            "kind": "set",
            "universe": ["p", "q", "r"],
            "max_items": 2,
            "epsilon": 1.0,
            "on_unknown": "drop",
            "on_too_many": "truncate",
        },
        [],
        ["p"],
        ["p", "q", "r", "zz"],
    ),
    "vector": (
        {"kind": "vector", "dimension": 3, "l2_bound": 1.0, "epsilon": 1.0, "delta": 1e-6},
        [0, 0, 0],
        [0.1, 0.2, 0.3],
        [100, -100, 1e999],
    ),
    "functional": (
        {
            "kind": "functional",
            "grid": [0.0, 0.5, 1.0],
            "bandwidth": 0.5,
            "rkhs_radius": 1.0,
            "epsilon": 1.0,
            "delta": 1e-6,
        },
        [0, 0, 0],
        [0.1, 0.0, -0.1],
        [50, 50, 50],
    ),
    "timestamp": (
        {
            "kind": "timestamp",
            "granularity": "1h",
            "bounds": ["2026-01-01T00:00:00Z", "2027-01-01T00:00:00Z"],
            "epsilon": 1.0,
        },
        "2026-06-01T12:00:00Z",
        "2026-03-01T10:20:30.5+02:00",
        10**30,
    ),
}
MODES = ("dead_letter", "impute", "null")


def plan_of(kind: str, mode: str) -> RecordPlan:
    entry, impute, _, _ = KINDS[kind]
    field = {"name": "f", **entry, "on_missing": mode}
    if mode == "impute":
        field["impute"] = impute
    fields = [{"name": "seq", "kind": "public"}, field]
    return build_plan(parse_config(config_dict(fields, epsilon=2.0, delta=1e-5)))


def messages_of(kind: str) -> list[bytes]:
    """Each value case twice, interleaved: in range, out of range, null, absent."""
    _, _, inside, outside = KINDS[kind]
    values = [json.dumps(inside), json.dumps(outside).replace("Infinity", "1e999"), "null", None]
    texts = [
        f'{{"seq":{i}}}' if value is None else f'{{"seq":{i},"f":{value}}}'
        for i, value in enumerate(values * 2)
    ]
    return [text.encode() for text in texts]


def noise(messages: list[bytes]) -> Replayable:
    n = len(messages)
    offsets = np.arange(n, dtype=np.int64)
    return Replayable(NoiseKeys(SECRET, "raw"), np.zeros(n, dtype=np.int64), offsets, messages)


def shape(value: Any) -> Any:
    """The JSON shape of a released value: its type, and the shape of what it holds."""
    if isinstance(value, list):
        return ("array", len(value) if value and not isinstance(value[0], str) else "strings")
    if isinstance(value, dict):
        return ("object", tuple(sorted(value)))
    return type(value).__name__


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("kind", sorted(KINDS))
def test_release_decision_and_shape_do_not_depend_on_the_value(kind: str, mode: str) -> None:
    plan = plan_of(kind, mode)
    messages = messages_of(kind)
    fast = process_batch(plan, messages, noise(messages))
    reference = process_batch_reference(plan, messages, noise(messages))
    assert (fast.outputs, fast.output_index, fast.dead_letters) == (
        reference.outputs,
        reference.output_index,
        reference.dead_letters,
    )
    absent = [2, 3, 6, 7]  # null and absent, twice
    if mode == "dead_letter":
        assert [d.index for d in fast.dead_letters] == absent
        assert {d.reason for d in fast.dead_letters} <= {"missing_field", "wrong_type"}
        return
    assert fast.dead_letters == []
    assert fast.output_index == list(range(8))
    released = [json.loads(text)["f"] for text in fast.outputs]
    if mode == "impute":
        # the set's shape is an array of strings, which may be empty: its type only
        shapes = {shape(v) if kind != "set" else type(v).__name__ for v in released}
        assert len(shapes) == 1, shapes
    else:
        assert [i for i, v in enumerate(released) if v is None] == absent
        present = {
            shape(v) if kind != "set" else type(v).__name__ for v in released if v is not None
        }
        assert len(present) == 1, present


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_an_impute_value_outside_the_domain_is_refused(kind: str) -> None:
    entry, _, _, outside = KINDS[kind]
    bad = {"set": ["zz"], "vector": [5, 5, 5], "functional": [1]}.get(kind, outside)
    if kind in ("categorical_hashed", "boolean"):
        bad = 7  # no string; no boolean
    field = {"name": "f", **entry, "on_missing": "impute", "impute": bad}
    with pytest.raises(ConfigError, match="impute"):
        parse_config(config_dict([field], epsilon=2.0, delta=1e-5))


PRESENCE: dict[str, Any] = {
    "name": "f",
    "kind": "categorical",
    "domain": ["a", "b", "c"],
    "mechanism": "randomized_response",
    "epsilon": 0.7,
    "on_missing": "impute",
    "impute": "a",
    "presence_epsilon": 0.4,
}


def presence_plan() -> RecordPlan:
    return build_plan(parse_config(config_dict([PRESENCE], epsilon=1.1)))


def exact_pmf(plan: RecordPlan, raw: str | None) -> dict[tuple[str, bool], float]:
    """P(released value, released bit) for a record holding ``raw`` (None: absent), from the
    mechanisms' calibrated parameters: the value is imputed, the bit randomized."""
    value_rr, bit_rr = (planned.handler.mechanism for planned in plan.fields)
    assert value_rr is not None and bit_rr is not None
    keep, other = value_rr.params()["keep_probability"], value_rr.params()["p"]
    bit_keep, bit_flip = bit_rr.params()["keep_probability"], bit_rr.params()["p"]
    true_value, true_bit = ("a", False) if raw is None else (raw, True)
    return {
        (y, b): (keep if y == true_value else other) * (bit_keep if b == true_bit else bit_flip)
        for y in PRESENCE["domain"]
        for b in (False, True)
    }


def test_present_and_absent_records_satisfy_the_dp_inequality() -> None:
    """Neighbouring records, one holding the field and one without it: for every output,
    P(out | one) <= e^(eps + presence_epsilon) P(out | other), with equality somewhere."""
    plan = presence_plan()
    bound = np.exp(0.7 + 0.4)
    worst = 0.0
    for raw in ("a", "b", "c"):
        with_value, without = exact_pmf(plan, raw), exact_pmf(plan, None)
        assert sum(with_value.values()) == pytest.approx(1.0)
        for out in with_value:
            ratio = max(with_value[out] / without[out], without[out] / with_value[out])
            worst = max(worst, ratio)
    assert worst <= bound * (1 + 1e-12)
    assert worst == pytest.approx(bound)  # the epsilon is spent, not more, not less
    assert plan.epsilon == pytest.approx(1.1)  # charged to the record's budget


def test_the_pipeline_releases_an_absent_record_by_that_distribution() -> None:
    """200,000 absent records through the fast path: each of the 6 outputs' frequency lies
    within 5 stderrs of ``exact_pmf`` (false failure below 4e-6 for a random seed)."""
    plan = presence_plan()
    n = 200_000
    messages = [b"{}", b'{"f":null}'] * (n // 2)
    result = process_batch(plan, messages, SeededSource(3))
    assert not result.dead_letters
    outs = [json.loads(text) for text in result.outputs]
    counted = Counter((out["f"], out["f_present"]) for out in outs)
    for out, p in exact_pmf(plan, None).items():
        assert abs(counted[out] / n - p) <= 5 * np.sqrt(p * (1 - p) / n), out


@settings(max_examples=60, deadline=None, derandomize=True)
@given(
    st.lists(
        st.one_of(
            st.none(),
            st.just("absent"),
            st.floats(allow_nan=False),
            st.integers(min_value=-(10**30), max_value=10**30),
        ),
        min_size=1,
        max_size=12,
    ),
    st.sampled_from(["impute", "null"]),
)
def test_any_number_null_or_absence_is_released_alike(values: list[Any], mode: str) -> None:
    """A real field: whatever the values, every record is released, the fast path gives the
    reference's bytes, and the output is a number (null only under ``null``, only where absent)."""
    plan = plan_of("real", mode)
    texts = []
    for i, value in enumerate(values):
        if value == "absent":
            texts.append(f'{{"seq":{i}}}')
        else:
            number = json.dumps(value).replace("Infinity", "1e999")
            texts.append(f'{{"seq":{i},"f":{number}}}')
    messages = [text.encode() for text in texts]
    fast = process_batch(plan, messages, noise(messages))
    reference = process_batch_reference(plan, messages, noise(messages))
    assert fast.outputs == reference.outputs and fast.dead_letters == [] == reference.dead_letters
    for value, text in zip(values, fast.outputs, strict=True):
        released = json.loads(text)["f"]
        if mode == "null" and value in (None, "absent"):
            assert released is None
        else:
            assert isinstance(released, float)


def test_the_release_id_changes_with_the_missing_options() -> None:
    """Each option that shapes the field's output gives it other noise; the bit has its own."""
    base = {"name": "f", "kind": "real", "bounds": [0, 10], "epsilon": 1.0}
    variants = [
        {},
        {"on_missing": "null"},
        {"on_missing": "impute", "impute": 1},
        {"on_missing": "impute", "impute": 2},
        {"on_missing": "impute", "impute": 2, "presence_epsilon": 0.5},
    ]
    ids = []
    for options in variants:
        config = config_dict([{**base, **options}], epsilon=2.0)
        ids.extend(planned.release_id for planned in build_plan(parse_config(config)).fields)
    assert len(ids) == len(variants) + 1  # the last one adds f_present
    assert len(set(ids)) == len(ids)
